"""The physical plan is decided once, from the stage plan, the mode and what the backend
declares; what only a step's data decides is a named condition, checked by one function."""

from __future__ import annotations

import attrs
import pytest

import sparkbeam as beam
from sparkbeam.runners.core.elements.execution import BackendOps
from sparkbeam.runners.core.loop.memory import MEMORY, run_in_memory
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import lower
from sparkbeam.runners.core.lowering.settings import RunMode
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.runners.core.lowering.strategies import Capabilities, Condition, Strategy
from sparkbeam.runners.core.plan.physical import (
    DRIVER_STAGE_MAX_ELEMENTS,
    Alternative,
    PlannedStage,
    StepFacts,
    choose,
    condition_holds,
    plan_physical,
)
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

MIN, MAX = MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros
EVERYTHING = Capabilities("Test", frozenset(Strategy), driver_runs_tiny_stages=True, puts_off_summaries=True, lazy=True)


def _sum_pipeline(*, streaming: bool) -> beam.Pipeline:
    p = beam.Pipeline()
    if streaming:
        source = p | TestStream().add_elements([window.TimestampedValue(("a", 1), 1)]).advance_watermark_to_infinity()
    else:
        source = p | beam.Create([("a", 1)])
    beam.capture(source | beam.WindowInto(window.FixedWindows(10)) | "Sum" >> beam.CombinePerKey(sum))
    return p


def _params(old=MIN, new=MAX, now=0, side=()):
    return StepParams(0, old, new, MIN, now, False, side)


def test_the_same_stage_plan_runs_by_what_the_mode_and_the_backend_allow():
    plan = plan_stages(lower(_sum_pipeline(streaming=False)))
    batch = plan_physical(plan, RunMode.BATCH, EVERYTHING)
    assert [s.strategy for s in batch.stages] == [Strategy.MAP_SIDE_PASS, Strategy.BATCH_COMBINE]
    stream = plan_physical(plan, RunMode.STREAMING, EVERYTHING)
    assert [s.strategy for s in stream.stages] == [Strategy.FUSED_MAP, Strategy.LIFTED_GROUPING]
    (declined,) = stream.stages[1].declined
    assert (declined.strategy, declined.why) == (Strategy.BATCH_COMBINE, "a stream: a grouping keeps its state between steps")
    # The in-memory backend registers neither the batch combine nor lifting: the same
    # grouping is unlifted there, and the plan says why the others were declined.
    memory = plan_physical(plan, RunMode.BATCH, MEMORY.capabilities())
    grouping = memory.stages[1]
    assert grouping.strategy is Strategy.UNLIFTED_GROUPING
    assert [(d.strategy, d.why) for d in grouping.declined] == [
        (Strategy.BATCH_COMBINE, "the in-memory backend does not run it"),
        (Strategy.LIFTED_GROUPING, "the in-memory backend does not run it"),
    ]
    assert grouping.alternatives == ()  # it skips no idle step


def test_a_backend_that_cannot_run_a_keyed_op_is_refused_naming_it():
    plan = plan_stages(lower(_sum_pipeline(streaming=False)))
    bare = BackendOps("Bare")
    bare.strategies.add(Strategy.FUSED_MAP, object())
    with pytest.raises(UnsupportedError, match=r"'Sum' \(applied at .*\): the Bare backend cannot run GroupOp \(it does not run the strategy 'unlifted grouping'\)"):
        plan_physical(plan, RunMode.BATCH, bare.capabilities())


def test_a_stream_skips_a_keyed_step_only_when_nothing_is_new_and_nothing_is_due():
    (_, grouping) = plan_physical(plan_stages(lower(_sum_pipeline(streaming=True))), RunMode.STREAMING, EVERYTHING).stages
    assert grouping.alternatives == (Alternative((Condition.NOTHING_NEW, Condition.NOTHING_DUE), Strategy.SKIP_IDLE),)
    waiting = StageSummary(next_event_timer=60, state_keys=1)
    idle = StepFacts(_params(0, 59), nothing_new=True, has_state=True, previous=waiting)
    assert choose(grouping, idle) is Strategy.SKIP_IDLE
    assert choose(grouping, attrs.evolve(idle, params=_params(0, 60))) is Strategy.LIFTED_GROUPING
    assert choose(grouping, attrs.evolve(idle, nothing_new=False)) is Strategy.LIFTED_GROUPING


def test_the_driver_runs_a_stage_only_on_few_elements_it_holds_and_a_run_that_gives_up_falls_back():
    p = beam.Pipeline()
    beam.capture(p | beam.Impulse() | "Prepare" >> beam.Map(lambda _: "ready"))
    (stage,) = plan_physical(plan_stages(lower(p)), RunMode.BATCH, EVERYTHING).stages
    assert stage.alternatives == (Alternative((Condition.HELD_AND_FEW,), Strategy.DRIVER_RUN),)
    facts = StepFacts(_params(), nothing_new=False, held=1)
    assert choose(stage, facts) is Strategy.DRIVER_RUN
    assert choose(stage, attrs.evolve(facts, held=DRIVER_STAGE_MAX_ELEMENTS + 1)) is Strategy.FUSED_MAP
    assert choose(stage, attrs.evolve(facts, held=None)) is Strategy.FUSED_MAP
    assert choose(stage, attrs.evolve(facts, held=0)) is Strategy.FUSED_MAP  # no element, no bundle
    assert choose(stage, facts, after=Strategy.DRIVER_RUN) is Strategy.FUSED_MAP
    # Without the backend's leave, no stage is a candidate.
    (plain,) = plan_physical(plan_stages(lower(p)), RunMode.BATCH, attrs.evolve(EVERYTHING, driver_runs_tiny_stages=False)).stages
    assert plain.alternatives == ()


def test_side_input_conditions():
    p = beam.Pipeline()
    main = p | "Main" >> beam.Create([1])
    side = p | "Side" >> beam.Create([2])
    beam.capture(main | "Add" >> beam.Map(lambda x, s: x + s, beam.pvalue.AsSingleton(side)))
    stages = plan_physical(plan_stages(lower(p)), RunMode.STREAMING, EVERYTHING).stages
    waiting = next(s for s in stages if s.strategy is Strategy.SIDE_INPUT_WAIT)
    (side_pcoll,) = {slot.pcoll for op in waiting.stage.body for slot in op.side_inputs}
    incomplete = StepFacts(_params(side=((side_pcoll, 5),)), nothing_new=False)
    assert choose(waiting, incomplete) is Strategy.SIDE_INPUT_WAIT
    complete = attrs.evolve(incomplete, params=_params(side=((side_pcoll, MAX),)))
    assert choose(waiting, complete) is Strategy.FUSED_MAP
    parked = attrs.evolve(complete, has_state=True)
    assert choose(waiting, parked) is Strategy.SIDE_INPUT_WAIT  # what waits must be released
    stuck = attrs.evolve(incomplete, nothing_new=True, has_state=True, release_at={side_pcoll: 10})
    assert choose(waiting, stuck) is Strategy.SKIP_IDLE
    assert choose(waiting, attrs.evolve(stuck, release_at={side_pcoll: 5})) is Strategy.SIDE_INPUT_WAIT
    # In batch every side input is complete before the stage runs: nothing waits.
    batch = plan_physical(plan_stages(lower(p)), RunMode.BATCH, EVERYTHING).stages
    assert Strategy.SIDE_INPUT_WAIT not in {s.strategy for s in batch}


_NONE = StepFacts(_params(), nothing_new=False)
#: per condition: step facts where it holds, and facts where it does not
_CASES = {
    Condition.NOTHING_NEW: (attrs.evolve(_NONE, nothing_new=True), _NONE),
    Condition.NOTHING_DUE: (StepFacts(_params(5, 5), nothing_new=True), StepFacts(_params(0, 5), nothing_new=True, has_state=True)),
    Condition.HELD_OR_COUNTED: (attrs.evolve(_NONE, counted=3), _NONE),
    Condition.HELD_AND_FEW: (attrs.evolve(_NONE, held=3), attrs.evolve(_NONE, held=DRIVER_STAGE_MAX_ELEMENTS + 1)),
    Condition.SIDE_INPUTS_COMPLETE: (
        StepFacts(_params(side=((7, MAX),)), nothing_new=False),
        StepFacts(_params(side=((7, 5),)), nothing_new=False),
    ),
    Condition.NOTHING_RELEASABLE: (
        StepFacts(_params(side=((7, 5),)), nothing_new=True, has_state=True, release_at={7: 10}),
        StepFacts(_params(side=((7, 10),)), nothing_new=True, has_state=True, release_at={7: 10}),
    ),
}


@pytest.mark.parametrize("condition", list(Condition))
def test_every_condition_has_a_rule(condition):
    stage = plan_stages(lower(_sum_pipeline(streaming=False))).stages[0]
    planned = PlannedStage(stage, Strategy.FUSED_MAP, "test")
    holds, fails = _CASES[condition]
    assert condition_holds(condition, planned, holds)
    assert not condition_holds(condition, planned, fails)


def test_the_in_memory_result_shows_the_plan_it_ran():
    result = run_in_memory(_sum_pipeline(streaming=False))
    text = result.physical_plan().describe()
    assert text.splitlines()[0] == "physical plan (batch, in-memory backend)"
    assert "stage 1 'Sum': unlifted grouping" in text
