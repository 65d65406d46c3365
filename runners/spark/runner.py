"""``SparkRunner``: plans a pipeline into stages and runs them on Spark, step by step.

Bounded pipelines run as batch: one step, the watermark going from -inf to +inf. Pipelines
with unbounded input (or ``--streaming``) run as a stream of steps. Either way the result
has every stage's watermark timeline (``result.watermarks()``) and what captured
PCollections emitted (``result.emissions(pcoll)``).
"""

from __future__ import annotations

import time
from typing import Any

from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.pipeline import Pipeline
from sparkbeam.runner import PipelineResult, PipelineRunner, PipelineState
from sparkbeam.runners.core.clock import Clock, ManualClock, WallClock
from sparkbeam.runners.core.history import run_history
from sparkbeam.runners.core.ops import (
    GroupOp,
    ParDoOp,
    StreamReadOp,
    TestStreamOp,
    WriteTextOp,
    lower,
)
from sparkbeam.runners.core.plan import StagePlan, plan_stages
from sparkbeam.runners.core.steps import StepLoop
from sparkbeam.runners.core.timeline import Emissions, Timeline, emissions_of

__all__ = ["SparkPipelineResult", "SparkRunner", "check_picklable"]


def check_picklable(plan: StagePlan) -> None:
    """Fail before Spark starts if a DoFn or CombineFn cannot be shipped to executors."""
    from pyspark import cloudpickle

    for stage in plan.stages:
        ops = [*stage.body, *([stage.head] if stage.head is not None else [])]
        for op in ops:
            if isinstance(op, ParDoOp):
                parts: tuple[tuple[str, Any], ...] = (("DoFn", op.dofn), ("arguments", (op.args, op.kwargs)))
            elif isinstance(op, GroupOp) and op.combine_fn is not None:
                parts = (("CombineFn", op.combine_fn),)
            elif isinstance(op, StreamReadOp):
                parts = (("timestamp, partition_by and watermark settings", op.spec),)
            else:
                continue
            for what, value in parts:
                try:
                    cloudpickle.dumps(value)
                except Exception as error:
                    msg = (
                        f"the {what} of '{op.label}' (applied at {op.location}) cannot be pickled to "
                        f"ship it to Spark executors: {type(error).__name__}: {error}. Create "
                        "unpicklable resources (clients, connections, locks) in DoFn.setup instead"
                    )
                    raise TypeError(msg) from None


def _check_supported(plan: StagePlan) -> None:
    """Refuse, before Spark starts, a text sink off the local and shared file systems, in
    batch and streaming alike (a stream would otherwise fail at its first step with output;
    the other file sinks refuse such paths when they are constructed)."""
    from sparkbeam.runners.spark.textio import local_prefix

    for stage in plan.stages:
        for sink in stage.sinks:
            if isinstance(sink, WriteTextOp):
                local_prefix(sink)


class SparkPipelineResult(PipelineResult):
    """A finished run: its state, stage plan, watermark timeline and captured emissions."""

    def __init__(
        self,
        state: PipelineState,
        plan: StagePlan,
        timeline: Timeline,
        emitted: dict[int, Emissions],
        seconds: float,
    ) -> None:
        super().__init__(state)
        self.plan = plan
        self._timeline = timeline
        self._emitted = emitted
        self.seconds = seconds

    def watermarks(self) -> Timeline:
        """Every stage's input and output watermark per step, with what holds it back."""
        return self._timeline

    def emissions(self, pcoll: Any) -> Emissions:
        """What a captured PCollection emitted: value, timestamp, window, pane, step, time."""
        return emissions_of(self.plan, self._emitted, pcoll)

    def plot_watermarks(self, panes: Any = None, **kwargs: Any) -> Any:
        """A matplotlib figure of the watermark timeline (see ``sparkbeam.plotting``)."""
        from sparkbeam.plotting import plot_watermarks

        return plot_watermarks(self, panes, **kwargs)

    def metrics(self) -> Any:
        return self._timeline


class SparkRunner(PipelineRunner):
    """Runs pipelines on Spark: the embedded ``local[*]`` by default, any master with ``--spark_master``."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock

    def run_pipeline(self, pipeline: Pipeline, options: PipelineOptions) -> SparkPipelineResult:
        settings = options.get_all_options()
        lowered = lower(pipeline)
        plan = plan_stages(lowered)
        streaming = bool(settings["streaming"]) or any(not pc.is_bounded for pc in lowered.pcollections)
        _check_supported(plan)
        check_picklable(plan)
        from sparkbeam.runners.spark.backend import SparkBackend
        from sparkbeam.runners.spark.session import get_session

        spark = get_session(settings["spark_master"], settings["spark_conf"], settings["job_name"])
        backend = SparkBackend(
            spark,
            num_partitions=settings["state_partitions"],
            overlapping_window_rule=settings["overlapping_window_rule"],
        )
        has_test_stream = any(isinstance(op, TestStreamOp) for op in lowered.ops)
        real_sources = any(isinstance(op, StreamReadOp) for op in lowered.ops)
        clock = self.clock or (ManualClock() if has_test_stream else WallClock())
        stream_run = None
        if real_sources:
            from sparkbeam.runners.spark.streaming import StreamRun

            stream_run = StreamRun(spark, plan, backend, settings)
            clock = stream_run.clock
        history = run_history(lowered, settings, streaming=streaming)
        loop = StepLoop(
            plan, backend, clock, batch=not streaming, max_steps=settings["max_steps"], hooks=stream_run, history=history
        )
        started = time.perf_counter()
        try:
            if stream_run is not None:
                stream_run.attach(loop)
            loop.run()
        finally:
            if stream_run is not None:
                stream_run.close()
            backend.close()
        timeline = history.timeline([stage.name for stage in plan.stages])
        emitted = history.emitted({info.id: info.label for info in lowered.pcollections})
        return SparkPipelineResult(PipelineState.DONE, plan, timeline, emitted, time.perf_counter() - started)

