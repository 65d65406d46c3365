"""The step loop over Python lists: the engine alone, with no Spark.

``run_in_memory(pipeline)`` executes a pipeline in this process. The Spark runner is the
product; this backend exists so that the engine, the watermark bookkeeping and the
transcripts can be tested exactly and fast, and so that a Spark result can be compared with
the engine's own. It registers (``execution.backend_ops("in-memory")``) the sources whose
elements the driver holds (Create, Impulse, TestStream) and the strategies of the physical
plan it runs (a fused map, an unlifted grouping, a stateful DoFn, a side-input wait): the
physical pass plans each stage with those; it writes no files, and refuses what it does
not run by name.
"""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.metrics.execution import MetricsContainer, MetricsEnvironment, MetricUpdates
from sparkbeam.pipeline import Pipeline
from sparkbeam.plotting import plot_watermarks
from sparkbeam.runners.core.elements.dofn_invoker import SideInputs
from sparkbeam.runners.core.elements.execution import backend_ops, kind_of
from sparkbeam.runners.core.elements.fused import FusedBody
from sparkbeam.runners.core.elements.metrics import RunMetrics
from sparkbeam.runners.core.grouping.grouping import engine_for
from sparkbeam.runners.core.grouping.grouping_step import group_partition, key_element
from sparkbeam.runners.core.grouping.records import KeyedState, Pane, Parked, Summary
from sparkbeam.runners.core.loop.clock import Clock, ManualClock
from sparkbeam.runners.core.loop.history import run_history
from sparkbeam.runners.core.loop.side_input_wait import run_waiting
from sparkbeam.runners.core.loop.steps import StageResult, StepLoop
from sparkbeam.runners.core.loop.timeline import Emissions, Timeline, emissions_of
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError, add_transform_note
from sparkbeam.runners.core.lowering.ops import (
    BoundedSourceReadOp,
    CreateOp,
    GroupOp,
    ImpulseOp,
    Op,
    TestStreamOp,
    lower,
)
from sparkbeam.runners.core.lowering.settings import RunMode, RunSettings
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.runners.core.lowering.strategies import Capabilities, Strategy
from sparkbeam.runners.core.plan.physical import (
    PhysicalPlan,
    PlannedStage,
    StepFacts,
    choose,
    plan_physical,
)
from sparkbeam.runners.core.plan.plan import Stage, StagePlan, plan_stages
from sparkbeam.runners.core.sources.bounded_reads import read_bundles, split_for
from sparkbeam.runners.core.sources.sources import SourceEmission
from sparkbeam.runners.core.state.stateful_step import key_for_state, stateful_partition
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["MEMORY", "InMemoryResult", "MemoryBackend", "run_in_memory"]

#: what the in-memory backend runs, per op type
MEMORY = backend_ops("in-memory")


#: readers the memory backend splits a BoundedSource for, so that splitting is exercised
MEMORY_READ_PARALLELISM = 2


def _read_bounded_source(op: BoundedSourceReadOp) -> list[WindowedValue]:
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
        #: the metric updates of the step running (one unit of work per stage, committed
        #: when the stage's work succeeds)
        self.step_updates = MetricUpdates()

    def capabilities(self) -> Capabilities:
        return MEMORY.capabilities()

    def source_dataset(self, planned: PlannedStage, emission: SourceEmission) -> list[WindowedValue]:
        stage = planned.stage
        head = stage.head
        if head is None:
            msg = f"'{stage.name}' is not a source stage"
            raise TypeError(msg)
        read = MEMORY.sources.lookup(head)
        return [] if emission.is_empty else read(self, head, emission)

    def union(self, datasets: list[list[WindowedValue]]) -> list[WindowedValue]:
        return [wv for dataset in datasets for wv in dataset]

    def collect(self, dataset: list[WindowedValue]) -> list[WindowedValue]:
        return list(dataset)

    def _engine(self, op: GroupOp, params: StepParams) -> Any:
        key = id(op)
        if key not in self.engines:
            self.engines[key] = engine_for(op, overlapping_window_rule=self.overlapping_window_rule, batch=params.batch)
        return self.engines[key]

    def run_stage(
        self,
        planned: PlannedStage,
        inputs: dict[int, Any],
        params: StepParams,
        side_inputs: dict[int, list[WindowedValue]],
    ) -> StageResult:
        stage = planned.stage
        facts = StepFacts(params, nothing_new=not any(inputs.values()), has_state=stage.id in self.parked)
        run = MEMORY.strategies.lookup(choose(planned, facts))
        container = MetricsContainer()
        with MetricsEnvironment.container_scope(container):
            result = run(self, stage, inputs, params, side_inputs)
        self.step_updates = self.step_updates.combine(container.updates())
        return result

    def step_metrics(self) -> tuple[MetricUpdates, MetricUpdates]:
        """The step's committed metric updates; no attempt is retried in memory."""
        updates, self.step_updates = self.step_updates, MetricUpdates()
        return updates, MetricUpdates()

    def _run_fused(
        self, stage: Stage, inputs: dict[int, Any], params: StepParams, side_inputs: dict[int, list[WindowedValue]]
    ) -> StageResult:
        """``Strategy.FUSED_MAP``: the stage's body over its inputs."""
        entering = [(pcoll, wv) for pcoll, dataset in inputs.items() for wv in dataset]
        return self._body(stage, entering, StageSummary(elements_in=len(entering)), side_inputs, count_out=True)

    def _run_keyed(
        self, stage: Stage, inputs: dict[int, Any], params: StepParams, side_inputs: dict[int, list[WindowedValue]]
    ) -> StageResult:
        """``Strategy.UNLIFTED_GROUPING`` and ``Strategy.STATEFUL``: the keyed head over
        all keys at once, then the body over what it emitted."""
        grouping = stage.grouping
        if grouping is None:
            msg = f"'{stage.name}': planned as a keyed stage, but no grouping heads it"
            raise TypeError(msg)
        if kind_of(grouping).user_state:
            entering, summary = self._run_stateful(grouping, stage, inputs, params)
        else:
            entering, summary = self._run_grouping(grouping, stage, inputs, params)
        return self._body(stage, entering, summary, side_inputs, count_out=False)

    def _body(
        self,
        stage: Stage,
        entering: list[tuple[int, WindowedValue]],
        summary: StageSummary,
        side_inputs: dict[int, list[WindowedValue]],
        *,
        count_out: bool,
    ) -> StageResult:
        body = FusedBody(stage, SideInputs(side_inputs) if side_inputs else None)
        produced: dict[int, list[WindowedValue]] = {pcoll: [] for pcoll in stage.outputs}
        try:
            for pcoll, wv in body.run(entering):
                produced[pcoll].append(wv)
        except UserCodeError as failure:
            raise add_transform_note(failure.error, failure.label, failure.location) from None
        body.finalize_bundle()
        if count_out:
            summary.elements_out = sum(len(v) for v in produced.values())
        return StageResult(produced, summary)

    def _run_stateful(
        self, op: Op, stage: Stage, inputs: dict[int, Any], params: StepParams
    ) -> tuple[list[tuple[int, WindowedValue]], StageSummary]:
        """A stateful DoFn's step over all keys at once: its outputs (by PCollection) and summary."""
        (source,) = op.inputs
        states = self.states.setdefault(stage.id, {})
        records: list[tuple[Any, Any]] = [(k, KeyedState(s)) for k, s in states.items()]
        try:
            records.extend(key_for_state(op, wv) for wv in inputs[source])
        except TransformError as error:
            raise add_transform_note(error, op.label, op.location) from None
        states.clear()
        outputs: list[tuple[int, WindowedValue]] = []
        summary = StageSummary()
        try:
            for where, record in stateful_partition(op, records, params):
                kind = type(record)
                if kind is KeyedState:
                    states[where] = record.state
                elif kind is Summary:
                    summary = record.summary
                else:
                    outputs.append((where, record))
        except UserCodeError as failure:
            raise add_transform_note(failure.error, failure.label, failure.location) from None
        return outputs, summary

    def _run_waiting(
        self, stage: Stage, inputs: dict[int, Any], params: StepParams, side_inputs: dict[int, list[WindowedValue]]
    ) -> StageResult:
        """``Strategy.SIDE_INPUT_WAIT``: the ready elements run, the others wait."""
        (source,) = stage.inputs
        parked = self.parked.pop(stage.id, [])
        produced: dict[int, list[WindowedValue]] = {pcoll: [] for pcoll in stage.outputs}
        waiting: list[WindowedValue] = []
        summary = StageSummary()
        records = run_waiting(stage, SideInputs(side_inputs), params, inputs[source], parked)
        try:
            for where, record in records:
                kind = type(record)
                if kind is WindowedValue:
                    if where in produced:
                        produced[where].append(record)
                elif kind is Parked:
                    waiting.append(record.element)
                elif kind is Summary:
                    summary = record.summary
        except UserCodeError as failure:
            raise add_transform_note(failure.error, failure.label, failure.location) from None
        self.parked[stage.id] = waiting
        return StageResult(produced, summary)

    def _run_grouping(
        self, grouping: Op, stage: Stage, inputs: dict[int, Any], params: StepParams
    ) -> tuple[list[tuple[int, WindowedValue]], StageSummary]:
        """A grouping's step over all keys at once: its panes (by PCollection) and its summary."""
        (source,) = grouping.inputs
        engine = self._engine(grouping, params)
        states = self.states.setdefault(stage.id, {})
        records: list[tuple[Any, KeyedState | WindowedValue]] = [(k, KeyedState(s)) for k, s in states.items()]
        records.extend(key_element(grouping, wv) for wv in inputs[source])
        states.clear()
        panes: list[WindowedValue] = []
        summary = StageSummary()
        for key, record in group_partition(engine, records, params):
            kind = type(record)
            if kind is KeyedState:
                states[key] = record.state
            elif kind is Pane:
                panes.append(record.element)
            elif kind is Summary:
                summary = record.summary
        (output,) = grouping.outputs
        return [(output, pane) for pane in panes], summary

    def write(self, stage: Stage, datasets: dict[int, Any], params: StepParams) -> None:
        for sink in stage.sinks:
            (pcoll,) = sink.inputs
            MEMORY.sinks.lookup(sink)(self, sink, datasets[pcoll], params)

    def end_step(self, step: int) -> None:
        return None


@MEMORY.sources.register(CreateOp, ImpulseOp)
def _driver_elements(backend: MemoryBackend, op: Op, emission: SourceEmission) -> list[WindowedValue]:
    elements = kind_of(op).driver_elements
    return [] if elements is None else elements(op)


@MEMORY.sources.register(BoundedSourceReadOp)
def _bounded_source(backend: MemoryBackend, op: BoundedSourceReadOp, emission: SourceEmission) -> list[WindowedValue]:
    return _read_bounded_source(op)


@MEMORY.sources.register(TestStreamOp)
def _test_stream_step(backend: MemoryBackend, op: Op, emission: SourceEmission) -> list[WindowedValue]:
    return list(emission.elements)


MEMORY.strategies.register(Strategy.FUSED_MAP)(MemoryBackend._run_fused)
MEMORY.strategies.register(Strategy.UNLIFTED_GROUPING, Strategy.STATEFUL)(MemoryBackend._run_keyed)
MEMORY.strategies.register(Strategy.SIDE_INPUT_WAIT)(MemoryBackend._run_waiting)


@attrs.frozen
class InMemoryResult:
    plan: StagePlan
    timeline: Timeline
    emitted: dict[int, Emissions]
    pipeline: Pipeline
    run_metrics: RunMetrics = attrs.field(factory=RunMetrics)
    physical: PhysicalPlan | None = None

    def physical_plan(self) -> PhysicalPlan | None:
        """How each stage ran: its strategy, why, and what was declined (``physical.py``)."""
        return self.physical

    def metrics(self) -> RunMetrics:
        """The user's metrics (``Metrics.counter`` and its siblings), as Beam's result has them."""
        return self.run_metrics

    def watermarks(self) -> Timeline:
        return self.timeline

    def emissions(self, pcoll: Any) -> Emissions:
        return emissions_of(self.plan, self.emitted, pcoll)

    def plot_watermarks(self, panes: Any = None, **kwargs: Any) -> Any:
        """A matplotlib figure of the watermark timeline (see ``sparkbeam.plotting``)."""
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
    MEMORY.check(plan)
    if streaming is None:
        streaming = any(not info.is_bounded for info in lowered.pcollections)
    history = run_history(lowered, RunSettings.from_options(pipeline.options), streaming=streaming)
    backend = MemoryBackend(overlapping_window_rule)
    physical = plan_physical(plan, RunMode.STREAMING if streaming else RunMode.BATCH, backend.capabilities())
    loop = StepLoop(
        plan,
        backend,
        clock or ManualClock(),
        batch=not streaming,
        max_steps=max_steps,
        history=history,
        physical=physical,
    )
    loop.run()
    timeline = history.timeline([stage.name for stage in plan.stages])
    emitted = history.emitted({info.id: info.label for info in lowered.pcollections})
    return InMemoryResult(plan, timeline, emitted, pipeline, loop.metrics, physical)
