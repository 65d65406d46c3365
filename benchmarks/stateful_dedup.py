"""Stateful dedup: keep each id once per 10-minute window, with state and an event-time timer.

The workload of issue #12's Speed section. N events ``(id, copy, event time)``: every id is
sent one to three times (a realistic duplicate rate), the copies a few seconds to two minutes
apart, event times over four hours, arriving out of event-time order. A stateful DoFn keyed
by id counts the copies of each id in each 10-minute fixed window in a
``ReadModifyWriteState("seen")``, sets an event-time timer at the window's end on the first
copy, and when the timer fires emits ``(id, copies)`` once and clears the state. The peers:

- ``sparkbeam``: that DoFn on sparkbeam in batch (``Create``);
- ``streaming``: the same pipeline on sparkbeam in streaming mode, the events arriving in 20
  steps through a TestStream (streaming_windowed_scores.py's script and TestStream);
- ``beam``: the same DoFn written against apache_beam, on Beam's local FnApiRunner;
- ``prism``: that apache_beam pipeline on Beam's Prism runner (tools/prism.py: Beam's
  portable reference runner, a Go process of its own, the SDK worker LOOPBACK in this one);
- ``twsip``: hand-written PySpark, ``transformWithStateInPandas`` (Spark 4's stateful API)
  keyed by (id, window), in a batch query;
- ``dataframe``: hand-written PySpark, ``groupBy(id, window).count()``: the fastest
  hand-written equivalent, no per-key Python at all.

Every peer's result is checked against a plain-Python oracle, the (id, window) kept and the
copies counted, and the table prints times and ratios as batch_windowed_scores.py does::

    python benchmarks/stateful_dedup.py --events 100000
    python benchmarks/stateful_dedup.py --events 1000000 --peers sparkbeam,streaming,dataframe

benchmarks/README.md says what is timed and what the figures say. Exit status: 0 when every
peer ran and agreed, 1 when results disagree, 2 when a peer failed or was unavailable.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import attrs

# Sibling modules: run as a file, this script has its own directory on sys.path. The timing
# rounds and the table are the batch benchmark's, the arrival steps and the TestStream the
# streaming benchmark's.
from batch_windowed_scores import measure_size
from measuring import driver_peak_rss_mb
from streaming_script import Script, make_script
from streaming_sparkbeam import SparkbeamPeer
from workloads import (
    EPOCH_MS,
    HOUR_MS,
    MEAN_DELAY_MS,
    Bench,
    Event,
    Row,
    Totals,
    add_common_arguments,
    make_workdir,
    parse_common,
    prepare_peers,
    prism_flags,
    read_back,
    require_apache_beam,
    share_behind,
    start_bench,
    stop_bench,
)

ALL_PEERS = ("sparkbeam", "streaming", "beam", "prism", "twsip", "dataframe")
DEDUP_WINDOW_SECONDS = 600
DEDUP_WINDOW_MS = DEDUP_WINDOW_SECONDS * 1000
SPAN_HOURS = 4
# A copy of an id is sent this long after the first, at most: some copies land in the next
# window, where they count as that window's first.
MAX_COPY_GAP_MS = 120_000
STEPS = 20

RunFn = Callable[["Workload"], list[Row]]


@attrs.frozen
class Workload:
    """The events in arrival order, and the same cut into arrival steps for the stream."""

    events: list[Event] = attrs.field(repr=lambda e: f"<{len(e)} events>")
    script: Script


# -- the workload ----------------------------------------------------------------------


def generate_duplicated_events(count: int, seed: int) -> list[Event]:
    """``count`` events ``(id, copy number, event ms)`` in arrival order: ids sent 1-3 times."""
    rng = random.Random(seed)
    arrivals: list[tuple[int, str, int, int]] = []
    serial = 0
    while len(arrivals) < count:
        first_ms = EPOCH_MS + rng.randrange(SPAN_HOURS * HOUR_MS)
        name = f"id{serial:08d}"
        serial += 1
        for copy in range(min(rng.randint(1, 3), count - len(arrivals))):
            event_ms = first_ms + (rng.randrange(MAX_COPY_GAP_MS) if copy else 0)
            arrival_ms = event_ms + int(rng.expovariate(1 / MEAN_DELAY_MS))
            arrivals.append((arrival_ms, name, copy, event_ms))
    arrivals.sort()
    return [(name, copy, event_ms) for _, name, copy, event_ms in arrivals]


def expected_kept(events: list[Event]) -> Totals:
    """The oracle, a plain Python loop: {(id, window start): (copies, 1)} for every id kept.

    The second figure is the number of outputs for that id and window, which is 1 for a
    correct dedup; the shape is the windowed-scores benchmarks' so that ``compare`` checks it.
    """
    copies: dict[tuple[str, int], int] = {}
    for name, _, event_ms in events:
        slot = (name, event_ms - event_ms % DEDUP_WINDOW_MS)
        copies[slot] = copies.get(slot, 0) + 1
    return {slot: (count, 1) for slot, count in copies.items()}


def dedup_fn(sdk: Any, userstate: Any) -> Any:
    """The stateful DoFn, written once against either SDK (sparkbeam's API is Beam's)."""

    class DedupWithinWindow(sdk.DoFn):
        SEEN = userstate.ReadModifyWriteStateSpec("seen", sdk.coders.VarIntCoder())
        WINDOW_END = userstate.TimerSpec("window_end", userstate.TimeDomain.WATERMARK)

        # The parameters' defaults, made once here because the class is written for either SDK
        # (ruff knows sparkbeam.DoFn.StateParam(...) as Beam's idiom, not sdk.DoFn's).
        SEEN_PARAM = sdk.DoFn.StateParam(SEEN)
        WINDOW_END_PARAM = sdk.DoFn.TimerParam(WINDOW_END)

        def process(
            self,
            element: Any,
            seen: Any = SEEN_PARAM,
            window_end: Any = WINDOW_END_PARAM,
            window: Any = sdk.DoFn.WindowParam,
        ) -> None:
            copies = seen.read()
            if copies is None:
                window_end.set(window.max_timestamp())
                copies = 0
            seen.write(copies + 1)

        @userstate.on_timer(WINDOW_END)
        def emit_and_clear(
            self,
            name: Any = sdk.DoFn.KeyParam,
            seen: Any = SEEN_PARAM,
            window: Any = sdk.DoFn.WindowParam,
        ) -> Any:
            yield name, window.start.micros // 1000, seen.read()
            seen.clear()

    return DedupWithinWindow


def stamp_event(event: Event, timestamped_value: type) -> Any:
    name, copy, event_ms = event
    return timestamped_value((name, copy), event_ms / 1000)


def as_row(kept: tuple[str, int, int]) -> Row:
    name, window_ms, copies = kept
    return name, window_ms, copies, 1


# -- the peers: each prepare_* does its imports (untimed) and returns the timed run --------


def prepare_sparkbeam(bench: Bench, *, streaming: bool) -> RunFn:
    import sparkbeam as beam
    from sparkbeam import window
    from sparkbeam.transforms import userstate

    dedup = dedup_fn(beam, userstate)
    test_stream = SparkbeamPeer(bench) if streaming else None

    def run(workload: Workload) -> list[Row]:
        options = beam.PipelineOptions(
            streaming=streaming, spark_master=bench.master, state_partitions=bench.partitions
        )
        pipeline = beam.Pipeline(options=options)
        if test_stream is not None:
            stamped = pipeline | "Events" >> test_stream.stream(workload.script)[0]
        else:
            stamped = (
                pipeline
                | "Create" >> beam.Create(workload.events)
                | "Stamp" >> beam.Map(stamp_event, window.TimestampedValue)
            )
        kept = beam.capture(
            stamped
            | "TenMinutes" >> beam.WindowInto(window.FixedWindows(DEDUP_WINDOW_SECONDS))
            | "Dedup" >> beam.ParDo(dedup())
        )
        result = pipeline.run()
        return [as_row(emission.value) for emission in result.emissions(kept)]

    return run


def prepare_beam(bench: Bench, on_prism: bool = False) -> RunFn:
    """The DoFn written against apache_beam, on FnApiRunner or on Beam's Prism runner
    (``on_prism``: one job server for the command, LOOPBACK)."""
    require_apache_beam()
    prism = prism_flags() if on_prism else None
    import apache_beam as ab
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms import userstate

    dedup = dedup_fn(ab, userstate)

    def run(workload: Workload) -> list[Row]:
        output_dir = tempfile.mkdtemp(prefix="beam-out-", dir=bench.workdir)
        beam_run = {"options": PipelineOptions(prism)} if prism else {"runner": FnApiRunner(), "options": PipelineOptions([])}
        with ab.Pipeline(**beam_run) as pipeline:
            (
                pipeline
                | "Create" >> ab.Create(workload.events)
                | "Stamp" >> ab.Map(stamp_event, ab.window.TimestampedValue)
                | "TenMinutes" >> ab.WindowInto(ab.window.FixedWindows(DEDUP_WINDOW_SECONDS))
                | "Dedup" >> ab.ParDo(dedup())
                | "AsLine" >> ab.Map(lambda kept: ",".join(map(str, kept)))
                | "Write" >> ab.io.WriteToText(os.path.join(output_dir, "kept"))
            )
        return [as_row((name, int(window_ms), int(copies))) for name, window_ms, copies in read_back(output_dir, "kept")]

    return run


EVENT_SCHEMA = "name STRING, copy INT, event_ms LONG"


def prepare_twsip(bench: Bench) -> RunFn:
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    spark = bench.spark

    class CountCopies(StatefulProcessor):
        """Spark's stateful API, keyed by (id, window start): a ValueState "seen" counts the
        copies. In a batch query Spark hands each key all its rows in one call and registers
        no timers, so the state is written once and the emit happens in that call."""

        def init(self, handle: Any) -> None:
            self.seen = handle.getValueState("seen", "copies LONG")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            copies = self.seen.get()[0] if self.seen.exists() else 0
            for frame in rows:
                copies += len(frame)
            self.seen.update((copies,))
            yield pd.DataFrame({"name": [key[0]], "window_ms": [key[1]], "copies": [copies]})

        def close(self) -> None:
            pass

    def run(workload: Workload) -> list[Row]:
        frame = spark.createDataFrame(workload.events, EVENT_SCHEMA)
        keyed = frame.withColumn(
            "window_ms", F.col("event_ms") - F.col("event_ms") % DEDUP_WINDOW_MS
        )
        kept = keyed.groupBy("name", "window_ms").transformWithStateInPandas(
            CountCopies(), "name STRING, window_ms LONG, copies LONG", "Update", "None"
        )
        return [as_row((row.name, row.window_ms, row.copies)) for row in kept.collect()]

    return run


def prepare_dataframe(bench: Bench) -> RunFn:
    from pyspark.sql import functions as F

    spark = bench.spark

    def run(workload: Workload) -> list[Row]:
        frame = spark.createDataFrame(workload.events, EVENT_SCHEMA)
        window_ms = F.col("event_ms") - F.col("event_ms") % DEDUP_WINDOW_MS
        kept = frame.groupBy("name", window_ms.alias("window_ms")).count()
        return [as_row((row.name, row.window_ms, row["count"])) for row in kept.collect()]

    return run


PREPARE: dict[str, Callable[[Bench], RunFn]] = {
    "sparkbeam": lambda bench: prepare_sparkbeam(bench, streaming=False),
    "streaming": lambda bench: prepare_sparkbeam(bench, streaming=True),
    "beam": prepare_beam,
    "prism": lambda bench: prepare_beam(bench, on_prism=True),
    "twsip": prepare_twsip,
    "dataframe": prepare_dataframe,
}
DESCRIBE = {
    "sparkbeam": "sparkbeam batch: Create -> Map(TimestampedValue) -> WindowInto(FixedWindows(600)) -> ParDo(stateful dedup) -> capture",
    "streaming": f"sparkbeam streaming: TestStream ({STEPS} arrival steps, each followed by a watermark) -> WindowInto(FixedWindows(600)) -> ParDo(stateful dedup) -> capture",
    "beam": "apache_beam on FnApiRunner: the same DoFn, Create -> ... -> WriteToText, read back",
    "prism": "apache_beam on Beam's Prism runner (tools/prism.py, LOOPBACK): the same DoFn and pipeline as beam",
    "twsip": "PySpark batch: createDataFrame -> groupBy(id, window).transformWithStateInPandas(ValueState 'seen') -> collect",
    "dataframe": "PySpark batch: createDataFrame -> groupBy(id, window).count() -> collect",
}


# -- the command -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(
        parser,
        ALL_PEERS,
        warmup_events=5_000,
        warmup_help="untimed warm-up run per peer on this many events; 0 for none (default 5000)",
        partitions_help="shuffle and state partitions of every Spark peer (default: Spark's default parallelism, at least 2)",
        workdir_help="where Beam's output goes (default: a temporary directory, removed after)",
    )
    args = parse_common(parser, argv, ALL_PEERS)
    if any(count < STEPS for count in args.events) or 0 < args.warmup_events < STEPS:
        parser.error(f"--events and --warmup-events (unless 0) must be at least {STEPS}")
    return args


def workload_of(count: int, seed: int) -> Workload:
    events = generate_duplicated_events(count, seed)
    return Workload(events, make_script(events, STEPS))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = make_workdir(args, "sparkbeam-dedup-bench-")
    bench = start_bench(args, workdir, "sparkbeam-dedup-benchmark", "shuffle and state partitions")
    spark = bench.spark
    runs, unavailable = prepare_peers(
        args.peers, lambda peer: PREPARE[peer](bench), lambda peer, _: DESCRIBE[peer]
    )
    warmup = workload_of(args.warmup_events, args.seed + 1) if args.warmup_events else None

    exit_status = 0
    try:
        for count in args.events:
            print()
            before = time.perf_counter()
            workload = workload_of(count, args.seed)
            generated = time.perf_counter() - before
            before = time.perf_counter()
            expected = expected_kept(workload.events)
            oracle_seconds = time.perf_counter() - before
            if not workload.script.is_late_free():
                print(
                    "   internal error: the stream has late events; the comparison would not hold"
                )
                return 1
            ids = len({name for name, _, _ in workload.events})
            print(
                f"== {count:,} events of {ids:,} ids ({count / ids:.2f} copies per id), "
                f"{len(expected):,} (id, 10-minute window) kept; {share_behind(workload.events):.0%} "
                f"arrive after an event with a later event time; the stream: {len(workload.script.batches)} "
                f"steps, watermark = latest event time - {workload.script.out_of_orderness_ms // 1000} s"
            )
            print(
                f"   untimed: generate and cut into steps {generated:.2f} s, plain-Python oracle "
                f"{oracle_seconds:.2f} s (one core, no engine)"
            )
            status = measure_size(runs, unavailable, args, count, workload, warmup, expected, spark)
            if status == 1 or exit_status == 0:  # a disagreement outranks a failure
                exit_status = status
    finally:
        stop_bench(bench, args)
    print()
    print(
        "seconds: best wall-clock of the timed runs (build, run, results on the driver; the "
        "TestStream is built inside the streaming run); vs sparkbeam / vs fastest: this peer's "
        "seconds divided by theirs (below 1x is faster)"
    )
    print(
        "CPU s: CPU time of this process + the JVM + PySpark's workers; others: cores that "
        f"processes outside this command kept busy; this Python process peaked at {driver_peak_rss_mb():.0f} MB RSS"
    )
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
