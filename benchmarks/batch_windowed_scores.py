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
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import attrs

# Sibling modules: run as a file, this script has its own directory on sys.path.
from measuring import MachineWatch, PeerProfile, driver_peak_rss_mb
from workloads import (
    KEY_COUNT,
    WINDOW_MS,
    WINDOW_SECONDS,
    Bench,
    CountAndSumLogic,
    Event,
    PeerUnavailable,
    Row,
    Totals,
    add_common_arguments,
    busy_warning,
    cell,
    compare,
    connect_remote,
    expected_totals,
    failure,
    generate_events,
    make_workdir,
    parse_common,
    prepare_peers,
    prism_flags,
    read_back,
    require_apache_beam,
    runs_note,
    share_behind,
    start_bench,
    stop_bench,
    write_events,
)

RunFn = Callable[["Workload"], list[Row]]

ALL_PEERS = ("sparkbeam", "sparkbeam-connect", "sparkbeam-rows", "sparkbeam-rows-connect", "sparkbeam-rows-connect-general", "beam", "prism", "beam-on-sparkbeam", "dataframe", "rdd")


@attrs.frozen
class Workload:
    """What a peer runs on: the events, and the CSV file holding them when the source is a
    file; ``rows``: the same events as ``Row(key, score, t)`` (t in seconds), made before
    anything is timed, when the schema'd peer starts from memory (else it reads the file)."""

    events: list[Event] = attrs.field(repr=lambda events: f"<{len(events)} events>")
    path: str | None
    rows: list[Any] | None = attrs.field(default=None, repr=False)


def as_rows(events: list[Event]) -> list[Any]:
    from sparkbeam import Row

    return [Row(key=key, score=score, t=event_ms / 1000) for key, score, event_ms in events]


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


def window_pair(event: Event) -> tuple[tuple[str, int], tuple[int, int]]:
    key, score, event_ms = event
    return (key, event_ms - event_ms % WINDOW_MS), (1, score)


def add_pairs(left: tuple[int, int], right: tuple[int, int]) -> tuple[int, int]:
    return left[0] + right[0], left[1] + right[1]


# -- the peers: each prepare_* does its imports (untimed) and returns the timed run --------


def prepare_sparkbeam(bench: Bench, connect: bool = False) -> RunFn:
    """``connect``: the same pipeline through Spark Connect, on this command's one local
    Connect server (``connect_remote``), the classic session's master and widths."""
    import sparkbeam as beam
    from sparkbeam import window

    class CountAndSum(CountAndSumLogic, beam.CombineFn):
        pass

    where = {"spark_remote": connect_remote(bench)} if connect else {"spark_master": bench.master}

    def run(workload: Workload) -> list[Row]:
        options = beam.PipelineOptions(state_partitions=bench.partitions, **where)
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


def prepare_sparkbeam_rows(bench: Bench, connect: bool = False, sql_plans: bool = True) -> RunFn:
    """The schema'd pipeline: ReadFromCsv (the dataframe peer's file) -> AssignTimestamps ->
    FixedWindows -> GroupBy.aggregate_field, which sparkbeam runs as one Spark SQL plan
    (README: "Schema'd aggregations as Spark SQL"); ``--rows-source memory`` starts from a
    Create of in-memory Rows instead. ``connect``: through this command's Spark Connect
    server (``prepare_sparkbeam``); ``sql_plans=False``: on the general path."""
    import sparkbeam as beam
    from sparkbeam import window
    from sparkbeam.schemas import AssignTimestamps
    from sparkbeam.transforms.combiners import CountCombineFn

    where = {"spark_remote": connect_remote(bench)} if connect else {"spark_master": bench.master}

    def run(workload: Workload) -> list[Row]:
        options = beam.PipelineOptions(state_partitions=bench.partitions, sql_plans=sql_plans, **where)
        pipeline = beam.Pipeline(options=options)
        if workload.rows is not None:
            stamped = pipeline | "Create" >> beam.Create(workload.rows) | "Stamp" >> AssignTimestamps("t")
        elif workload.path is not None:
            stamped = (
                pipeline
                | "Read" >> beam.io.ReadFromCsv(workload.path, header=None, names=["key", "score", "event_ms"])
                | "Stamp" >> AssignTimestamps("event_ms", unit="ms")
            )
        else:
            msg = "the sparkbeam-rows peer needs the events as a CSV file or as Rows (Workload.rows)"
            raise PeerUnavailable(msg)
        totals = beam.capture(
            stamped
            | "Minutes" >> beam.WindowInto(window.FixedWindows(WINDOW_SECONDS))
            | "CountAndSum" >> beam.GroupBy("key").aggregate_field("score", CountCombineFn(), "count").aggregate_field("score", sum, "total")
        )
        result = pipeline.run()
        return [
            (e.value.key, e.window.start.micros // 1000, e.value.count, e.value.total) for e in result.emissions(totals)
        ]

    return run


def prepare_beam(bench: Bench, runner: str = "fnapi") -> RunFn:
    """The pipeline written with apache_beam, on Beam's FnApiRunner (``fnapi``), on Beam's
    Prism runner (``prism``: a job server of this command, LOOPBACK) or, unchanged, with
    ``--runner=sparkbeam.SparkRunner`` on the shared session (``sparkbeam``)."""
    require_apache_beam()
    prism = prism_flags() if runner == "prism" else []
    import apache_beam as ab
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    # An explicit flag list: Beam would otherwise parse (and warn about) our sys.argv.
    flags = ["--runner=sparkbeam.SparkRunner", f"--spark_master={bench.master}", f"--state_partitions={bench.partitions}"]

    class CountAndSum(CountAndSumLogic, ab.CombineFn):
        pass

    def as_line(key_totals: Any, window: Any = ab.DoFn.WindowParam) -> str:
        key, (count, total) = key_totals
        return f"{key},{window.start.micros // 1000},{count},{total}"

    def run(workload: Workload) -> list[Row]:
        # Beam pickles its DoFns with their globals, so a list here would not be the one they
        # append to: results travel by file.
        output_dir = tempfile.mkdtemp(prefix="beam-out-", dir=bench.workdir)
        beam_run = {
            "fnapi": {"runner": FnApiRunner(), "options": PipelineOptions([])},
            "prism": {"options": PipelineOptions(prism)},
            "sparkbeam": {"options": PipelineOptions(flags)},
        }[runner]
        with ab.Pipeline(**beam_run) as pipeline:
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
        return [
            (key, int(window_ms), int(count), int(total))
            for key, window_ms, count, total in read_back(output_dir, "totals")
        ]

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
    "sparkbeam-connect": lambda bench: prepare_sparkbeam(bench, connect=True),
    "sparkbeam-rows": prepare_sparkbeam_rows,
    "sparkbeam-rows-connect": lambda bench: prepare_sparkbeam_rows(bench, connect=True),
    "sparkbeam-rows-connect-general": lambda bench: prepare_sparkbeam_rows(bench, connect=True, sql_plans=False),
    "beam": prepare_beam,
    "prism": lambda bench: prepare_beam(bench, runner="prism"),
    "beam-on-sparkbeam": lambda bench: prepare_beam(bench, runner="sparkbeam"),
    "dataframe": prepare_dataframe,
    "rdd": prepare_rdd,
}

DESCRIBE = {
    "sparkbeam": "sparkbeam on Spark: Read -> Map(TimestampedValue) -> FixedWindows(60) -> CombinePerKey",
    "sparkbeam-connect": "the sparkbeam peer's pipeline through Spark Connect (--spark_remote), on a local Connect server this command starts (tools/connect_server.py) with the same master and widths",
    "sparkbeam-rows": "sparkbeam on Spark, schema'd: ReadFromCsv (or Create(Rows) with --rows-source memory) -> AssignTimestamps -> FixedWindows(60) -> GroupBy.aggregate_field (a Spark SQL plan)",
    "sparkbeam-rows-connect": "the sparkbeam-rows peer's pipeline through Spark Connect (its SQL plan), on the sparkbeam-connect peer's server",
    "sparkbeam-rows-connect-general": "the sparkbeam-rows peer's pipeline through Spark Connect with --no_sql_plans (the general path, as before SQL plans ran under Connect)",
    "beam": "Apache Beam, FnApiRunner in this process, same pipeline, results written to a file",
    "prism": "the beam peer's apache_beam pipeline unchanged on Beam's Prism runner (tools/prism.py; Go, its own process, SDK worker LOOPBACK in this one)",
    "beam-on-sparkbeam": "the beam peer's apache_beam pipeline unchanged, with --runner=sparkbeam.SparkRunner",
    "dataframe": "PySpark DataFrame: groupBy(key, window(1 minute)).agg(count, sum)",
    "rdd": "PySpark RDD: map to ((key, window_start), (1, score)) -> reduceByKey",
}


# -- running and checking ----------------------------------------------------------------


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
        self.problem = failure(error)
        self.seconds = None


def measure(
    runs: dict[str, Callable[[Any], list[Row]]],
    outcomes: list[Outcome],
    workload: Any,  # what the runs take: this script's Workload, or another benchmark's
    warmup: Any,
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


def measure_size(
    runs: dict[str, Callable[[Any], list[Row]]],
    unavailable: dict[str, str],
    args: argparse.Namespace,
    count: int,
    workload: Any,
    warmup: Any,
    expected: Totals,
    spark: Any,
) -> int:
    """Time every peer at one size (``measure``), print the profiles and the table, and say
    how it went: 0 when every peer ran and agreed, 1 when any disagrees, 2 when one failed.
    The dedup benchmark runs its own workloads through this too."""
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
        return 1
    return 2 if any(o.seconds is None for o in outcomes) else 0


# -- reporting ---------------------------------------------------------------------------


def format_table(events: int, outcomes: list[Outcome]) -> str:
    timed = [o for o in outcomes if o.seconds is not None and not o.disagrees]
    fastest = min((o.seconds for o in timed if o.seconds is not None), default=None)
    reference = next((o.seconds for o in timed if o.peer == "sparkbeam"), None)
    dataframe = next((o.seconds for o in timed if o.peer == "dataframe"), None)
    header = (
        f"{'peer':<17} {'seconds':>8} {'events/s':>10} {'vs sparkbeam':>12} {'vs fastest':>10} "
        f"{'CPU s':>7} {'peak MB':>8} {'others':>6}  result"
    )
    lines = [header, "-" * len(header)]
    for o in outcomes:
        if o.seconds is None:
            lines.append(
                f"{o.peer:<17} {'-':>8} {'-':>10} {'-':>12} {'-':>10} {'-':>7} {'-':>8} {'-':>6}  "
                f"{o.problem}"
            )
            continue
        vs_sparkbeam = f"{o.seconds / reference:.2f}x" if reference else "-"
        vs_fastest = f"{o.seconds / fastest:.2f}x" if fastest and not o.disagrees else "-"
        lines.append(
            f"{o.peer:<17} {o.seconds:>8.2f} {events / o.seconds:>10,.0f} {vs_sparkbeam:>12} "
            f"{vs_fastest:>10} {cell(o.cpu_seconds, '.1f'):>7} {cell(o.peak_mb, '.0f'):>8} "
            f"{cell(o.others_cores, '.2f'):>6}  {o.problem or 'agrees'}{runs_note(o.runs)}"
        )
    rows_peer = next((o.seconds for o in timed if o.peer == "sparkbeam-rows"), None)
    if rows_peer is not None and dataframe is not None:
        lines.append(f"sparkbeam-rows / dataframe: {rows_peer / dataframe:.2f}x (#11's target: within 1.5x)")
    lines.extend(busy_warning({o.peer: o.others_cores for o in outcomes}))
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(
        parser,
        ALL_PEERS,
        warmup_events=10_000,
        warmup_help="untimed warm-up run per peer on this many events; 0 for none",
        partitions_help="shuffle partitions for every Spark peer (default: Spark's default parallelism, at least 2)",
        workdir_help="where the event files go (default: a temporary directory, removed after)",
    )
    parser.add_argument(
        "--source",
        choices=("file", "memory"),
        default="file",
        help="peers read a CSV file (default) or get the in-memory list",
    )
    parser.add_argument(
        "--rows-source",
        choices=("file", "memory"),
        default="file",
        help="the sparkbeam-rows peer reads the CSV file with ReadFromCsv (default, with --source file) "
        "or starts from the events as in-memory Rows",
    )
    return parse_common(parser, argv, ALL_PEERS)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = make_workdir(args, "sparkbeam-bench-")
    bench = start_bench(args, workdir, "sparkbeam-benchmark", "shuffle partitions")
    spark = bench.spark
    runs, unavailable = prepare_peers(args.peers, lambda peer: PREPARE[peer](bench), lambda peer, _: DESCRIBE[peer])

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
            # The schema'd peer's Rows, made untimed, when it starts from memory.
            rows_wanted = "sparkbeam-rows" in args.peers and (path is None or args.rows_source == "memory")
            warmup = None
            if args.warmup_events:
                warmup_events = events[: args.warmup_events]
                warmup_path = None
                if path is not None:
                    warmup_path = os.path.join(workdir, f"warmup-{len(warmup_events)}.csv")
                    write_events(warmup_events, warmup_path)
                warmup = Workload(warmup_events, warmup_path, as_rows(warmup_events) if rows_wanted else None)
            workload = Workload(events, path, as_rows(events) if rows_wanted else None)
            size = f"{os.path.getsize(path) / 1e6:.1f} MB file" if path else "in-memory list"
            print(
                f"== {count:,} events, {KEY_COUNT} keys, {len(expected):,} (key, window) results; "
                f"{share_behind(events):.0%} arrive after an event with a later event time; source: {size}"
            )
            print(
                f"   untimed: generate {generated:.2f} s, write {written:.2f} s, "
                f"plain-Python oracle {oracle_seconds:.2f} s (one core, no engine)"
            )
            status = measure_size(runs, unavailable, args, count, workload, warmup, expected, spark)
            if status == 1 or exit_status == 0:  # a disagreement outranks a failure
                exit_status = status
    finally:
        stop_bench(bench, args)
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
