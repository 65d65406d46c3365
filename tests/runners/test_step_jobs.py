"""A stream's step runs its keyed stages' jobs together: the Spark backend puts off each
keyed stage's summary job and runs them as one, where their watermarks allow; the result
is the engine's, step for step."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.loop.clock import ManualClock
from sparkbeam.runners.core.loop.memory import MemoryBackend
from sparkbeam.runners.core.loop.steps import StepLoop
from sparkbeam.runners.core.lowering.ops import lower
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.transforms.userstate import CombiningValueStateSpec
from tests.oracle import canonical

pytestmark = pytest.mark.spark


class RunningCount(beam.DoFn):
    COUNT = CombiningValueStateSpec("count", sum)

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        count.add(1)
        yield element[1], count.read()


def _plan():
    tv = window.TimestampedValue
    events = (
        TestStream()
        .add_elements([tv(("a", 1), 1), tv(("b", 2), 2)])
        .add_elements([tv(("a", 3), 3), tv(("b", 4), 4)])
        .advance_watermark_to(12)
        .add_elements([tv(("a", 5), 15)])
        .advance_watermark_to_infinity()
    )
    p = beam.Pipeline()
    keyed = p | events | beam.WindowInto(window.FixedWindows(10))
    sums = keyed | "Sum" >> beam.CombinePerKey(sum)
    groups = keyed | "Group" >> beam.GroupByKey() | beam.MapTuple(lambda key, values: (key, sorted(values)))
    merged = (sums, groups) | beam.Flatten() | beam.Map(lambda kv: ("all", kv))
    beam.capture(merged | "Count" >> beam.ParDo(RunningCount()))
    return plan_stages(lower(p))


def _run(plan, backend):
    loop = StepLoop(plan, backend, ManualClock(), batch=False)
    loop.run()
    (counted,) = plan.lowered.captured
    rows = loop.history.emitted_rows(counted)
    # (Which element of a step the count reaches first is up to the order elements come in.)
    emitted = (
        sorted(((canonical(e.value[0]), e.timestamp.micros, e.step) for e in rows), key=repr),
        sorted((e.step, e.value[1]) for e in rows),
    )
    watermarks = [(r.step, r.stage, r.input_watermark, r.output_watermark) for r in loop.records]
    return emitted, watermarks, loop.step


def test_keyed_stages_share_a_job_per_step_and_give_the_engines_result(spark):
    from sparkbeam.runners.spark.backend import SparkBackend

    plan = _plan()
    expected = _run(plan, MemoryBackend())
    backend = SparkBackend(spark, num_partitions=2)
    try:
        actual = _run(plan, backend)
        jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(backend.job_group))
    finally:
        backend.close()
    assert actual == expected
    assert expected[0][0], "nothing emitted: the test would test nothing"
    steps = actual[2]
    keyed_stages = sum(stage.grouping is not None for stage in plan.stages)
    assert keyed_stages == 3
    # One job per keyed stage and step before; now the groupings' summaries share one job,
    # and the stateful stage, whose output is captured, runs its own.
    assert jobs <= 2 * steps
