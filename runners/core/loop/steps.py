"""The step loop: every stage's input and output watermark, one step (micro-batch) at a time.

Per step (DESIGN §4): sources deliver their new elements and watermarks; then stages run
in topological order. A stage first adds the elements its upstreams emitted in this step,
judged against its input watermark *as it was* (elements in flight hold a stage's input
watermark back), and fires what element-driven triggers call for; then its input watermark
moves to the minimum of its upstreams' new output watermarks; then event-time and
processing-time timers fire; last, its output watermark becomes min(input, earliest hold).
Batch is one step in which the input watermark goes from -inf straight to +inf.

The loop is backend-neutral: a ``Backend`` moves the data (Python lists in memory, RDDs on
Spark), each stage by the strategy the physical plan gives it (``physical.py``, made
before the first step from what the backend declares it can do); the loop does the
watermark bookkeeping and records the timeline and the captured emissions in a
``RunHistory``, which keeps a stream's recent steps and logs the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from sparkbeam.runners.core.elements.execution import make_source_state
from sparkbeam.runners.core.elements.metrics import RunMetrics
from sparkbeam.runners.core.grouping.holds import output_watermark
from sparkbeam.runners.core.loop.clock import Clock
from sparkbeam.runners.core.loop.history import RunHistory
from sparkbeam.runners.core.loop.side_input_wait import expire_side_contents
from sparkbeam.runners.core.loop.timeline import StepEmissions, WatermarkRecord
from sparkbeam.runners.core.lowering.settings import RunMode
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.runners.core.lowering.strategies import Capabilities
from sparkbeam.runners.core.plan.physical import PhysicalPlan, PlannedStage, plan_physical
from sparkbeam.runners.core.plan.plan import Stage, StagePlan
from sparkbeam.runners.core.sources.sources import SourceEmission, SourceReport, SourceState
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["Backend", "StageResult", "StepHooks", "StepLoop"]

MIN = MIN_TIMESTAMP.micros
MAX = MAX_TIMESTAMP.micros


@attrs.frozen
class StageResult:
    outputs: dict[int, Any]  # PCollection id -> backend dataset
    #: the stage's report; a callable when it is only known after the step's jobs ran
    summary: StageSummary | Callable[[], StageSummary]
    #: the callable summary carries the stage's holds (a keyed stage whose job the backend
    #: put off, to run it with later stages' in one): its output watermark waits for it
    deferred: bool = False


class StepHooks(Protocol):
    """What a run with real sources does around each step: choose and journal the step's
    input and time before it (or replay them after a restart); checkpoint after it."""

    def before_step(self, step: int) -> None: ...

    def after_step(self, step: int) -> None: ...


class Backend(Protocol):
    def capabilities(self) -> Capabilities:
        """What the physical plan may use: the strategies the backend registered, and
        what its session allows."""
        ...

    def source_dataset(self, planned: PlannedStage, emission: SourceEmission) -> Any: ...

    def union(self, datasets: list[Any]) -> Any: ...

    def run_stage(
        self,
        planned: PlannedStage,
        inputs: dict[int, Any],
        params: StepParams,
        side_inputs: dict[int, list[WindowedValue]],
    ) -> StageResult:
        """Run one stage for one step by the strategy ``physical.choose`` picks from its
        plan; its ``collected`` outputs will be collected (a backend may fetch them with
        the stage's own job)."""
        ...

    def collect(self, dataset: Any) -> list[WindowedValue]: ...

    def write(self, stage: Stage, datasets: dict[int, Any], params: StepParams) -> None: ...

    def end_step(self, step: int) -> None: ...


class _Unsettled:
    """The stages of a step whose output watermark is not known yet: keyed stages whose job
    the backend put off (their holds come with it), and the element-wise stages downstream
    of them. A stage downstream of these still runs with its exact input watermark when
    their watermarks cannot move it: each of them is bounded by its input watermark, since
    a stage's output is never ahead of its input."""

    def __init__(self) -> None:
        self._entries: list[tuple[_StageRuntime, StageResult, frozenset[int], bool]] = []
        #: stage id -> the most its output watermark can be after this step
        self._bounds: dict[int, int] = {}

    def __bool__(self) -> bool:
        return bool(self._entries)

    def add(
        self,
        runtimes: list[_StageRuntime],
        runtime: _StageRuntime,
        result: StageResult,
        wanted: frozenset[int],
        *,
        input_known: bool,
    ) -> None:
        bound = runtime.input_watermark if input_known else self._highest_input(runtimes, runtime)
        self._entries.append((runtime, result, wanted, input_known))
        self._bounds[runtime.stage.id] = bound

    def _highest_input(self, runtimes: list[_StageRuntime], runtime: _StageRuntime) -> int:
        upstream = min(self._bounds.get(u, runtimes[u].output_watermark) for u in runtime.stage.upstream)
        return max(upstream, runtime.input_watermark)

    def input_watermark(self, runtimes: list[_StageRuntime], runtime: _StageRuntime) -> int | None:
        """The stage's new input watermark, or None while it depends on unsettled stages."""
        highest = self._highest_input(runtimes, runtime)
        if highest == runtime.input_watermark or not any(u in self._bounds for u in runtime.stage.upstream):
            return highest  # exact: the watermarks being settled cannot move it
        return None

    def take(self) -> list[tuple[_StageRuntime, StageResult, frozenset[int], bool]]:
        entries, self._entries = self._entries, []
        self._bounds.clear()
        return entries


@attrs.define
class _StageRuntime:
    planned: PlannedStage
    input_watermark: int = MIN
    output_watermark: int = MIN
    summary: StageSummary = attrs.field(factory=StageSummary)
    source: SourceState | None = None

    @property
    def stage(self) -> Stage:
        return self.planned.stage


class StepLoop:
    """Drives a planned pipeline step by step over a backend."""

    def __init__(
        self,
        plan: StagePlan,
        backend: Backend,
        clock: Clock,
        *,
        batch: bool,
        max_steps: int | None = None,
        on_record: Callable[[WatermarkRecord], None] | None = None,
        hooks: StepHooks | None = None,
        history: RunHistory | None = None,
        physical: PhysicalPlan | None = None,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.clock = clock
        self.batch = batch
        self.max_steps = max_steps
        mode = RunMode.BATCH if batch else RunMode.STREAMING
        #: how each stage runs (the runner passes the plan it shows the user)
        self.physical = physical if physical is not None else plan_physical(plan, mode, backend.capabilities())
        if self.physical.plan is not plan or self.physical.mode is not mode:
            msg = "StepLoop: the physical plan given is not this stage plan's, in this mode"
            raise ValueError(msg)
        self.runtimes = [_StageRuntime(planned) for planned in self.physical.stages]
        for runtime in self.runtimes:
            if runtime.stage.is_source and runtime.stage.head is not None:
                runtime.source = make_source_state(runtime.stage.head)
        # Unbounded unless the runner says otherwise (a stream's --timeline_retention_steps).
        self.history = history if history is not None else RunHistory(plan.lowered.captured)
        #: the user's metrics: totals, and per step for as many steps as the timeline keeps
        self.metrics = RunMetrics(self.history.retention_steps)
        self.side_contents: dict[int, list[WindowedValue]] = {p: [] for p in plan.side_input_pcolls()}
        #: side-input PCollection -> the stage producing it, and the stages reading it
        self._side_producer = {p: plan.stage_of(p).id for p in self.side_contents}
        self._side_readers = {p: [s.id for s in plan.stages if p in self._side_slots(s)] for p in self.side_contents}
        self.on_record = on_record
        self.hooks = hooks
        self.step = 0
        self._stop = threading.Event()
        self.cancelled = False  # run() returned because request_stop() asked it to

    def request_stop(self) -> None:
        """Stop before the next step (safe from another thread): ``run()`` returns at the
        step boundary with ``cancelled`` set, leaving the loop's state as a checkpoint wants it."""
        self._stop.set()

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> None:
        if self.batch:
            self.run_step()
            return
        while not self.finished():
            if self.max_steps is not None and self.step >= self.max_steps:
                return
            if self._stop.is_set():
                self.cancelled = True
                return
            before = self._progress_marker()
            self.run_step()
            if self._sources_done() and self._progress_marker() == before:
                # The input is over and a whole step changed nothing: what is left is state
                # that no watermark can release (its holds are at the end of time).
                return

    def _sources_done(self) -> bool:
        return all(rt.source is None or rt.source.done for rt in self.runtimes)

    def _progress_marker(self) -> tuple:
        return tuple(
            (rt.input_watermark, rt.output_watermark, rt.summary.elements_in, rt.summary.elements_out)
            for rt in self.runtimes
        )

    def finished(self) -> bool:
        return self._sources_done() and all(rt.output_watermark >= MAX for rt in self.runtimes)

    def run_step(self) -> None:
        step = self.step
        if self.hooks is not None:
            self.hooks.before_step(step)
        emissions = {}
        advance = 0
        for runtime in self.runtimes:
            if runtime.source is not None:
                emission = runtime.source.next_step()
                emissions[runtime.stage.id] = emission
                advance = max(advance, emission.advance_clock_by)
        if advance:
            self.clock.advance(advance)
        wall = self.clock.now_micros()
        # In batch every processing-time timer fires at the end, as the watermark does.
        now = MAX if self.batch else wall
        produced: dict[int, list[Any]] = {}
        pending_summaries: list[tuple[_StageRuntime, Callable[[], StageSummary]]] = []
        reports: dict[int, SourceReport] = {}
        unsettled = _Unsettled()
        for runtime in self.runtimes:
            stage = runtime.stage
            side_slots = self._side_slots(stage)
            if runtime.source is not None:
                emission = emissions[stage.id]
                (head_output,) = stage.head.outputs
                inputs = {head_output: self.backend.source_dataset(runtime.planned, emission)}
                new_input = exact = max(emission.watermark, runtime.input_watermark)
                if emission.report is not None:
                    reports[stage.id] = emission.report
            else:
                inputs = {p: self.backend.union(produced.get(p, [])) for p in stage.inputs}
                exact = unsettled.input_watermark(self.runtimes, runtime)
                if exact is None and (stage.grouping is not None or side_slots or stage.sinks):
                    # Its step needs its exact input watermark (or its side inputs): run the
                    # jobs put off so far, which settle the upstream watermarks.
                    self._settle(unsettled, pending_summaries, step, wall)
                    exact = unsettled.input_watermark(self.runtimes, runtime)
                elif side_slots and unsettled:
                    self._settle(unsettled, pending_summaries, step, wall)
                new_input = exact if exact is not None else runtime.input_watermark
            side = {slot: self.side_contents[slot] for slot in side_slots}
            params = StepParams(
                step=step,
                old_input_watermark=MIN if self.batch else runtime.input_watermark,
                new_input_watermark=MAX if self.batch else new_input,
                output_watermark=MIN if self.batch else runtime.output_watermark,
                now=now,
                batch=self.batch,
                # Producers run first in a step: these are their watermarks after this step.
                side_input_watermarks=tuple(
                    sorted((p, self.runtimes[self._side_producer[p]].output_watermark) for p in side)
                ),
            )
            wanted = runtime.planned.collected
            result = self.backend.run_stage(runtime.planned, inputs, params, side)
            for pcoll, dataset in result.outputs.items():
                produced.setdefault(pcoll, []).append(dataset)
            if not result.deferred:
                self._take_wanted(result, wanted, step, wall)
            if stage.sinks:
                self.backend.write(stage, result.outputs, params)
            if runtime.source is None and exact is None:
                # An element-wise stage downstream of a put-off job: its watermark follows
                # its upstreams' once they settle.
                unsettled.add(self.runtimes, runtime, result, wanted, input_known=False)
                continue
            runtime.input_watermark = params.new_input_watermark
            if result.deferred:
                unsettled.add(self.runtimes, runtime, result, wanted, input_known=True)
                continue
            if callable(result.summary):
                pending_summaries.append((runtime, result.summary))
                summary = StageSummary()
            else:
                summary = result.summary
            self._advance_output(runtime, summary)
            if callable(result.summary):
                continue
            runtime.summary = summary
        self._settle(unsettled, pending_summaries, step, wall)
        for runtime, late_summary in pending_summaries:
            runtime.summary = late_summary()
        # After every job of the step: what its tasks committed and its failed attempts did.
        step_metrics = getattr(self.backend, "step_metrics", None)
        if step_metrics is not None:
            self.metrics.add_step(step, *step_metrics())
        for stage_id, report in reports.items():
            runtime = self.runtimes[stage_id]
            runtime.summary = attrs.evolve(
                runtime.summary,
                late_dropped=runtime.summary.late_dropped + report.dropped,
                dead_letters=runtime.summary.dead_letters + report.dead_letters,
                earliest_hold=report.hold,
                hold_key=report.hold_partition,
            )
        if not self.batch:
            self._expire_side_contents()
        for runtime in self.runtimes:
            self._record(runtime, step, wall)
        self.backend.end_step(step)
        # Logged and trimmed before a checkpoint, which then holds only the kept steps.
        self.history.end_step(step)
        self.step += 1
        if self.hooks is not None:
            self.hooks.after_step(step)

    def _take_wanted(self, result: StageResult, wanted: frozenset[int], step: int, wall: int) -> None:
        """Collect a stage's wanted outputs: side-input contents and captured emissions."""
        for pcoll, dataset in result.outputs.items():
            if pcoll not in wanted:
                continue
            elements = self.backend.collect(dataset)
            if pcoll in self.side_contents:
                self.side_contents[pcoll].extend(elements)
            if self.history.captures(pcoll):
                # Held as the elements (a list of its own), made Emissions when read.
                self.history.add_emissions(pcoll, step, StepEmissions(list(elements), step, wall))

    def _settle(
        self,
        unsettled: _Unsettled,
        pending_summaries: list[tuple[_StageRuntime, Callable[[], StageSummary]]],
        step: int,
        wall: int,
    ) -> None:
        """Run the jobs the backend put off (the first summary asked for runs them all, as
        one) and settle, producers first, the watermarks that waited for them."""
        for runtime, result, wanted, input_known in unsettled.take():
            if not input_known:
                upstream = min(self.runtimes[u].output_watermark for u in runtime.stage.upstream)
                runtime.input_watermark = max(upstream, runtime.input_watermark)
            summary = result.summary
            if result.deferred and callable(summary):
                summary = summary()
                self._take_wanted(result, wanted, step, wall)
            elif callable(summary):
                # An element-wise stage's counts: known once the step's last job has run.
                pending_summaries.append((runtime, summary))
                summary = StageSummary()
            self._advance_output(runtime, summary)
            runtime.summary = summary

    @property
    def records(self) -> list[WatermarkRecord]:
        """The timeline records kept in memory (a stream's last retained steps)."""
        return self.history.records()

    # -- checkpoints -------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The loop's state between steps (the backend keeps the keyed state)."""
        return {
            "step": self.step,
            "runtimes": [
                (rt.input_watermark, rt.output_watermark, rt.summary, rt.source.snapshot() if rt.source else None)
                for rt in self.runtimes
            ],
            "history": self.history.snapshot(),
            "side_contents": self.side_contents,
            "metrics": self.metrics.snapshot(),
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.step = data["step"]
        for runtime, (input_wm, output_wm, summary, source) in zip(self.runtimes, data["runtimes"]):
            runtime.input_watermark = input_wm
            runtime.output_watermark = output_wm
            runtime.summary = summary
            if runtime.source is not None and source is not None:
                runtime.source.restore(source)
        self.history.restore(data["history"])
        self.side_contents = {p: list(data["side_contents"].get(p, [])) for p in self.side_contents}
        if "metrics" in data:  # checkpoints written before metrics have none
            self.metrics.restore(data["metrics"])

    def _expire_side_contents(self) -> None:
        """Drop side-input windows that expired behind every reading stage's input
        watermark, so that a long stream keeps (and checkpoints) only live windows."""
        infos = self.plan.lowered.pcollections
        for pcoll, elements in self.side_contents.items():
            if not elements:
                continue
            watermark = min(self.runtimes[r].input_watermark for r in self._side_readers[pcoll])
            lateness = infos[pcoll].windowing.allowed_lateness.micros
            self.side_contents[pcoll] = expire_side_contents(elements, watermark, lateness)

    def _side_slots(self, stage: Stage) -> set[int]:
        return {slot.pcoll for op in stage.body for slot in op.side_inputs}

    def _advance_output(self, runtime: _StageRuntime, summary: StageSummary) -> None:
        runtime.output_watermark = output_watermark(
            runtime.output_watermark, runtime.input_watermark, summary.earliest_hold
        )
        if runtime.stage.grouping is None and summary.earliest_hold is None:
            # An element-wise stage holds only main-input elements waiting for a side input.
            runtime.output_watermark = max(runtime.output_watermark, runtime.input_watermark)

    def _record(self, runtime: _StageRuntime, step: int, now: int) -> None:
        summary = runtime.summary
        record = WatermarkRecord(
            step=step,
            processing_time=now,
            stage=runtime.stage.name,
            stage_id=runtime.stage.id,
            input_watermark=runtime.input_watermark,
            output_watermark=runtime.output_watermark,
            earliest_hold=summary.earliest_hold,
            hold_key=summary.hold_key,
            hold_window=summary.hold_window,
            elements_in=summary.elements_in,
            elements_out=summary.elements_out,
            late_dropped=summary.late_dropped,
            closed_dropped=summary.closed_dropped,
            state_keys=summary.state_keys,
            state_windows=summary.state_windows,
            dead_letters=summary.dead_letters,
            merged_into_closed_dropped=summary.merged_into_closed_dropped,
            expired_state_dropped=summary.expired_state_dropped,
            side_input_waiting=summary.side_input_waiting,
            records_shuffled=summary.records_shuffled,
        )
        self.history.add_record(record)
        if self.on_record is not None:
            self.on_record(record)
