"""The streaming benchmark's sparkbeam peer: the events as a TestStream through sparkbeam streaming.

``SparkbeamPeer.stream`` is also the TestStream of stateful_dedup.py's streaming peer.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
from step_probe import StepProbe, jobs_and_tasks, probe_steps, settle_listener_bus
from streaming_idle import IdleFigure, by_difference, idle_increment_ms
from streaming_peer import Peer, Run
from streaming_script import Script, test_stream
from workloads import (
    EPOCH_MS,
    WINDOW_MS,
    WINDOW_SECONDS,
    Bench,
    CountAndSumLogic,
    Row,
    connect_remote,
    pickle_by_value,
)

__all__ = ["SparkbeamConnectPeer", "SparkbeamPeer"]


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

    #: the peer's name in the tables
    name = "sparkbeam"
    #: whether its Spark jobs run in this command's classic session (not on a Connect server),
    #: where the step probe's job groups can count them
    jobs_here = True

    def where(self) -> dict[str, str]:
        """The pipeline option that says where it runs."""
        return {"spark_master": self.bench.master}

    def stream(self, script: Script) -> tuple[Any, list[str]]:
        """The TestStream of ``script`` and the kind of each of its events (one per step)."""
        return test_stream(script, self.test_stream, self.window.TimestampedValue, self.timestamp.from_micros)

    def execute(self, stream: Any) -> tuple[Any, Any]:
        beam = self.beam
        options = beam.PipelineOptions(streaming=True, state_partitions=self.bench.partitions, **self.where())
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
            f"{self.name}: {steps} steps from result.watermarks(); its step loop took "
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
            jobs, tasks = jobs_and_tasks(sc, probe.group(step)) if self.jobs_here else (0, 0)
            by_kind.setdefault(kind, []).append((seconds, jobs, tasks))
        lines = []
        names = {"data": "steps with data", "watermark": "watermark-only steps"}
        for kind, figures in by_kind.items():
            times = [f[0] for f in figures]
            jobs = (
                f"Spark jobs {sum(f[1] for f in figures)} ({sum(f[1] for f in figures) / len(figures):.1f}/step), "
                f"tasks {sum(f[2] for f in figures) / len(figures):.1f}/step"
                if self.jobs_here
                else "Spark jobs: on the Connect server, not counted"
            )
            lines.append(
                f"  {len(figures):>3} {names.get(kind, kind)}: mean {statistics.fmean(times):.3f} s, "
                f"median {statistics.median(times):.3f} s, max {max(times):.3f} s; {jobs}"
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

            stream = build(count)

            def base(build: Any = build) -> None:
                self.execute(build(0))

            def probed(stream: Any = stream) -> StepProbe:
                with probe_steps(sc) as probe:
                    self.execute(stream)
                return probe

            probe, per_step = by_difference(base, probed, count)
            settle_listener_bus()
            # Step 0 brings the event; steps 1..count are the idle ones.
            idle_times = probe.seconds[1 : count + 1]
            jobs = sum(jobs_and_tasks(sc, probe.group(step))[0] for step in range(1, count + 1))
            figures.append(
                IdleFigure(
                    self.name,
                    label,
                    count,
                    statistics.median(idle_times),
                    statistics.fmean(idle_times),
                    per_step,
                    jobs / count if self.jobs_here else None,
                )
            )
        return figures


class SparkbeamConnectPeer(SparkbeamPeer):
    """The sparkbeam peer's pipeline through Spark Connect (``--spark_remote``), on this
    command's one local Connect server (``connect_remote``: the classic session's master and
    widths), so that the two say what Connect adds per step."""

    describe = (
        "the sparkbeam peer's pipeline through Spark Connect (--spark_remote), on a local Connect "
        "server this command starts (tools/connect_server.py) with the same master and widths"
    )
    name = "sparkbeam-connect"
    jobs_here = False

    def __init__(self, bench: Bench) -> None:
        super().__init__(bench)
        self.remote = connect_remote(bench)

    def where(self) -> dict[str, str]:
        return {"spark_remote": self.remote}


# Executors cannot import this module (only the driver has benchmarks/ on its path).
pickle_by_value(__name__)
