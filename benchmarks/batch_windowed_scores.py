"""Batch windowed scores: count and sum per key per 1-minute window, on four engines.

One command runs the same workload with sparkbeam on Spark, Apache Beam's local
FnApiRunner, a hand-written PySpark DataFrame query and hand-written PySpark RDD code,
checks that every engine produced exactly the same {(key, window_start): (count, sum)},
and prints each one's wall-clock time and the ratios::

    python benchmarks/batch_windowed_scores.py --events 100000 --events 1000000
    python benchmarks/batch_windowed_scores.py --events 1000000 --peers sparkbeam,dataframe,rdd

The events (1,000 keys, integer scores, event times over one hour, arriving out of
event-time order) are generated once per size from a seed and written once to a CSV file
that every peer reads (``--source memory`` hands them the in-memory list instead).
benchmarks/README.md says what is timed and how to read the table. Exit status: 0 when
every peer ran and agreed, 1 when results disagree, 2 when a peer failed or was unavailable.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import attrs

# A sibling module: run as a file, this script has its own directory on sys.path.
from measuring import MachineWatch, PeerProfile, driver_peak_rss_mb, start_spark

KEY_COUNT = 1000
WINDOW_SECONDS = 60
WINDOW_MS = WINDOW_SECONDS * 1000
HOUR_MS = 3_600_000
# 2026-01-01T00:00:00Z: minute-aligned, so the hour of event time is exactly 60 windows.
EPOCH_MS = 1_767_225_600_000
# Arrival lags event time by an exponential delay, so arrival order is not event-time order.
MEAN_DELAY_MS = 30_000

Event = tuple[str, int, int]  # (key, score, event time in epoch milliseconds)
Row = tuple[str, int, int, int]  # (key, window start in epoch milliseconds, count, sum)
Totals = dict[tuple[str, int], tuple[int, int]]
RunFn = Callable[["Workload"], list[Row]]

ALL_PEERS = ("sparkbeam", "beam", "dataframe", "rdd")


# -- the workload ----------------------------------------------------------------------


def generate_events(count: int, seed: int) -> list[Event]:
    """``count`` events in arrival order, the same for the same seed."""
    rng = random.Random(seed)
    keys = [f"user{index:04d}" for index in range(KEY_COUNT)]
    arrivals = []
    for _ in range(count):
        event_ms = EPOCH_MS + rng.randrange(HOUR_MS)
        arrival_ms = event_ms + int(rng.expovariate(1 / MEAN_DELAY_MS))
        arrivals.append((arrival_ms, rng.choice(keys), rng.randint(1, 100), event_ms))
    arrivals.sort()
    return [(key, score, event_ms) for _, key, score, event_ms in arrivals]


def share_behind(events: list[Event]) -> float:
    """The share of events whose event time is earlier than one that arrived before them."""
    latest = EPOCH_MS - 1
    behind = 0
    for _, _, event_ms in events:
        if event_ms < latest:
            behind += 1
        else:
            latest = event_ms
    return behind / max(1, len(events))


def write_events(events: list[Event], path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{key},{score},{event_ms}\n" for key, score, event_ms in events)


def expected_totals(events: list[Event]) -> Totals:
    """The oracle: the answer computed by a plain Python loop, with no engine involved."""
    counts: dict[tuple[str, int], int] = {}
    sums: dict[tuple[str, int], int] = {}
    for key, score, event_ms in events:
        slot = (key, event_ms - event_ms % WINDOW_MS)
        counts[slot] = counts.get(slot, 0) + 1
        sums[slot] = sums.get(slot, 0) + score
    return {slot: (counts[slot], sums[slot]) for slot in counts}


@attrs.frozen
class Workload:
    """What a peer runs on: the events, and the CSV file holding them when the source is a file."""

    events: list[Event] = attrs.field(repr=lambda events: f"<{len(events)} events>")
    path: str | None


# -- what every peer shares --------------------------------------------------------------
# Module-level functions and classes of __main__ are pickled by value (cloudpickle in
# both PySpark and Beam), so executors and Beam's workers need not import this script.


def parse_line(line: str) -> Event:
    key, score, event_ms = line.split(",")
    return key, int(score), int(event_ms)


def stamp_line(line: str, timestamped_value: type) -> Any:
    # Seconds as a float are exact at window boundaries (whole seconds) and at worst 1 µs off
    # elsewhere, which never moves an event across a minute boundary: both SDKs agree.
    key, score, event_ms = line.split(",")
    return timestamped_value((key, int(score)), int(event_ms) / 1000)


def stamp_event(event: Event, timestamped_value: type) -> Any:
    key, score, event_ms = event
    return timestamped_value((key, score), event_ms / 1000)


class CountAndSumLogic:
    """(count, sum) of integer scores; mixed into each SDK's CombineFn so both run this code."""

    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add_input(self, accumulator: tuple[int, int], score: int) -> tuple[int, int]:
        count, total = accumulator
        return count + 1, total + score

    def merge_accumulators(self, accumulators: Any) -> tuple[int, int]:
        count = total = 0
        for partial_count, partial_total in accumulators:
            count += partial_count
            total += partial_total
        return count, total

    def extract_output(self, accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator


def window_pair(event: Event) -> tuple[tuple[str, int], tuple[int, int]]:
    key, score, event_ms = event
    return (key, event_ms - event_ms % WINDOW_MS), (1, score)


def add_pairs(left: tuple[int, int], right: tuple[int, int]) -> tuple[int, int]:
    return left[0] + right[0], left[1] + right[1]


@attrs.frozen
class Bench:
    """What every peer shares: the one SparkSession, its master, the shuffle width, a scratch dir."""

    spark: Any
    master: str
    partitions: int
    workdir: str


class PeerUnavailable(Exception):
    """A peer cannot run here (a missing package); the others still run."""


# -- the peers: each prepare_* does its imports (untimed) and returns the timed run --------


def prepare_sparkbeam(bench: Bench) -> RunFn:
    import sparkbeam as beam
    from sparkbeam import window

    class CountAndSum(CountAndSumLogic, beam.CombineFn):
        pass

    def run(workload: Workload) -> list[Row]:
        options = beam.PipelineOptions(spark_master=bench.master, state_partitions=bench.partitions)
        pipeline = beam.Pipeline(options=options)
        if workload.path is not None:
            stamped = (
                pipeline
                | "Read" >> beam.io.ReadFromText(workload.path)
                | "Stamp" >> beam.Map(stamp_line, window.TimestampedValue)
            )
        else:
            stamped = (
                pipeline
                | "Create" >> beam.Create(workload.events)
                | "Stamp" >> beam.Map(stamp_event, window.TimestampedValue)
            )
        totals = beam.capture(
            stamped
            | "Minutes" >> beam.WindowInto(window.FixedWindows(WINDOW_SECONDS))
            | "CountAndSum" >> beam.CombinePerKey(CountAndSum())
        )
        result = pipeline.run()
        rows = []
        for emission in result.emissions(totals):
            key, (count, total) = emission.value
            rows.append((key, emission.window.start.micros // 1000, count, total))
        return rows

    return run


def prepare_beam(bench: Bench) -> RunFn:
    try:
        import apache_beam as ab
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    except ImportError as error:
        msg = f"Apache Beam is not installed ({error}); pip install apache-beam"
        raise PeerUnavailable(msg) from None

    class CountAndSum(CountAndSumLogic, ab.CombineFn):
        pass

    def as_line(key_totals: Any, window: Any = ab.DoFn.WindowParam) -> str:
        key, (count, total) = key_totals
        return f"{key},{window.start.micros // 1000},{count},{total}"

    def run(workload: Workload) -> list[Row]:
        # Beam pickles its DoFns with their globals, so a list here would not be the one they
        # append to: results travel by file.
        output_dir = tempfile.mkdtemp(prefix="beam-out-", dir=bench.workdir)
        # An explicit empty flag list: Beam would otherwise parse (and warn about) our sys.argv.
        with ab.Pipeline(runner=FnApiRunner(), options=PipelineOptions([])) as pipeline:
            if workload.path is not None:
                stamped = (
                    pipeline
                    | "Read" >> ab.io.ReadFromText(workload.path)
                    | "Stamp" >> ab.Map(stamp_line, ab.window.TimestampedValue)
                )
            else:
                stamped = (
                    pipeline
                    | "Create" >> ab.Create(workload.events)
                    | "Stamp" >> ab.Map(stamp_event, ab.window.TimestampedValue)
                )
            (
                stamped
                | "Minutes" >> ab.WindowInto(ab.window.FixedWindows(WINDOW_SECONDS))
                | "CountAndSum" >> ab.CombinePerKey(CountAndSum())
                | "AsLine" >> ab.Map(as_line)
                | "Write" >> ab.io.WriteToText(os.path.join(output_dir, "totals"))
            )
        rows = []
        for shard in glob.glob(os.path.join(output_dir, "totals*")):
            with open(shard, encoding="utf-8") as handle:
                for line in handle:
                    key, window_ms, count, total = line.rstrip("\n").split(",")
                    rows.append((key, int(window_ms), int(count), int(total)))
        shutil.rmtree(output_dir, ignore_errors=True)
        return rows

    return run


def prepare_dataframe(bench: Bench) -> RunFn:
    from pyspark.sql import functions as F

    spark = bench.spark
    schema = "key STRING, score INT, event_ms LONG"

    def run(workload: Workload) -> list[Row]:
        if workload.path is not None:
            events = spark.read.csv(workload.path, schema=schema)
        else:
            events = spark.createDataFrame(workload.events, schema)
        # Tumbling windows: Spark aligns them to the epoch, as FixedWindows(60) does.
        minute = F.window(F.timestamp_millis("event_ms"), f"{WINDOW_SECONDS} seconds")
        totals = (
            events.groupBy("key", minute.alias("window"))
            .agg(F.count("*").alias("count"), F.sum("score").alias("total"))
            .select("key", F.unix_millis("window.start").alias("window_ms"), "count", "total")
        )
        return [(row.key, row.window_ms, row["count"], row.total) for row in totals.collect()]

    return run


def prepare_rdd(bench: Bench) -> RunFn:
    sc = bench.spark.sparkContext

    def run(workload: Workload) -> list[Row]:
        if workload.path is not None:
            # textFile's default split count, as sparkbeam's ReadFromText uses it.
            events = sc.textFile(workload.path).map(parse_line)
        else:
            events = sc.parallelize(workload.events, bench.partitions)
        totals = events.map(window_pair).reduceByKey(add_pairs, bench.partitions)
        return [
            (key, window_ms, count, total) for (key, window_ms), (count, total) in totals.collect()
        ]

    return run


PREPARE: dict[str, Callable[[Bench], RunFn]] = {
    "sparkbeam": prepare_sparkbeam,
    "beam": prepare_beam,
    "dataframe": prepare_dataframe,
    "rdd": prepare_rdd,
}

DESCRIBE = {
    "sparkbeam": "sparkbeam on Spark: Read -> Map(TimestampedValue) -> FixedWindows(60) -> CombinePerKey",
    "beam": "Apache Beam, FnApiRunner in this process, same pipeline, results written to a file",
    "dataframe": "PySpark DataFrame: groupBy(key, window(1 minute)).agg(count, sum)",
    "rdd": "PySpark RDD: map to ((key, window_start), (1, score)) -> reduceByKey",
}


# -- running and checking ----------------------------------------------------------------


def compare(expected: Totals, rows: list[Row]) -> str | None:
    """None when ``rows`` is exactly ``expected``, else what differs, with a few examples."""
    got: Totals = {}
    duplicates = []
    for key, window_ms, count, total in rows:
        slot = (key, window_ms)
        if slot in got:
            duplicates.append(slot)
        got[slot] = (count, total)
    missing = [slot for slot in expected if slot not in got]
    extra = [slot for slot in got if slot not in expected]
    wrong = [slot for slot in expected if slot in got and got[slot] != expected[slot]]
    if not (duplicates or missing or extra or wrong):
        return None
    problems = []
    for name, slots in (("duplicated", duplicates), ("missing", missing), ("unexpected", extra)):
        if slots:
            problems.append(f"{len(slots)} {name} (key, window), e.g. {slots[:2]}")
    if wrong:
        examples = [f"{slot}: {got[slot]} != {expected[slot]}" for slot in wrong[:2]]
        problems.append(f"{len(wrong)} wrong (count, sum), e.g. {'; '.join(examples)}")
    return "; ".join(problems)


@attrs.define
class Outcome:
    """One peer at one size: its timed runs and what the best of them cost."""

    peer: str
    runs: list[float] = attrs.field(factory=list)
    seconds: float | None = None  # the best run
    cpu_seconds: float | None = None  # CPU time of this process tree in the best run
    others_cores: float | None = None  # cores other processes kept busy during the best run
    peak_mb: float | None = None  # over every timed run
    problem: str | None = None  # why it did not run, or how its result differs
    disagrees: bool = False

    def record(self, seconds: float, watch: MachineWatch) -> None:
        self.runs.append(seconds)
        if watch.peak_mb is not None:
            self.peak_mb = max(self.peak_mb or 0.0, watch.peak_mb)
        if self.seconds is None or seconds < self.seconds:
            self.seconds = seconds
            self.cpu_seconds = watch.cpu_seconds
            self.others_cores = watch.others_cores

    def fail(self, error: Exception) -> None:
        traceback.print_exc(file=sys.stderr)
        text = str(error).strip()
        self.problem = f"failed: {type(error).__name__}: {text.splitlines()[0] if text else ''}"
        self.seconds = None


def measure(
    runs: dict[str, RunFn],
    outcomes: list[Outcome],
    workload: Workload,
    warmup: Workload | None,
    expected: Totals,
    repeat: int,
    profiles: dict[str, PeerProfile],
) -> None:
    """Warm every peer up, then time them in rounds, one run of each peer per round.

    Rounds rather than each peer's runs back to back: when other processes load the machine
    for a while, every peer gets a run in and out of that while, and the best runs compare.
    """
    live = [o for o in outcomes if o.problem is None]
    for outcome in live:
        if warmup is None:
            break
        try:
            # Not timed: starts PySpark's Python workers, loads classes, fills import caches.
            runs[outcome.peer](warmup)
        except Exception as error:
            outcome.fail(error)
    for round_index in range(repeat):
        report = []
        for outcome in [o for o in live if o.problem is None]:
            try:
                with MachineWatch() as watch, profiles[outcome.peer].run():
                    started = time.perf_counter()
                    rows = runs[outcome.peer](workload)
                    seconds = time.perf_counter() - started
            except Exception as error:
                outcome.fail(error)
                report.append(f"{outcome.peer} failed")
                continue
            outcome.record(seconds, watch)
            report.append(f"{outcome.peer} {seconds:.2f} s")
            difference = compare(expected, rows)
            if difference is not None:
                outcome.problem = f"disagrees with the oracle: {difference}"
                outcome.disagrees = True
        print(f"   round {round_index + 1}/{repeat}: {', '.join(report)}", flush=True)


# -- reporting ---------------------------------------------------------------------------


# Other processes using more than this many cores make a timing suspect on a small machine.
BUSY_ELSEWHERE_WARNING = 0.25


def format_table(events: int, outcomes: list[Outcome]) -> str:
    timed = [o for o in outcomes if o.seconds is not None and not o.disagrees]
    fastest = min((o.seconds for o in timed if o.seconds is not None), default=None)
    reference = next((o.seconds for o in timed if o.peer == "sparkbeam"), None)
    header = (
        f"{'peer':<10} {'seconds':>8} {'events/s':>10} {'vs sparkbeam':>12} {'vs fastest':>10} "
        f"{'CPU s':>7} {'peak MB':>8} {'others':>6}  result"
    )
    lines = [header, "-" * len(header)]
    for o in outcomes:
        if o.seconds is None:
            lines.append(
                f"{o.peer:<10} {'-':>8} {'-':>10} {'-':>12} {'-':>10} {'-':>7} {'-':>8} {'-':>6}  "
                f"{o.problem}"
            )
            continue
        vs_sparkbeam = f"{o.seconds / reference:.2f}x" if reference else "-"
        vs_fastest = f"{o.seconds / fastest:.2f}x" if fastest and not o.disagrees else "-"
        peak = f"{o.peak_mb:.0f}" if o.peak_mb is not None else "-"
        others = f"{o.others_cores:.2f}" if o.others_cores is not None else "-"
        cpu = f"{o.cpu_seconds:.1f}" if o.cpu_seconds is not None else "-"
        runs = "" if len(o.runs) < 2 else f" (runs: {', '.join(f'{s:.2f}' for s in o.runs)})"
        lines.append(
            f"{o.peer:<10} {o.seconds:>8.2f} {events / o.seconds:>10,.0f} {vs_sparkbeam:>12} "
            f"{vs_fastest:>10} {cpu:>7} {peak:>8} {others:>6}  {o.problem or 'agrees'}{runs}"
        )
    busy = [o.peer for o in outcomes if (o.others_cores or 0) > BUSY_ELSEWHERE_WARNING]
    if busy:
        lines.append(
            f"warning: other processes kept more than {BUSY_ELSEWHERE_WARNING} cores busy during "
            f"{', '.join(busy)}; those timings are inflated (see 'others')"
        )
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events",
        type=int,
        action="append",
        help="events per run; repeat for several sizes (default 100000)",
    )
    parser.add_argument(
        "--peers",
        default=",".join(ALL_PEERS),
        help=f"comma-separated, from {','.join(ALL_PEERS)} (default: all)",
    )
    parser.add_argument(
        "--master", default="local[*]", help="Spark master of the shared session (default local[*])"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed runs per peer; the best is reported (default 1)",
    )
    parser.add_argument(
        "--warmup-events",
        type=int,
        default=10_000,
        help="untimed warm-up run per peer on this many events; 0 for none",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="shuffle partitions for every Spark peer (default: Spark's default parallelism, at least 2)",
    )
    parser.add_argument(
        "--source",
        choices=("file", "memory"),
        default="file",
        help="peers read a CSV file (default) or get the in-memory list",
    )
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--workdir",
        default=None,
        help="where the event files go (default: a temporary directory, removed after)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting for the shared session (repeatable)",
    )
    parser.add_argument(
        "--profile-dir",
        default=None,
        help="profile each peer's timed runs into DIR (driver cProfile; executor profiles too with --spark-conf spark.python.profile=true); slows every peer down",
    )
    args = parser.parse_args(argv)
    args.events = args.events or [100_000]
    args.peers = [name.strip() for name in args.peers.split(",") if name.strip()]
    unknown = [name for name in args.peers if name not in PREPARE]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(ALL_PEERS)}")
    if args.repeat < 1 or any(count < 1 for count in args.events):
        parser.error("--repeat and --events must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="sparkbeam-bench-")
    os.makedirs(workdir, exist_ok=True)
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
    print(
        f"python {sys.version.split()[0]} on {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}; peers: {', '.join(args.peers)}"
    )
    started = time.perf_counter()
    spark = start_spark(args.master, args.spark_conf, "sparkbeam-benchmark")
    session_seconds = time.perf_counter() - started
    sc = spark.sparkContext
    partitions = args.partitions or max(2, sc.defaultParallelism)
    # DataFrame shuffles get the same width as sparkbeam's and the RDD code's.
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    import pyspark

    print(
        f"SparkSession started in {session_seconds:.2f} s (not in any peer's time): pyspark "
        f"{pyspark.__version__}, master {sc.master}, default parallelism {sc.defaultParallelism}, "
        f"{partitions} shuffle partitions"
    )
    bench = Bench(spark, sc.master, partitions, workdir)

    runs: dict[str, RunFn] = {}
    unavailable: dict[str, str] = {}
    for peer in args.peers:
        try:
            before = time.perf_counter()
            runs[peer] = PREPARE[peer](bench)
            print(
                f"  {peer}: {DESCRIBE[peer]} (imports {time.perf_counter() - before:.2f} s, untimed)"
            )
        except Exception as error:
            unavailable[peer] = f"unavailable: {error}"
            print(f"  {peer}: {unavailable[peer]}")

    exit_status = 0
    try:
        for count in args.events:
            print()
            before = time.perf_counter()
            events = generate_events(count, args.seed)
            generated = time.perf_counter() - before
            before = time.perf_counter()
            path = None
            if args.source == "file":
                path = os.path.join(workdir, f"events-{count}.csv")
                write_events(events, path)
            written = time.perf_counter() - before
            before = time.perf_counter()
            expected = expected_totals(events)
            oracle_seconds = time.perf_counter() - before
            warmup = None
            if args.warmup_events:
                warmup_events = events[: args.warmup_events]
                warmup_path = None
                if path is not None:
                    warmup_path = os.path.join(workdir, f"warmup-{len(warmup_events)}.csv")
                    write_events(warmup_events, warmup_path)
                warmup = Workload(warmup_events, warmup_path)
            workload = Workload(events, path)
            size = f"{os.path.getsize(path) / 1e6:.1f} MB file" if path else "in-memory list"
            print(
                f"== {count:,} events, {KEY_COUNT} keys, {len(expected):,} (key, window) results; "
                f"{share_behind(events):.0%} arrive after an event with a later event time; source: {size}"
            )
            print(
                f"   untimed: generate {generated:.2f} s, write {written:.2f} s, "
                f"plain-Python oracle {oracle_seconds:.2f} s (one core, no engine)"
            )
            outcomes = [Outcome(peer, problem=unavailable.get(peer)) for peer in args.peers]
            profiles = {
                peer: PeerProfile(args.profile_dir, f"{peer}-{count}", spark) for peer in args.peers
            }
            measure(runs, outcomes, workload, warmup, expected, args.repeat, profiles)
            for profile in profiles.values():
                summary = profile.summary(count)
                if summary is not None:
                    print(f"   {summary}")
            print(format_table(count, outcomes))
            if any(o.disagrees for o in outcomes):
                exit_status = 1
            elif any(o.seconds is None for o in outcomes) and exit_status == 0:
                exit_status = 2
    finally:
        spark.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(
        "seconds: best wall-clock of the timed runs (build, run, results on the driver); CPU s, "
        "others: during that run; "
        "vs sparkbeam / vs fastest: this peer's seconds divided by theirs (below 1x is faster)"
    )
    print(
        "peak MB: PSS of this process + Spark's JVM + PySpark's workers, sampled every 0.2 s "
        f"during the peer's timed runs; this Python process alone peaked at {driver_peak_rss_mb():.0f} MB "
        "RSS over the whole command"
    )
    print(
        "CPU s: CPU time of this process + the JVM + PySpark's workers; "
        "others: cores that processes outside this command kept busy"
    )
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
