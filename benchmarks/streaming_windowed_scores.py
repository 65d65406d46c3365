"""Streaming windowed scores: count and sum per key per 1-minute window, arriving step by step.

One command replays the same stream of events, cut into arrival batches each followed by a
watermark advance, through sparkbeam in streaming mode (a TestStream), Apache Beam's
BundleBasedDirectRunner in streaming mode (Beam's TestStream) and a hand-written PySpark
Structured Streaming query (one file per batch, ``maxFilesPerTrigger=1``). It checks that
all of them end with exactly the same {(key, window_start): (count, sum)} and prints each
one's wall-clock time, events per second and time per step, with the ratios::

    python benchmarks/streaming_windowed_scores.py --events 100000 --events 1000000
    python benchmarks/streaming_windowed_scores.py --events 1000000 --steps 20 --peers sparkbeam,structured

It then measures the cost of a step that carries no data (``--idle-steps``, 0 to skip).
benchmarks/README.md says what is timed and how to read the tables. Exit status: 0 when
every peer ran and agreed, 1 when results disagree, 2 when a peer failed or was unavailable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import attrs

# Sibling modules: run as a file, this script has its own directory on sys.path.
from measuring import MachineWatch, PeerProfile, driver_peak_rss_mb
from workloads import (
    EPOCH_MS,
    KEY_COUNT,
    WINDOW_MS,
    WINDOW_SECONDS,
    Bench,
    CountAndSumLogic,
    Event,
    PeerUnavailable,
    Row,
    add_common_arguments,
    busy_warning,
    compare,
    expected_totals,
    generate_events,
    make_workdir,
    parse_common,
    prepare_peers,
    share_behind,
    start_bench,
    stop_bench,
)

ALL_PEERS = ("sparkbeam", "beam", "structured")


# -- the workload ----------------------------------------------------------------------


@attrs.frozen
class Script:
    """The stream: arrival batches, and the watermark (epoch ms) announced after each one.

    ``watermarks[k]`` is None when the watermark would not move after batch k (TestStream
    refuses a watermark that does not move forward). After the last batch the watermark goes
    to the end of time.
    """

    batches: list[list[Event]] = attrs.field(repr=lambda b: f"<{len(b)} batches>")
    watermarks: list[int | None]
    out_of_orderness_ms: int

    @property
    def events(self) -> int:
        return sum(len(batch) for batch in self.batches)

    @property
    def all_events(self) -> list[Event]:
        return [event for batch in self.batches for event in batch]

    def is_late_free(self) -> bool:
        """No event arrives behind a watermark already announced (checked, not assumed)."""
        watermark = None
        for batch, after in zip(self.batches, self.watermarks):
            if watermark is not None and any(event_ms < watermark for _, _, event_ms in batch):
                return False
            if after is not None:
                watermark = after
        return True


def make_script(events: list[Event], steps: int) -> Script:
    """Cut ``events`` (in arrival order) into ``steps`` batches and pick the watermarks.

    The watermark after a batch is the latest event time seen so far minus an out-of-orderness
    bound, which is what Spark's ``withWatermark`` computes per query. The bound is taken from
    the data: the smallest whole number of minutes such that no event is ever behind the
    watermark announced before its batch. So nothing is late for any peer, the watermark never
    passes events still to come, and Spark's watermark equals the TestStream's.
    """
    size = -(-len(events) // steps)
    batches = [events[start : start + size] for start in range(0, len(events), size)]
    lag = 0
    latest = None
    for batch in batches:
        earliest = min(event_ms for _, _, event_ms in batch)
        if latest is not None:
            lag = max(lag, latest - earliest)
        batch_latest = max(event_ms for _, _, event_ms in batch)
        latest = batch_latest if latest is None else max(latest, batch_latest)
    out_of_orderness_ms = max(1, -(-lag // 60_000)) * 60_000
    watermarks: list[int | None] = []
    latest = None
    announced = None  # the watermark starts at the beginning of time
    for batch in batches:
        batch_latest = max(event_ms for _, _, event_ms in batch)
        latest = batch_latest if latest is None else max(latest, batch_latest)
        watermark = latest - out_of_orderness_ms
        if announced is None or watermark > announced:
            watermarks.append(watermark)
            announced = watermark
        else:
            watermarks.append(None)
    return Script(batches, watermarks, out_of_orderness_ms)


# -- what every peer shares --------------------------------------------------------------
# Module-level functions and classes of __main__ are pickled by value (cloudpickle in
# both PySpark and Beam), so executors and Beam's workers need not import this script.


@attrs.define
class Run:
    """What one timed run of a peer produced."""

    rows: list[Row]  # the final (count, sum) per key and window
    seconds: float  # the timed part: from building the pipeline (query) to the rows on the driver
    #: steps (sparkbeam), TestStream events (Beam) or micro-batches (Structured Streaming)
    steps: int
    #: panes that must not exist here (nothing is late, the trigger is the default): EARLY/LATE
    extra_panes: int = 0
    details: list[str] = attrs.field(factory=list)  # printed under the table
    #: more details, worked out after the run and its CPU watch (they may wait for Spark)
    explain: Callable[[], list[str]] | None = None


class Peer:
    """One engine. ``prepare(script)`` builds its input (not timed: TestStream objects,
    files); ``run(prepared)`` is one timed run; ``idle(count)`` measures steps that carry no
    data (with one key's state present); ``describe`` is printed in the header."""

    describe = ""

    def prepare(self, script: Script) -> Any:
        raise NotImplementedError

    def run(self, prepared: Any) -> Run:
        raise NotImplementedError

    def idle(self, count: int) -> list[IdleFigure]:
        raise NotImplementedError


@attrs.frozen
class IdleFigure:
    """The cost of one kind of step with no data: measured per step, and by difference."""

    peer: str
    kind: str
    steps: int
    median_seconds: float | None  # median of the per-step times the peer shows, if it does
    mean_seconds: float | None  # their mean: a rare slow step shows here, not in the median
    differential_seconds: float  # (run with the idle steps - run without them) / steps
    jobs_per_step: float | None
    note: str = ""


def idle_increment_ms(count: int) -> int:
    """How far each of ``count`` idle steps moves the watermark: all stay inside one window."""
    return max(1, (WINDOW_MS - 1) // (count + 1))


# -- sparkbeam -----------------------------------------------------------------------------


@attrs.define
class StepProbe:
    """Per step of sparkbeam's loop: wall-clock seconds, and the Spark job group tagging its jobs."""

    prefix: str
    seconds: list[float] = attrs.field(factory=list)

    def group(self, step: int) -> str:
        return f"{self.prefix}-{step}"


_PROBES = 0


@contextlib.contextmanager
def probe_steps(sc: Any) -> Iterator[StepProbe]:
    """Time every step of sparkbeam's step loop and tag the Spark jobs each step starts.

    sparkbeam does not expose per-step timings, so this wraps its (private)
    ``StepLoop.run_step`` in this process for the duration of one run; sparkbeam's code is
    unchanged. The wrapper costs two clock reads and one local property per step. Job groups
    are how Spark's status tracker tells which step started which job; the backend's own
    group is set to the step's for that.
    """
    global _PROBES
    from sparkbeam.runners.core.steps import StepLoop

    _PROBES += 1
    probe = StepProbe(f"sbstep{_PROBES}")
    original = StepLoop.run_step

    def run_step(loop: Any) -> None:
        sc.setJobGroup(probe.group(loop.step), "sparkbeam step")
        # The Spark backend names its own job group on every stage (for cancel() and the
        # progress line): give it this step's group, so that the step's jobs are found.
        if hasattr(loop.backend, "job_group"):
            loop.backend.job_group = probe.group(loop.step)
        started = time.perf_counter()
        try:
            original(loop)
        finally:
            probe.seconds.append(time.perf_counter() - started)

    StepLoop.run_step = run_step  # type: ignore[method-assign]
    try:
        yield probe
    finally:
        StepLoop.run_step = original  # type: ignore[method-assign]
        sc.setLocalProperty("spark.jobGroup.id", None)


def jobs_and_tasks(sc: Any, group: str) -> tuple[int, int]:
    """Spark jobs a job group ran, and their tasks (stages Spark skipped run none)."""
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    tasks = 0
    for job in jobs:
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                tasks += stage_info.numCompletedTasks
    return len(jobs), tasks


def settle_listener_bus() -> None:
    # Spark's status tracker learns of jobs through its listener bus, asynchronously: let it
    # catch up before counting (untimed).
    time.sleep(0.5)


class SparkbeamPeer(Peer):
    describe = (
        "sparkbeam streaming: TestStream -> WindowInto(FixedWindows(60)) -> "
        "CombinePerKey(CountAndSum) -> capture; ON_TIME panes"
    )

    def __init__(self, bench: Bench) -> None:
        import sparkbeam as beam
        from sparkbeam import window
        from sparkbeam.testing.test_stream import TestStream
        from sparkbeam.utils.timestamp import Timestamp
        from sparkbeam.utils.windowed_value import PaneInfoTiming

        class CountAndSum(CountAndSumLogic, beam.CombineFn):
            pass

        self.beam = beam
        self.window = window
        self.test_stream = TestStream
        self.timestamp = Timestamp
        self.on_time = PaneInfoTiming.ON_TIME
        self.combine_fn = CountAndSum
        self.bench = bench

    def stream(self, script: Script) -> tuple[Any, list[str]]:
        """The TestStream of ``script`` and the kind of each of its events (one per step)."""
        stamp = self.timestamp.from_micros
        tv = self.window.TimestampedValue
        stream = self.test_stream()
        kinds = []
        for batch, watermark in zip(script.batches, script.watermarks):
            stream.add_elements(
                [tv((key, score), stamp(event_ms * 1000)) for key, score, event_ms in batch]
            )
            kinds.append("data")
            if watermark is not None:
                stream.advance_watermark_to(stamp(watermark * 1000))
                kinds.append("watermark")
        stream.advance_watermark_to_infinity()
        kinds.append("watermark")
        return stream, kinds

    def execute(self, stream: Any) -> tuple[Any, Any]:
        beam = self.beam
        options = beam.PipelineOptions(
            streaming=True, spark_master=self.bench.master, state_partitions=self.bench.partitions
        )
        pipeline = beam.Pipeline(options=options)
        totals = beam.capture(
            pipeline
            | "Events" >> stream
            | "Minutes" >> beam.WindowInto(self.window.FixedWindows(WINDOW_SECONDS))
            | "CountAndSum" >> beam.CombinePerKey(self.combine_fn())
        )
        return pipeline.run(), totals

    def prepare(self, script: Script) -> tuple[Any, list[str]]:
        return self.stream(script)

    def run(self, prepared: tuple[Any, list[str]]) -> Run:
        stream, kinds = prepared
        sc = self.bench.spark.sparkContext
        started = time.perf_counter()
        with probe_steps(sc) as probe:
            result, totals = self.execute(stream)
            rows: list[Row] = []
            extra = 0
            for emission in result.emissions(totals):
                if emission.pane.timing != self.on_time:
                    extra += 1
                    continue
                key, (count, total) = emission.value
                rows.append((key, emission.window.start.micros // 1000, count, total))
        seconds = time.perf_counter() - started
        steps = result.watermarks().steps
        details = [
            f"sparkbeam: {steps} steps from result.watermarks(); its step loop took "
            f"{result.seconds:.2f} s of the {seconds:.2f} s (the rest: planning, reading the emissions)"
        ]

        def explain() -> list[str]:
            settle_listener_bus()
            return self.step_breakdown(probe, kinds, sc)

        return Run(rows, seconds, steps, extra, details, explain)

    def step_breakdown(self, probe: StepProbe, kinds: list[str], sc: Any) -> list[str]:
        """Per kind of step (data, watermark-only, after the script): time, jobs and tasks."""
        by_kind: dict[str, list[tuple[float, int, int]]] = {}
        for step, seconds in enumerate(probe.seconds):
            kind = kinds[step] if step < len(kinds) else "after the script"
            jobs, tasks = jobs_and_tasks(sc, probe.group(step))
            by_kind.setdefault(kind, []).append((seconds, jobs, tasks))
        lines = []
        names = {"data": "steps with data", "watermark": "watermark-only steps"}
        for kind, figures in by_kind.items():
            times = [f[0] for f in figures]
            lines.append(
                f"  {len(figures):>3} {names.get(kind, kind)}: mean {statistics.fmean(times):.3f} s, "
                f"median {statistics.median(times):.3f} s, max {max(times):.3f} s; "
                f"Spark jobs {sum(f[1] for f in figures)} ({sum(f[1] for f in figures) / len(figures):.1f}/step), "
                f"tasks {sum(f[2] for f in figures) / len(figures):.1f}/step"
            )
        # A few slow steps can carry most of the time (lineage recomputed, a big closure):
        # name them, with their share of the loop.
        total = sum(probe.seconds) or 1.0
        slowest = sorted(range(len(probe.seconds)), key=lambda step: -probe.seconds[step])[:3]
        lines.append(
            "  slowest steps: "
            + ", ".join(
                f"#{step} ({kinds[step] if step < len(kinds) else 'after'}) {probe.seconds[step]:.2f} s"
                for step in slowest
            )
            + f" = {sum(probe.seconds[step] for step in slowest) / total:.0%} of the step loop"
        )
        return lines

    def idle(self, count: int) -> list[IdleFigure]:
        """Steps with no data, one key's state present (an event in a window not yet closed).

        Watermark-only steps that fire: one event in each of ``count`` windows, and each
        step moves the watermark past the next window's end, so that the grouping stage runs
        its Spark job and fires one pane. Watermark-only steps within one window reach no
        timer of the state, and clock-only steps (advance_processing_time) move no watermark:
        in both the stage is skipped (no Spark job).
        """
        sc = self.bench.spark.sparkContext
        stamp = self.timestamp.from_micros
        seed = self.window.TimestampedValue(("user0000", 1), stamp(EPOCH_MS * 1000))
        # Watermarks strictly inside the event's window [EPOCH, EPOCH + 60 s), in whole
        # milliseconds as Beam's TestStream requires, the same for every peer.
        increment_us = idle_increment_ms(count) * 1000
        figures = []
        window_us = WINDOW_MS * 1000
        for kind, label in (
            ("fires", "watermark-only steps firing a pane (the stage runs)"),
            ("watermark", "watermark-only steps reaching no timer (skipped)"),
            ("clock", "clock-only steps (the stage is skipped)"),
        ):

            def build(idle_steps: int, kind: str = kind) -> Any:
                if kind == "fires":  # one event in each window that a step will close
                    seeds = [
                        self.window.TimestampedValue(("user0000", 1), stamp(EPOCH_MS * 1000 + step * window_us))
                        for step in range(max(idle_steps, 1))
                    ]
                    stream = self.test_stream().add_elements(seeds)
                else:
                    stream = self.test_stream().add_elements([seed])
                for step in range(1, idle_steps + 1):
                    if kind == "fires":
                        stream.advance_watermark_to(stamp(EPOCH_MS * 1000 + step * window_us))
                    elif kind == "watermark":
                        stream.advance_watermark_to(stamp(EPOCH_MS * 1000 + step * increment_us))
                    else:
                        stream.advance_processing_time(1)
                return stream.advance_watermark_to_infinity()

            base_started = time.perf_counter()
            self.execute(build(0))
            base_seconds = time.perf_counter() - base_started
            stream = build(count)
            started = time.perf_counter()
            with probe_steps(sc) as probe:
                self.execute(stream)
            seconds = time.perf_counter() - started
            settle_listener_bus()
            # Step 0 brings the event; steps 1..count are the idle ones.
            idle_times = probe.seconds[1 : count + 1]
            jobs = sum(jobs_and_tasks(sc, probe.group(step))[0] for step in range(1, count + 1))
            figures.append(
                IdleFigure(
                    "sparkbeam",
                    label,
                    count,
                    statistics.median(idle_times),
                    statistics.fmean(idle_times),
                    (seconds - base_seconds) / count,
                    jobs / count,
                )
            )
        return figures


# -- Beam ----------------------------------------------------------------------------------

# Beam's DoFns run in this process but are pickled by value with their globals, so a list
# they append to must be reached through the module at run time (see record_beam_pane).
_BEAM_ROWS: list[tuple[str, int, int, int, int]] = []


def record_beam_pane(element: Any, window: Any, pane: Any) -> None:
    key, (count, total) = element
    sys.modules[__name__]._BEAM_ROWS.append(  # type: ignore[attr-defined]
        (key, window.start.micros // 1000, count, total, int(pane.timing))
    )


class BeamPeer(Peer):
    describe = (
        "Apache Beam BundleBasedDirectRunner, streaming=True, Beam's TestStream, same pipeline; "
        "ON_TIME panes"
    )

    def __init__(self, bench: Bench) -> None:
        try:
            import apache_beam as ab
            from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
            from apache_beam.testing.test_stream import TestStream
            from apache_beam.utils.timestamp import Timestamp
            from apache_beam.utils.windowed_value import PaneInfoTiming
        except ImportError as error:
            msg = f"Apache Beam is not installed ({error}); pip install apache-beam"
            raise PeerUnavailable(msg) from None

        class CountAndSum(CountAndSumLogic, ab.CombineFn):
            pass

        def record(
            element: Any, window: Any = ab.DoFn.WindowParam, pane: Any = ab.DoFn.PaneInfoParam
        ) -> None:
            record_beam_pane(element, window, pane)

        self.ab = ab
        self.options_cls = PipelineOptions
        self.standard = StandardOptions
        self.test_stream = TestStream
        self.timestamp = Timestamp
        self.on_time = int(PaneInfoTiming.ON_TIME)
        self.combine_fn = CountAndSum
        self.record = record

    def stream(self, script: Script) -> tuple[Any, int]:
        ab = self.ab
        stream = self.test_stream()
        events = 0
        for batch, watermark in zip(script.batches, script.watermarks):
            stream.add_elements(
                [
                    ab.window.TimestampedValue((key, score), self.timestamp(micros=event_ms * 1000))
                    for key, score, event_ms in batch
                ]
            )
            events += 1
            if watermark is not None:
                stream.advance_watermark_to(self.timestamp(micros=watermark * 1000))
                events += 1
        stream.advance_watermark_to_infinity()
        return stream, events + 1

    def execute(self, stream: Any) -> list[tuple[str, int, int, int, int]]:
        ab = self.ab
        _BEAM_ROWS.clear()
        # An explicit empty flag list: Beam would otherwise parse (and warn about) our sys.argv.
        options = self.options_cls([])
        options.view_as(self.standard).streaming = True
        with ab.Pipeline(runner="BundleBasedDirectRunner", options=options) as pipeline:
            (
                pipeline
                | "Events" >> stream
                | "Minutes" >> ab.WindowInto(ab.window.FixedWindows(WINDOW_SECONDS))
                | "CountAndSum" >> ab.CombinePerKey(self.combine_fn())
                | "Record" >> ab.Map(self.record)
            )
        rows = list(_BEAM_ROWS)
        _BEAM_ROWS.clear()
        return rows

    def prepare(self, script: Script) -> tuple[Any, int]:
        return self.stream(script)

    def run(self, prepared: tuple[Any, int]) -> Run:
        stream, events = prepared
        started = time.perf_counter()
        recorded = self.execute(stream)
        rows = [
            (key, window_ms, count, total)
            for key, window_ms, count, total, timing in recorded
            if timing == self.on_time
        ]
        seconds = time.perf_counter() - started
        note = f"beam: {events} TestStream events (steps); Beam shows no per-step times, so s/step is seconds / events"
        return Run(rows, seconds, events, len(recorded) - len(rows), [note])

    def idle(self, count: int) -> list[IdleFigure]:
        seed = self.ab.window.TimestampedValue(
            ("user0000", 1), self.timestamp(micros=EPOCH_MS * 1000)
        )
        increment_us = idle_increment_ms(count) * 1000

        def build(idle_steps: int) -> Any:
            stream = self.test_stream().add_elements([seed])
            for step in range(1, idle_steps + 1):
                stream.advance_watermark_to(
                    self.timestamp(micros=EPOCH_MS * 1000 + step * increment_us)
                )
            return stream.advance_watermark_to_infinity()

        started = time.perf_counter()
        self.execute(build(0))
        base_seconds = time.perf_counter() - started
        stream = build(count)
        started = time.perf_counter()
        self.execute(stream)
        seconds = time.perf_counter() - started
        return [
            IdleFigure(
                "beam",
                "watermark-only TestStream events",
                count,
                None,
                None,
                (seconds - base_seconds) / count,
                None,
                "no per-step times: by difference only",
            )
        ]


# -- Structured Streaming -------------------------------------------------------------------


def write_batches(batches: list[list[Event]], directory: str) -> None:
    """One JSON-lines file per arrival batch, with increasing modification times.

    Spark's file source takes new files oldest first; distinct mtimes make that the batch
    order whatever the file system's timestamp resolution.
    """
    os.makedirs(directory, exist_ok=True)
    base = time.time() - len(batches) - 10
    for index, batch in enumerate(batches):
        path = os.path.join(directory, f"batch-{index:05d}.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(
                json.dumps(
                    {"key": key, "score": score, "event_ms": event_ms}, separators=(",", ":")
                )
                + "\n"
                for key, score, event_ms in batch
            )
        os.utime(path, (base + index, base + index))


class StructuredPeer(Peer):
    describe = (
        "PySpark Structured Streaming: JSON files, maxFilesPerTrigger=1 -> withWatermark -> "
        "groupBy(window(1 minute), key).agg(count, sum), update mode -> foreachBatch collect; "
        "last update per window"
    )

    def __init__(self, bench: Bench) -> None:
        from pyspark.sql import functions as F

        self.F = F
        self.bench = bench
        self.inputs: dict[int, str] = {}  # id(script) -> its directory of batch files
        self.runs = 0

    def input_dir(self, script: Script) -> str:
        directory = self.inputs.get(id(script))
        if directory is None:
            directory = tempfile.mkdtemp(prefix="structured-in-", dir=self.bench.workdir)
            write_batches(script.batches, directory)
            self.inputs[id(script)] = directory
        return directory

    def execute(
        self, directory: str, out_of_orderness_ms: int
    ) -> tuple[list[tuple[int, list[Any]]], list[Any], float]:
        """Run the query over every file of ``directory``: (batch id, rows) per micro-batch,
        the query's progress reports, and the seconds until its first batch started."""
        F = self.F
        spark = self.bench.spark
        self.runs += 1
        checkpoint = os.path.join(self.bench.workdir, f"structured-checkpoint-{self.runs}")
        updates: list[tuple[int, list[Any]]] = []

        def collect_batch(frame: Any, batch_id: int) -> None:
            updates.append((batch_id, frame.collect()))

        started = time.perf_counter()
        events = (
            spark.readStream.schema("key STRING, score INT, event_ms LONG")
            .option("maxFilesPerTrigger", 1)
            .json(directory)
            .withColumn("ts", F.timestamp_millis("event_ms"))
            .withWatermark("ts", f"{out_of_orderness_ms} milliseconds")
        )
        totals = (
            events.groupBy(F.window("ts", f"{WINDOW_SECONDS} seconds"), "key")
            .agg(F.count("*").alias("count"), F.sum("score").alias("total"))
            .select("key", F.unix_millis("window.start").alias("window_ms"), "count", "total")
        )
        query = (
            totals.writeStream.outputMode("update")
            .foreachBatch(collect_batch)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        progress = list(query.recentProgress)
        wall = time.perf_counter() - started
        in_batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
        return updates, progress, wall - in_batches

    def prepare(self, script: Script) -> tuple[str, int]:
        return self.input_dir(script), script.out_of_orderness_ms

    def run(self, prepared: tuple[str, int]) -> Run:
        directory, out_of_orderness_ms = prepared
        started = time.perf_counter()
        updates, progress, outside = self.execute(directory, out_of_orderness_ms)
        final: dict[tuple[str, int], tuple[int, int]] = {}
        for _, rows in sorted(updates, key=lambda update: update[0]):
            for row in rows:
                final[(row.key, row.window_ms)] = (row["count"], row.total)
        rows_out = [
            (key, window_ms, count, total) for (key, window_ms), (count, total) in final.items()
        ]
        seconds = time.perf_counter() - started
        with_data = [p for p in progress if p["numInputRows"] > 0]
        dropped = sum(
            operator.get("numRowsDroppedByWatermark", 0)
            for p in progress
            for operator in p.get("stateOperators", [])
        )
        data_seconds = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in with_data]
        empty_seconds = [
            p["durationMs"].get("triggerExecution", 0) / 1000
            for p in progress
            if p["numInputRows"] == 0
        ]
        detail = (
            f"structured: {len(progress)} micro-batches ({len(with_data)} with data, mean "
            f"{statistics.fmean(data_seconds) if data_seconds else 0:.3f} s; {len(empty_seconds)} without, "
            f"mean {statistics.fmean(empty_seconds) if empty_seconds else 0:.3f} s); "
            f"{outside:.2f} s outside micro-batches (query start, stop); "
            f"{sum(len(rows) for _, rows in updates):,} updated rows collected; "
            f"{dropped} rows dropped by the watermark"
        )
        return Run(rows_out, seconds, len(progress), details=[detail])

    def idle(self, count: int) -> list[IdleFigure]:
        """A file with one event, then ``count`` empty files: one empty micro-batch each.

        Spark's watermark only moves with data, so these batches do not move it (sparkbeam's
        watermark-only steps do); each still runs the stateful aggregation over every state
        partition, reading and committing its state store, and calls foreachBatch.
        """
        seed = [[("user0000", 1, EPOCH_MS)]]
        base_dir = tempfile.mkdtemp(prefix="structured-idle0-", dir=self.bench.workdir)
        write_batches(seed, base_dir)
        idle_dir = tempfile.mkdtemp(prefix="structured-idle-", dir=self.bench.workdir)
        write_batches(seed + [[] for _ in range(count)], idle_dir)
        started = time.perf_counter()
        self.execute(base_dir, 60_000)
        base_seconds = time.perf_counter() - started
        started = time.perf_counter()
        _, progress, _ = self.execute(idle_dir, 60_000)
        seconds = time.perf_counter() - started
        empty = [
            p["durationMs"].get("triggerExecution", 0) / 1000
            for p in progress
            if p["numInputRows"] == 0
        ]
        note = f"{len(empty)} empty micro-batches ran for {count} empty files"
        return [
            IdleFigure(
                "structured",
                "empty micro-batches (one empty file each)",
                count,
                statistics.median(empty) if empty else None,
                statistics.fmean(empty) if empty else None,
                (seconds - base_seconds) / count,
                None,
                note,
            )
        ]


PEERS: dict[str, Callable[[Bench], Peer]] = {
    "sparkbeam": SparkbeamPeer,
    "beam": BeamPeer,
    "structured": StructuredPeer,
}


# -- measuring ---------------------------------------------------------------------------


@attrs.define
class Outcome:
    peer: str
    events: int
    seconds: float | None = None  # best of the timed runs
    runs: list[float] = attrs.field(factory=list)
    steps: int | None = None
    cpu_seconds: float | None = None  # CPU time of this process tree per timed run
    others_cores: float | None = None  # CPU used by other processes during the timed runs
    problem: str | None = None  # why it did not run, or how its result differs
    disagrees: bool = False
    details: list[str] = attrs.field(factory=list)


def measure(
    peer: str,
    runner: Peer,
    script: Script,
    warmup: Script | None,
    repeat: int,
    profile_dir: str | None,
    spark: Any,
) -> Outcome:
    expected = expected_totals(script.all_events)
    outcome = Outcome(peer, script.events)
    cpu_seconds: list[float] = []
    others_cores: list[float] = []
    profile = PeerProfile(profile_dir, f"{peer}-{script.events}", spark)
    try:
        if warmup is not None:
            # Not timed: starts PySpark's Python workers, loads classes, plans a first query.
            runner.run(runner.prepare(warmup))
        for _ in range(repeat):
            prepared = runner.prepare(script)
            with MachineWatch() as watch, profile.run():
                run = runner.run(prepared)
            outcome.runs.append(run.seconds)
            # The process tree's CPU is read before and after the run; PySpark workers that an
            # earlier run started may exit meanwhile and take their CPU time out of the tree
            # (seen: -88 s for Beam after sparkbeam): then the figure is unknown, not negative.
            if (
                watch.cpu_seconds is not None
                and watch.others_cores is not None
                and watch.cpu_seconds >= 0
            ):
                cpu_seconds.append(watch.cpu_seconds)
                others_cores.append(watch.others_cores)
            outcome.steps = run.steps
            outcome.details = run.details + (run.explain() if run.explain else [])
            difference = compare(expected, run.rows)
            if run.extra_panes:
                extra = f"{run.extra_panes} EARLY/LATE panes where nothing is late"
                difference = extra if difference is None else f"{difference}; {extra}"
            if difference is not None:
                outcome.problem = f"disagrees with the oracle: {difference}"
                outcome.disagrees = True
                break
        if cpu_seconds:
            outcome.cpu_seconds = statistics.fmean(cpu_seconds)
            outcome.others_cores = statistics.fmean(others_cores)
        summary = profile.summary(script.events)
        if summary is not None:
            outcome.details.append(summary)
    except Exception as error:
        traceback.print_exc(file=sys.stderr)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        outcome.problem = f"failed: {type(error).__name__}: {first_line}"
    if outcome.runs:
        outcome.seconds = min(outcome.runs)
    return outcome


# -- reporting ---------------------------------------------------------------------------


def format_table(outcomes: list[Outcome]) -> str:
    """One line per peer. The ratio is of seconds per event, which is the ratio of seconds
    when the sizes are equal and still fair when Beam ran a smaller stream."""
    timed = [o for o in outcomes if o.seconds is not None and not o.disagrees]
    reference = next((o for o in timed if o.peer == "sparkbeam"), None)
    header = (
        f"{'peer':<10} {'events':>9} {'seconds':>8} {'events/s':>9} {'steps':>5} {'s/step':>7} "
        f"{'vs sparkbeam':>12} {'CPU s':>7} {'others':>6}  result"
    )
    lines = [header, "-" * len(header)]
    smaller = False
    for o in outcomes:
        if o.seconds is None:
            lines.append(
                f"{o.peer:<10} {o.events:>9,} {'-':>8} {'-':>9} {'-':>5} {'-':>7} {'-':>12} {'-':>7} {'-':>6}  {o.problem}"
            )
            continue
        ratio = "-"
        if reference is not None and reference.seconds and not o.disagrees:
            ratio = f"{(o.seconds / o.events) / (reference.seconds / reference.events):.2f}x"
            if o.events != reference.events:
                ratio += "*"
                smaller = True
        steps = o.steps or 0
        per_step = f"{o.seconds / steps:.3f}" if steps else "-"
        cpu = f"{o.cpu_seconds:.1f}" if o.cpu_seconds is not None else "-"
        others = f"{o.others_cores:.2f}" if o.others_cores is not None else "-"
        runs = "" if len(o.runs) < 2 else f" (runs: {', '.join(f'{s:.2f}' for s in o.runs)})"
        lines.append(
            f"{o.peer:<10} {o.events:>9,} {o.seconds:>8.2f} {o.events / o.seconds:>9,.0f} {steps:>5} "
            f"{per_step:>7} {ratio:>12} {cpu:>7} {others:>6}  {o.problem or 'agrees'}{runs}"
        )
    if smaller:
        lines.append(
            "* ran a smaller stream (--beam-events): the ratio is of seconds per event, not of seconds"
        )
    lines.extend(busy_warning({o.peer: o.others_cores for o in outcomes}))
    return "\n".join(lines)


def format_idle(figures: list[IdleFigure]) -> str:
    header = f"{'peer':<10} {'kind of step with no data':<44} {'steps':>5} {'median s':>9} {'mean s':>9} {'by diff s':>9} {'jobs/step':>9}"
    lines = [header, "-" * len(header)]
    for f in figures:
        median = f"{f.median_seconds:.4f}" if f.median_seconds is not None else "-"
        mean = f"{f.mean_seconds:.4f}" if f.mean_seconds is not None else "-"
        jobs = f"{f.jobs_per_step:.1f}" if f.jobs_per_step is not None else "-"
        note = f"  {f.note}" if f.note else ""
        lines.append(
            f"{f.peer:<10} {f.kind:<44} {f.steps:>5} {median:>9} {mean:>9} {f.differential_seconds:>9.4f} {jobs:>9}{note}"
        )
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(
        parser,
        ALL_PEERS,
        warmup_events=5_000,
        warmup_help="untimed warm-up run per peer on this many events in 2 steps; 0 for none (default 5000)",
        partitions_help="state partitions of sparkbeam and Structured Streaming (default: Spark's default parallelism, at least 2)",
        workdir_help="where the batch files and checkpoints go (default: a temporary directory, removed after)",
    )
    parser.add_argument(
        "--steps", type=int, default=20, help="arrival batches the events are cut into (default 20)"
    )
    parser.add_argument(
        "--beam-events",
        type=int,
        default=100_000,
        help="Beam's local runner runs a stream of at most this many events (default 100000): it is slow",
    )
    parser.add_argument(
        "--idle-steps",
        type=int,
        default=20,
        help="steps with no data for the per-step overhead (default 20; 0 skips it)",
    )
    args = parse_common(parser, argv, ALL_PEERS)
    if args.steps < 1 or any(count < args.steps for count in args.events):
        parser.error("--steps must be positive, and --events at least --steps")
    if args.idle_steps < 0 or args.beam_events < args.steps:
        parser.error("--idle-steps must be 0 or more and --beam-events at least --steps")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = make_workdir(args, "sparkbeam-stream-bench-")
    bench = start_bench(
        args,
        workdir,
        "sparkbeam-streaming-benchmark",
        "state partitions",
        # Enough progress reports to cover every micro-batch of the longest run.
        {"spark.sql.streaming.numRecentProgressUpdates": "10000"},
    )
    spark = bench.spark
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # PySpark's workers inherit it: every new worker compiles sparkbeam from source.
        print(
            "note: PYTHONDONTWRITEBYTECODE is set, so each new PySpark worker compiles the modules it "
            "imports (sparkbeam's) from source; steps that start workers pay for it"
        )

    peers, unavailable = prepare_peers(args.peers, lambda name: PEERS[name](bench), lambda _, peer: peer.describe)

    warmup = None
    if args.warmup_events:
        warmup = make_script(generate_events(args.warmup_events, args.seed + 1), 2)

    scripts: dict[int, Script] = {}

    def script_of(count: int) -> Script:
        if count not in scripts:
            scripts[count] = make_script(generate_events(count, args.seed), args.steps)
        return scripts[count]

    exit_status = 0
    warmed: set[str] = set()
    try:
        for count in args.events:
            print()
            before = time.perf_counter()
            script = script_of(count)
            generated = time.perf_counter() - before
            if not script.is_late_free():
                print(
                    "   internal error: the script has late events; the comparison would not hold"
                )
                return 1
            events = script.all_events
            print(
                f"== {count:,} events, {KEY_COUNT} keys, {len(expected_totals(events)):,} (key, window) results, "
                f"{len(script.batches)} arrival batches of ~{len(script.batches[0]):,}; "
                f"{share_behind(events):.0%} arrive after an event with a later event time"
            )
            print(
                f"   watermark after each batch: latest event time so far - {script.out_of_orderness_ms // 1000} s "
                f"(the smallest whole minutes with no late event), then +inf; generated in {generated:.2f} s (untimed)"
            )
            outcomes = []
            for name in args.peers:
                if name in unavailable:
                    outcomes.append(Outcome(name, count, problem=unavailable[name]))
                    continue
                peer_script = (
                    script
                    if name != "beam" or count <= args.beam_events
                    else script_of(args.beam_events)
                )
                outcome = measure(
                    name,
                    peers[name],
                    peer_script,
                    None if name in warmed else warmup,
                    args.repeat,
                    args.profile_dir,
                    spark,
                )
                warmed.add(name)
                print(
                    f"   {name}: {'-' if outcome.seconds is None else f'{outcome.seconds:.2f} s'} "
                    f"{outcome.problem or ''} (load average now {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
                outcomes.append(outcome)
            print(format_table(outcomes))
            for outcome in outcomes:
                for line in outcome.details:
                    print(f"   {line}")
            if any(o.disagrees for o in outcomes):
                exit_status = 1
            elif any(o.seconds is None for o in outcomes) and exit_status == 0:
                exit_status = 2

        if args.idle_steps:
            print()
            print(
                f"== per-step overhead with no data: {args.idle_steps} idle steps after one event "
                "(one key's state present, its window still open)"
            )
            figures: list[IdleFigure] = []
            for name, peer in peers.items():
                try:
                    figures.extend(peer.idle(args.idle_steps))
                except Exception as error:
                    traceback.print_exc(file=sys.stderr)
                    print(f"   {name}: idle run failed: {type(error).__name__}: {error}")
                    if exit_status == 0:
                        exit_status = 2
            print(format_idle(figures))
            print(
                "   median s, mean s: wall-clock of the idle steps as the peer shows them (sparkbeam: its "
                "step loop; Structured Streaming: each micro-batch's triggerExecution); by diff s: (run "
                "with the idle steps - the same run without them) / steps"
            )
    finally:
        stop_bench(bench, args)
    print()
    print(
        "seconds: best wall-clock run, from building the pipeline (query) to holding the results on the "
        "driver; input preparation (TestStream objects, batch files) is not timed"
    )
    print(
        "steps: sparkbeam's steps (one TestStream event each: a batch, a watermark move), Beam's "
        "TestStream events, Structured Streaming's micro-batches; s/step = seconds / steps"
    )
    print(
        "vs sparkbeam: seconds per event divided by sparkbeam's (below 1x is faster); CPU s: CPU "
        "time of this process + the JVM + PySpark's workers per run; others: cores other processes "
        f"kept busy meanwhile; this process peaked at {driver_peak_rss_mb():.0f} MB RSS"
    )
    print(
        "semantics: Spark's watermark is one per query (latest event time seen - delay, applied from "
        "the next micro-batch), sparkbeam's and Beam's are per stage, announced by the TestStream; the "
        "watermarks are chosen so that both are the same here and nothing is late. Structured "
        "Streaming emits every changed window each batch (update mode); sparkbeam and Beam emit "
        "each window once, when the watermark passes it"
    )
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
