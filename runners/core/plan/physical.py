"""The physical plan: how each stage runs, decided once, before the first step.

``plan_physical(stage_plan, mode, capabilities)`` is a pure pass: from the stage plan, the
run's mode (batch or a stream) and what the backend declares it can do (the strategies it
registered, and whether its driver may run tiny stages), it gives every stage a
``PlannedStage``: the ``Strategy`` that runs it, why, and why the others were declined.
What only the data of a step can decide is planned too, as alternatives with named
conditions ("skipped (idle) when no new elements and no timer due"); the step loop's
backend checks them with one shared function, ``choose``, and runs the strategy it names
through its registry (``execution.BackendOps.strategies``). A backend makes no choice of
its own: two backends (in memory, Spark; Spark Connect next) run the same plan, each with
the strategies it registered.

The choices, stage by stage:

- a keyed stage (a grouping or a stateful DoFn): a stateful DoFn keeps state per key
  (``STATEFUL``); a grouping that fires one pane per key and window in batch (the default
  trigger over windows that do not merge) combines before the shuffle and merges after,
  with no keyed state (``BATCH_COMBINE``); otherwise keyed state, with the combine lifted
  before the shuffle where ``combine_lifts`` (``LIFTED_GROUPING``) or the elements
  shuffled as they are (``UNLIFTED_GROUPING``). In a stream each may be skipped on a step
  with no new elements and nothing due, and its summary job may wait to run with the
  step's other keyed stages' as one (``put_off_summary``);
- a stage reading side inputs, in a stream: ``SIDE_INPUT_WAIT``, or its elements run as a
  fused map on a step where every side input is complete and nothing waits;
- an element-wise stage: a fused map; inside the map side of a batch grouping that alone
  reads its output (``MAP_SIDE_PASS``: the stage plan shows two stages, the physical plan
  one pass); on the driver on a step where the driver holds its few inputs
  (``DRIVER_RUN``, where the backend allows it); a source stage with no body handed on as
  read where the driver holds or has counted the elements (``AS_READ``).

``PhysicalPlan.describe()`` is what ``result.physical_plan()`` prints; the golden files of
``tests/runners/physical_plans/`` pin it for representative pipelines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from sparkbeam.runners.core.elements.execution import Role, keyed_strategy, kind_of
from sparkbeam.runners.core.grouping.holds import output_time_ignores_window
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import GroupOp, Op
from sparkbeam.runners.core.lowering.settings import RunMode
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams, nothing_due
from sparkbeam.runners.core.lowering.strategies import (
    Capabilities,
    Condition,
    SourceRead,
    StateStore,
    Strategy,
)
from sparkbeam.runners.core.plan.plan import Stage, StagePlan
from sparkbeam.trigger import DefaultTrigger
from sparkbeam.utils.timestamp import MAX_TIMESTAMP

__all__ = [
    "DRIVER_STAGE_MAX_ELEMENTS",
    "Alternative",
    "Declined",
    "PhysicalPlan",
    "PlannedStage",
    "StepFacts",
    "batch_combines",
    "choose",
    "combine_lifts",
    "condition_holds",
    "plan_physical",
]

MAX = MAX_TIMESTAMP.micros
#: at most this many input elements for a stage run in the driver's process
DRIVER_STAGE_MAX_ELEMENTS = 256


@attrs.frozen
class Alternative:
    """Run ``strategy`` instead of the planned one on a step where every condition holds."""

    when: tuple[Condition, ...]
    strategy: Strategy

    def describe(self) -> str:
        return f"{self.strategy.value} when {' and '.join(c.value for c in self.when)}"


@attrs.frozen
class Declined:
    strategy: Strategy
    why: str


@attrs.frozen
class PlannedStage:
    """How one stage runs (see the module docs)."""

    stage: Stage
    strategy: Strategy
    reason: str
    #: checked in order at each step (``choose``): the first whose conditions hold runs
    alternatives: tuple[Alternative, ...] = ()
    declined: tuple[Declined, ...] = ()
    #: a source stage: where its head's elements come from
    read: SourceRead | None = None
    #: the stage planner's note on its head (a SQL plan, or why not: ``plan.note``)
    note: str | None = None
    #: one input and one output: elements pass without their PCollection ids
    bare: bool = False
    #: outputs read more than once (several outputs, or one with several readers): kept
    #: for the step, so that the body runs once
    keep_outputs: bool = False
    #: outputs the run collects to the driver (captures, side inputs)
    collected: frozenset[int] = frozenset()
    #: a keyed stage's summary job waits, to run with the step's other keyed stages'
    put_off_summary: bool = False
    #: nothing reads the stage's outputs: on a lazy backend a job of its own runs it
    leaf: bool = False
    #: MAP_SIDE_PASS: the batch grouping stage whose map side runs this stage's body
    map_side_into: int | None = None
    #: BATCH_COMBINE: the stage whose body its map side runs (when that stage ran lazily)
    map_side_of: int | None = None
    #: a keyed stage: where its state lives between steps (None: the backend's own way)
    state_store: StateStore | None = None

    @property
    def id(self) -> int:
        return self.stage.id

    @property
    def strategies(self) -> frozenset[Strategy]:
        """Every strategy a step of the stage may run."""
        return frozenset({self.strategy, *(alternative.strategy for alternative in self.alternatives)})

    def describe(self, labels: Mapping[int, str] | None = None) -> str:
        """The stage's plan, a line each (``labels``: PCollection id -> label, to name
        the outputs collected)."""
        lines = [f"stage {self.stage.id} {self.stage.name!r}: {self.strategy.value}"]
        if self.read is not None:
            lines.append(f"    read: {self.read.value}")
        if self.note is not None:
            lines.append(f"    planner: {self.note}")
        lines.append(f"    why: {self.reason}")
        lines.extend(f"    instead: {alternative.describe()}" for alternative in self.alternatives)
        lines.extend(f"    declined {declined.strategy.value}: {declined.why}" for declined in self.declined)
        if self.state_store is not None:
            lines.append(f"    state: {self.state_store.value}, {_STORE_REASONS[self.state_store]}")
        notes = []
        if self.map_side_into is not None:
            notes.append(f"runs in stage {self.map_side_into}'s map side")
        if self.map_side_of is not None:
            notes.append(f"its map side runs stage {self.map_side_of}'s body")
        if self.bare:
            notes.append("elements pass bare")
        if self.keep_outputs:
            notes.append("outputs kept for their readers")
        if self.collected:
            named = sorted(labels.get(pcoll, str(pcoll)) if labels else str(pcoll) for pcoll in self.collected)
            notes.append(f"collects {', '.join(named)}")
        if self.put_off_summary:
            notes.append("summary job put off to run with the step's others")
        if self.leaf:
            notes.append("a leaf: a job of its own runs it")
        if notes:
            lines.append(f"    {'; '.join(notes)}")
        return "\n".join(lines)


@attrs.frozen
class PhysicalPlan:
    """The stage plan with a ``PlannedStage`` per stage (in the same order)."""

    stages: tuple[PlannedStage, ...]
    plan: StagePlan
    mode: RunMode
    capabilities: Capabilities

    def stage(self, stage_id: int) -> PlannedStage:
        return self.stages[stage_id]

    def describe(self) -> str:
        """A readable listing, for users (``result.physical_plan()``) and golden tests."""
        driver = ", tiny stages on the driver" if self.capabilities.driver_runs_tiny_stages else ""
        head = f"physical plan ({self.mode.value}, {self.capabilities.backend} backend{driver})"
        labels = {info.id: info.label for info in self.plan.lowered.pcollections}
        return "\n".join([head, *(planned.describe(labels) for planned in self.stages)])

    __str__ = describe


# ------------------------------------------------------------------------------ the rules


def batch_combines(op: GroupOp) -> bool:
    """Whether a grouping fires exactly one pane per key and window in batch, when the
    watermark jumps to +inf: the default trigger over windows that do not merge."""
    windowing = op.windowing
    return isinstance(windowing.triggerfn, DefaultTrigger) and not windowing.windowfn.is_merging()


def combine_lifts(op: GroupOp) -> bool:
    """Whether a grouping is combined before its shuffle into keyed state
    (``lifting.py``): a combine over windows that do not merge, or over merging windows
    (sessions) per proto-session where an element's output time does not depend on the
    window it merges into."""
    if op.combine_fn is None:
        return False
    return not op.windowing.windowfn.is_merging() or output_time_ignores_window(op.windowing)


def _not_run(capabilities: Capabilities) -> str:
    return f"the {capabilities.backend} backend does not run it"


def _keyed(stage: Stage, head: Op, mode: RunMode, capabilities: Capabilities) -> tuple[Strategy, str, list[Declined]]:
    kind = kind_of(head)
    required = keyed_strategy(kind)
    if not capabilities.runs(required):
        msg = (
            f"'{head.label}' (applied at {head.location}): the {capabilities.backend} backend cannot run "
            f"{type(head).__name__} (it does not run the strategy {required.value!r})"
        )
        raise UnsupportedError(msg)
    if kind.user_state:
        why_not = "a stateful DoFn keeps state of its own per key"
        declined = [Declined(s, why_not) for s in (Strategy.BATCH_COMBINE, Strategy.LIFTED_GROUPING)]
        return Strategy.STATEFUL, "a stateful DoFn: its state and timers kept per key between steps", declined
    if not isinstance(head, GroupOp):
        msg = f"'{head.label}' (applied at {head.location}): {type(head).__name__} is keyed but neither a grouping nor a stateful DoFn"
        raise UnsupportedError(msg)
    declined = []
    trigger = head.windowing.triggerfn
    if mode is not RunMode.BATCH:
        why = "a stream: a grouping keeps its state between steps"
    elif not isinstance(trigger, DefaultTrigger):
        why = f"its trigger ({type(trigger).__name__}) may fire more than once per window"
    elif head.windowing.windowfn.is_merging():
        why = "its windows merge"
    elif not capabilities.runs(Strategy.BATCH_COMBINE):
        why = _not_run(capabilities)
    else:
        return (
            Strategy.BATCH_COMBINE,
            "batch, default trigger, windows that do not merge: one pane per key and window, "
            "combined before the shuffle and merged after it",
            [],
        )
    declined.append(Declined(Strategy.BATCH_COMBINE, why))
    if head.combine_fn is None:
        why = "a GroupByKey: its accumulator would be its list of elements"
    elif not combine_lifts(head):
        why = "an element's output time depends on the session it merges into"
    elif not capabilities.runs(Strategy.LIFTED_GROUPING):
        why = _not_run(capabilities)
    else:
        reason = "a combine: partials per key and window cross the shuffle, merged into the keyed state"
        if head.windowing.windowfn.is_merging():
            reason = "a combine over sessions: partials per proto-session cross the shuffle, merged as windows merge"
        return Strategy.LIFTED_GROUPING, reason, declined
    declined.append(Declined(Strategy.LIFTED_GROUPING, why))
    return Strategy.UNLIFTED_GROUPING, "keyed state, the elements shuffled as they are", declined


def _driver_candidate(stage: Stage, entering: tuple[int, ...], held: set[int], capabilities: Capabilities) -> bool:
    """Whether a step of the element-wise stage may run on the driver: the backend allows
    it, the stage is a chain of ops a task would run alone (no sink, ops that may run
    there) and every input may be held by the driver."""
    if not capabilities.driver_runs_tiny_stages or stage.sinks or not stage.body:
        return False
    if not all(kind_of(op).role is Role.ELEMENT_WISE and kind_of(op).driver_runnable for op in stage.body):
        return False
    return bool(entering) and all(pcoll in held for pcoll in entering)


def plan_physical(plan: StagePlan, mode: RunMode, capabilities: Capabilities) -> PhysicalPlan:
    """The physical plan of ``plan`` for a run in ``mode`` on a backend that can do
    ``capabilities`` (see the module docs)."""
    collected_pcolls = plan.side_input_pcolls() | plan.lowered.captured
    keyed: dict[int, tuple[Strategy, str, list[Declined]]] = {}
    for stage in plan.stages:
        if stage.grouping is not None:
            keyed[stage.id] = _keyed(stage, stage.grouping, mode, capabilities)
    # The stage that alone reads a PCollection, where that stage is a batch combine whose
    # grouping reads it: the producer's body may run in that grouping's map side.
    combined_by = {
        stage.grouping.inputs[0]: stage.id
        for stage in plan.stages
        if stage.grouping is not None and keyed[stage.id][0] is Strategy.BATCH_COMBINE
    }
    #: PCollections whose datasets the driver may hold after their stage ran
    held: set[int] = set()
    planned: list[PlannedStage] = []
    map_side_of: dict[int, int] = {}
    for stage in plan.stages:
        collected = frozenset(p for p in stage.outputs if p in collected_pcolls)
        leaf = capabilities.lazy and not stage.outputs and not stage.sinks
        if stage.id in keyed:
            strategy, reason, declined = keyed[stage.id]
            entry = _planned_keyed(stage, strategy, reason, declined, mode, capabilities, collected, leaf, plan.note(stage))
            if strategy is not Strategy.BATCH_COMBINE and not entry.put_off_summary:
                held.update(collected)  # fetched with the stage's own job
        else:
            if stage.is_source and stage.head is not None and kind_of(stage.head).read(stage.head) is SourceRead.HELD:
                held.update(stage.head.outputs)  # its read: elements the driver keeps
            entry = _planned_element_wise(stage, mode, capabilities, collected, leaf, held, combined_by, plan.note(stage))
            if entry.map_side_into is not None:
                map_side_of[entry.map_side_into] = stage.id
            if Strategy.DRIVER_RUN in entry.strategies:
                held.update(stage.outputs)
            if Strategy.SIDE_INPUT_WAIT in entry.strategies:
                held.update(collected)  # fetched with the stage's own job
        planned.append(entry)
    planned = [attrs.evolve(p, map_side_of=map_side_of[p.id]) if p.id in map_side_of else p for p in planned]
    return PhysicalPlan(tuple(planned), plan, mode, capabilities)


def _planned_keyed(
    stage: Stage,
    strategy: Strategy,
    reason: str,
    declined: list[Declined],
    mode: RunMode,
    capabilities: Capabilities,
    collected: frozenset[int],
    leaf: bool,
    note: str | None,
) -> PlannedStage:
    if strategy is Strategy.BATCH_COMBINE:
        bare = len(stage.outputs) == 1
        return PlannedStage(
            stage,
            strategy,
            reason,
            (),
            tuple(declined),
            note=note,
            bare=bare,
            keep_outputs=_kept(stage, bare, collected),
            collected=collected,
            leaf=leaf,
        )
    alternatives: tuple[Alternative, ...] = ()
    if capabilities.runs(Strategy.SKIP_IDLE):
        alternatives = (Alternative((Condition.NOTHING_NEW, Condition.NOTHING_DUE), Strategy.SKIP_IDLE),)
    # In a stream a Spark job costs far more than the few records a step moves: the
    # summary waits for the step's other keyed stages', unless the run collects an output.
    put_off = mode is RunMode.STREAMING and capabilities.puts_off_summaries and not collected
    return PlannedStage(
        stage,
        strategy,
        reason,
        alternatives,
        tuple(declined),
        note=note,
        collected=collected,
        put_off_summary=put_off,
        state_store=_state_store(capabilities),
    )


#: why each keyed-state store, as the plan shows it
_STORE_REASONS = {
    StateStore.HASH_BUCKETS: "a step reads only the buckets whose keys receive elements or have timers due",
}


def _state_store(capabilities: Capabilities) -> StateStore | None:
    """Where a keyed stage's state lives: hash buckets where the backend has them (the cost
    of a step follows the keys it touches), else the backend's own way."""
    if StateStore.HASH_BUCKETS in capabilities.state_stores:
        return StateStore.HASH_BUCKETS
    return None


def _kept(stage: Stage, bare: bool, collected: frozenset[int]) -> bool:
    """Whether the stage's outputs are read more than once in a step (so kept): a bare
    output with several readers (a collect counts); tagged outputs when there are several,
    or one is collected or has several readers."""
    if bare:
        return bool(stage.shared_outputs)
    return bool(stage.outputs) and (len(stage.outputs) > 1 or bool(collected) or bool(stage.shared_outputs))


def _planned_element_wise(
    stage: Stage,
    mode: RunMode,
    capabilities: Capabilities,
    collected: frozenset[int],
    leaf: bool,
    held: set[int],
    combined_by: Mapping[int, int],
    note: str | None,
) -> PlannedStage:
    read = None
    if stage.is_source and stage.head is not None:
        entering: tuple[int, ...] = tuple(stage.head.outputs)
        read = kind_of(stage.head).read(stage.head)
    else:
        # A Flatten of one PCollection with itself enters it once.
        entering = tuple(dict.fromkeys(stage.inputs))
    bare = len(entering) == 1 and len(stage.outputs) == 1
    common: dict[str, Any] = {
        "read": read,
        "note": note,
        "bare": bare,
        "keep_outputs": _kept(stage, bare, collected),
        "collected": collected,
        "leaf": leaf,
    }
    declined: list[Declined] = []
    # Its body's own strategy, when it runs at all.
    strategy, reason = Strategy.FUSED_MAP, "element-wise ops fused into one pass over its inputs"
    into = None
    if bare and stage.outputs[0] in combined_by:
        reader = combined_by[stage.outputs[0]]
        if stage.shared_outputs:
            declined.append(Declined(Strategy.MAP_SIDE_PASS, f"stage {reader} is not the only reader of its output"))
        elif not capabilities.runs(Strategy.MAP_SIDE_PASS):
            declined.append(Declined(Strategy.MAP_SIDE_PASS, _not_run(capabilities)))
        else:
            strategy, into = Strategy.MAP_SIDE_PASS, reader
            reason = f"only the batch combine of stage {reader} reads its output: its body runs in that stage's map side, in the same pass"
    alternatives: list[Alternative] = []
    driver = _driver_candidate(stage, entering, held, capabilities)
    waiting_op = stage.side_input_reader
    if mode is RunMode.STREAMING and waiting_op is not None:
        if not capabilities.runs(Strategy.SIDE_INPUT_WAIT):
            msg = (
                f"'{waiting_op.label}' (applied at {waiting_op.location}): the {capabilities.backend} backend "
                "cannot make a stream's elements wait for their side inputs"
            )
            raise UnsupportedError(msg)
        complete = (Condition.SIDE_INPUTS_COMPLETE,)
        if driver:
            alternatives.append(Alternative((*complete, Condition.HELD_AND_FEW), Strategy.DRIVER_RUN))
        alternatives.append(Alternative(complete, strategy))
        if capabilities.runs(Strategy.SKIP_IDLE):
            alternatives.append(Alternative((Condition.NOTHING_NEW, Condition.NOTHING_RELEASABLE), Strategy.SKIP_IDLE))
        reason = "reads side inputs in a stream: elements whose side inputs are not ready wait in its state"
        return PlannedStage(stage, Strategy.SIDE_INPUT_WAIT, reason, tuple(alternatives), (), **common)
    if waiting_op is not None:
        declined.append(Declined(Strategy.SIDE_INPUT_WAIT, "batch: its side inputs are complete before it runs"))
    if driver:
        alternatives.append(Alternative((Condition.HELD_AND_FEW,), Strategy.DRIVER_RUN))
    elif capabilities.driver_runs_tiny_stages and stage.body:
        declined.append(Declined(Strategy.DRIVER_RUN, _why_not_on_driver(stage, entering, held)))
    as_read = stage.is_source and not stage.body and stage.outputs == entering
    if as_read and read in (SourceRead.HELD, SourceRead.COUNTED) and capabilities.runs(Strategy.AS_READ):
        alternatives.append(Alternative((Condition.HELD_OR_COUNTED,), Strategy.AS_READ))
    if into is not None:
        return PlannedStage(stage, strategy, reason, tuple(alternatives), tuple(declined), map_side_into=into, **common)
    return PlannedStage(stage, strategy, reason, tuple(alternatives), tuple(declined), **common)


def _why_not_on_driver(stage: Stage, entering: tuple[int, ...], held: set[int]) -> str:
    if stage.sinks:
        return "it writes a sink"
    blocked = [op.label for op in stage.body if not (kind_of(op).role is Role.ELEMENT_WISE and kind_of(op).driver_runnable)]
    if blocked:
        return f"{blocked[0]!r} runs only in a task"
    return "the driver never holds its inputs"


# ------------------------------------------------------------------------ at run time


@attrs.frozen
class StepFacts:
    """What a backend knows of a stage's step before it runs it: the inputs of the
    conditions (``condition_holds``)."""

    params: StepParams
    #: every input known to be empty
    nothing_new: bool
    #: how many elements the driver holds of all the inputs; None unless it holds them all
    held: int | None = None
    #: ``held``, or the number the driver knows without holding them; None if unknown
    counted: int | None = None
    #: keyed state, or elements waiting for side inputs, kept from earlier steps
    has_state: bool = False
    #: the stage's summary of its last step that ran
    previous: StageSummary | None = None
    #: a stage waiting for side inputs: the watermark each side input must reach before
    #: anything waiting can be released (None: not known)
    release_at: Mapping[int, int] | None = None


def condition_holds(condition: Condition, planned: PlannedStage, facts: StepFacts) -> bool:
    """Whether ``condition`` holds for this step of the stage: the one place each is
    decided, for every backend."""
    params = facts.params
    if condition is Condition.NOTHING_NEW:
        return facts.nothing_new
    if condition is Condition.NOTHING_DUE:
        reads_side = any(op.side_inputs for op in planned.stage.body)
        return nothing_due(facts.previous, params, has_state=facts.has_state, side_inputs=reads_side)
    if condition is Condition.HELD_OR_COUNTED:
        return facts.counted is not None
    if condition is Condition.HELD_AND_FEW:
        return facts.held is not None and 0 < facts.held <= DRIVER_STAGE_MAX_ELEMENTS
    if condition is Condition.SIDE_INPUTS_COMPLETE:
        return not facts.has_state and all(watermark >= MAX for _, watermark in params.side_input_watermarks)
    if condition is Condition.NOTHING_RELEASABLE:
        release_at = facts.release_at
        stuck = release_at is not None and all(
            watermark < release_at.get(pcoll, MAX) for pcoll, watermark in params.side_input_watermarks
        )
        return not facts.has_state or stuck
    msg = f"no rule decides the condition {condition!r}"
    raise ValueError(msg)


def choose(planned: PlannedStage, facts: StepFacts, *, after: Strategy | None = None) -> Strategy:
    """The strategy that runs this step of the stage: the first alternative whose
    conditions all hold, else the planned one. ``after``: the strategy chosen gave up
    (a driver run that made too many elements): the choice among what follows it."""
    alternatives = planned.alternatives
    if after is not None:
        found = [alternative.strategy for alternative in alternatives].index(after)
        alternatives = alternatives[found + 1 :]
    for alternative in alternatives:
        if all(condition_holds(condition, planned, facts) for condition in alternative.when):
            return alternative.strategy
    return planned.strategy
