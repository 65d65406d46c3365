"""The step loop over Python lists: the engine alone, with no Spark.

``run_in_memory(pipeline)`` executes a pipeline in this process. The Spark runner is the
product; this backend exists so that the engine, the watermark bookkeeping and the
transcripts can be tested exactly and fast, and so that a Spark result can be compared with
the engine's own.
"""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.pipeline import Pipeline
from sparkbeam.runners.core.clock import Clock, ManualClock
from sparkbeam.runners.core.dofn_invoker import SideInputs
from sparkbeam.runners.core.errors import UserCodeError, add_transform_note
from sparkbeam.runners.core.fused import FusedBody
from sparkbeam.runners.core.grouping_step import (
    ELEMENT,
    PANE,
    STATE,
    SUMMARY,
    group_partition,
    key_element,
)
from sparkbeam.runners.core.history import run_history
from sparkbeam.runners.core.ops import (
    BoundedSourceReadOp,
    CreateOp,
    GroupOp,
    ImpulseOp,
    ReadTextOp,
    lower,
)
from sparkbeam.runners.core.plan import Stage, StagePlan, plan_stages
from sparkbeam.runners.core.side_input_wait import OUTPUT, PARKED, must_wait, run_waiting
from sparkbeam.runners.core.sources import SourceEmission
from sparkbeam.runners.core.steps import StageResult, StageSummary, StepLoop, StepParams
from sparkbeam.runners.core.timeline import Emissions, Timeline, emissions_of
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow

__all__ = ["InMemoryResult", "MemoryBackend", "run_in_memory"]


def bounded_source_elements(op: Any) -> list[WindowedValue]:
    """The elements of Create and Impulse, in the global window at the minimum timestamp."""
    window = (GlobalWindow(),)
    if isinstance(op, CreateOp):
        return [WindowedValue(v, MIN_TIMESTAMP.micros, window, PANE_INFO_UNKNOWN) for v in op.values]
    if isinstance(op, ImpulseOp):
        return [WindowedValue(b"", MIN_TIMESTAMP.micros, window, PANE_INFO_UNKNOWN)]
    msg = f"'{op.label}': {type(op).__name__} cannot run in memory"
    raise TypeError(msg)


#: readers the memory backend splits a BoundedSource for, so that splitting is exercised
MEMORY_READ_PARALLELISM = 2


def _read_bounded_source(op: BoundedSourceReadOp) -> list[WindowedValue]:
    from sparkbeam.runners.core.bounded_reads import read_bundles, split_for

    try:
        return list(read_bundles(op, split_for(op, MEMORY_READ_PARALLELISM)))
    except UserCodeError as failure:
        raise add_transform_note(failure.error, failure.label, failure.location) from None


class MemoryBackend:
    def __init__(self, overlapping_window_rule: bool = True) -> None:
        self.overlapping_window_rule = overlapping_window_rule
        self.states: dict[int, dict[Any, Any]] = {}
        self.engines: dict[int, Any] = {}
        #: per stage reading side inputs: main-input elements waiting for them
        self.parked: dict[int, list[WindowedValue]] = {}

    def source_dataset(self, stage: Stage, emission: SourceEmission) -> list[WindowedValue]:
        if emission.whole is not None:
            # io (#14 item 4): the memory backend's read of BoundedSourceReadOp (a registration at merge).
            if isinstance(emission.whole, BoundedSourceReadOp):
                return _read_bounded_source(emission.whole)
            if isinstance(emission.whole, ReadTextOp):
                msg = f"'{stage.name}': ReadFromText runs on the Spark runner"
                raise TypeError(msg)
            return bounded_source_elements(emission.whole)
        return list(emission.elements)

    def union(self, datasets: list[list[WindowedValue]]) -> list[WindowedValue]:
        return [wv for dataset in datasets for wv in dataset]

    def collect(self, dataset: list[WindowedValue]) -> list[WindowedValue]:
        return list(dataset)

    def _engine(self, op: GroupOp, params: StepParams) -> Any:
        from sparkbeam.runners.core.grouping import GroupingEngine

        key = id(op)
        if key not in self.engines:
            if op.combine_fn is not None:
                op.combine_fn.setup()
            self.engines[key] = GroupingEngine(
                op.windowing,
                combine_fn=op.combine_fn,
                overlapping_window_rule=self.overlapping_window_rule,
                batch=params.batch,
                keep_pane_indices=op.keep_pane_indices,
            )
        return self.engines[key]

    def run_stage(
        self,
        stage: Stage,
        inputs: dict[int, Any],
        params: StepParams,
        side_inputs: dict[int, list[WindowedValue]],
        wanted: frozenset[int] = frozenset(),
    ) -> StageResult:
        if must_wait(stage, params, stage.id in self.parked):
            return self._run_waiting(stage, inputs, params, side_inputs)
        summary = StageSummary()
        grouping = stage.grouping
        if grouping is not None:
            (source,) = grouping.inputs
            engine = self._engine(grouping, params)
            states = self.states.setdefault(stage.id, {})
            records: list[tuple[str, Any, Any]] = [(STATE, k, s) for k, s in states.items()]
            records.extend((ELEMENT, *key_element(grouping, wv)) for wv in inputs[source])
            states.clear()
            head_output: list[WindowedValue] = []
            for tag, key, payload in group_partition(engine, records, params):
                if tag == STATE:
                    states[key] = payload
                elif tag == PANE:
                    head_output.append(payload)
                elif tag == SUMMARY:
                    summary = payload
            (output,) = grouping.outputs
            entering = [(output, wv) for wv in head_output]
        else:
            entering = [(pcoll, wv) for pcoll, dataset in inputs.items() for wv in dataset]
            summary.elements_in = len(entering)
        body = FusedBody(stage, SideInputs(side_inputs) if side_inputs else None)
        produced: dict[int, list[WindowedValue]] = {pcoll: [] for pcoll in stage.outputs}
        try:
            for pcoll, wv in body.run(entering):
                produced[pcoll].append(wv)
        except UserCodeError as failure:
            raise add_transform_note(failure.error, failure.label, failure.location) from None
        body.finalize_bundle()
        if grouping is None:
            summary.elements_out = sum(len(v) for v in produced.values())
        return StageResult(produced, summary)

    def _run_waiting(
        self, stage: Stage, inputs: dict[int, Any], params: StepParams, side_inputs: dict[int, list[WindowedValue]]
    ) -> StageResult:
        (source,) = stage.inputs
        parked = self.parked.pop(stage.id, [])
        produced: dict[int, list[WindowedValue]] = {pcoll: [] for pcoll in stage.outputs}
        waiting: list[WindowedValue] = []
        summary = StageSummary()
        records = run_waiting(stage, SideInputs(side_inputs), params, inputs[source], parked)
        try:
            for tag, payload in records:
                if tag == OUTPUT:
                    pcoll, wv = payload
                    if pcoll in produced:
                        produced[pcoll].append(wv)
                elif tag == PARKED:
                    waiting.append(payload)
                elif tag == SUMMARY:
                    summary = payload
        except UserCodeError as failure:
            raise add_transform_note(failure.error, failure.label, failure.location) from None
        self.parked[stage.id] = waiting
        return StageResult(produced, summary)

    def write(self, stage: Stage, datasets: dict[int, Any], params: StepParams) -> None:
        msg = f"'{stage.sinks[0].label}': file sinks run on the Spark runner"
        raise TypeError(msg)

    def end_step(self, step: int) -> None:
        return None


@attrs.frozen
class InMemoryResult:
    plan: StagePlan
    timeline: Timeline
    emitted: dict[int, Emissions]
    pipeline: Pipeline

    def watermarks(self) -> Timeline:
        return self.timeline

    def emissions(self, pcoll: Any) -> Emissions:
        return emissions_of(self.plan, self.emitted, pcoll)

    def plot_watermarks(self, panes: Any = None, **kwargs: Any) -> Any:
        """A matplotlib figure of the watermark timeline (see ``sparkbeam.plotting``)."""
        from sparkbeam.plotting import plot_watermarks

        return plot_watermarks(self, panes, **kwargs)


def run_in_memory(
    pipeline: Pipeline,
    *,
    streaming: bool | None = None,
    clock: Clock | None = None,
    overlapping_window_rule: bool = True,
    max_steps: int | None = None,
) -> InMemoryResult:
    lowered = lower(pipeline)
    plan = plan_stages(lowered)
    if streaming is None:
        streaming = any(not info.is_bounded for info in lowered.pcollections)
    history = run_history(lowered, pipeline.options.get_all_options(), streaming=streaming)
    loop = StepLoop(
        plan,
        MemoryBackend(overlapping_window_rule),
        clock or ManualClock(),
        batch=not streaming,
        max_steps=max_steps,
        history=history,
    )
    loop.run()
    timeline = history.timeline([stage.name for stage in plan.stages])
    emitted = history.emitted({info.id: info.label for info in lowered.pcollections})
    return InMemoryResult(plan, timeline, emitted, pipeline)
