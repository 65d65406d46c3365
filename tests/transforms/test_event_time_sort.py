"""SortByEventTime: each key's elements in event-time order once the watermark passes them,
late ones dropped and counted or sent to a tagged output; on random out-of-order streams
(hypothesis) against a plain-Python model, on the engine and on Spark."""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, given, settings

import sparkbeam as beam
from sparkbeam.metrics import MetricsFilter
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.transforms.util import SortByEventTime
from tests.conformance.test_invariants import check_watermark_invariants, scripts


def model(script):
    """What SortByEventTime must emit: per key, in order, (value, second) sorted and late."""
    buffered: dict[str, list] = collections.defaultdict(list)
    frontier: dict[str, int] = {}
    emitted: dict[str, list] = collections.defaultdict(list)
    late: list = []
    watermark = None

    def release(up_to):
        for key, pending in buffered.items():
            pending.sort(key=lambda item: item[1])  # stable: arrival order among equal times
            ready = [item for item in pending if item[1] <= up_to]
            if ready:
                emitted[key].extend(ready)
                frontier[key] = ready[-1][1]
                buffered[key] = [item for item in pending if item[1] > up_to]

    for batch, new_watermark in script:
        for key, second, value in batch:
            if key in frontier and second < frontier[key]:
                late.append((key, value, second))
            else:
                buffered[key].append((value, second))
        if watermark is not None:
            release(watermark)
        if new_watermark is not None:
            watermark = new_watermark
            release(watermark)
    release(float("inf"))
    return {k: v for k, v in emitted.items() if v}, late


def run(script, *, on_spark=False, late_tag="late"):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    stream = TestStream()
    for batch, watermark in script:
        stream.add_elements([window.TimestampedValue((key, value), second) for key, second, value in batch])
        if watermark is not None:
            stream.advance_watermark_to(watermark)
    result = p | "Input" >> stream | "Sort" >> SortByEventTime(late_tag=late_tag)
    if late_tag is None:
        outputs = {"sorted": beam.capture(result)}
    else:
        outputs = {"sorted": beam.capture(result.sorted), "late": beam.capture(result[late_tag])}
    run_result = p.run() if on_spark else run_in_memory(p, streaming=True)
    return run_result, outputs


def per_key(run_result, pcoll):
    """Each key's (value, second) in emission order (step, then order within the step)."""
    out: dict[str, list] = collections.defaultdict(list)
    for e in run_result.emissions(pcoll):
        key, value = e.value
        out[key].append((value, e.timestamp.micros // 1_000_000))
    return dict(out)


def check(script, run_result, outputs):
    expected, expected_late = model(script)
    got = per_key(run_result, outputs["sorted"])
    for key, items in got.items():
        seconds = [second for _, second in items]
        assert seconds == sorted(seconds), (key, items)
    # The same elements per key; order among equal times within one step is the
    # partition's arrival order, so compare each key's emissions as multisets by time.
    assert {k: collections.Counter(v) for k, v in got.items()} == {k: collections.Counter(v) for k, v in expected.items()}
    late = sorted((e.value[0], e.value[1], e.timestamp.micros // 1_000_000) for e in run_result.emissions(outputs["late"]))
    assert late == sorted(expected_late)
    return got


few = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@few
@given(script=scripts(allow_late=True))
def test_each_key_comes_out_sorted_and_complete_on_the_engine(script):
    run_result, outputs = run(script)
    check(script, run_result, outputs)
    check_watermark_invariants(run_result, {})


@pytest.mark.spark
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(script=scripts(allow_late=True))
def test_each_key_comes_out_sorted_and_complete_on_spark(spark, script):
    spark_result, spark_outputs = run(script, on_spark=True)
    spark_sorted = check(script, spark_result, spark_outputs)
    engine_result, engine_outputs = run(script)
    assert {k: collections.Counter(v) for k, v in per_key(engine_result, engine_outputs["sorted"]).items()} == {
        k: collections.Counter(v) for k, v in spark_sorted.items()
    }


def test_elements_leave_only_once_the_watermark_passes_them():
    script = [
        ([("a", 5, 1), ("a", 2, 2), ("b", 9, 3)], 4),   # a@2 leaves; a@5 and b@9 wait
        ([("a", 3, 4), ("a", 1, 5)], 6),                 # a@1 is late (a@2 left); a@3, a@5 leave
        ([("b", 7, 6)], None),                          # b@7 waits (watermark 6)
    ]
    run_result, outputs = run(script)
    emitted = [(e.value, e.timestamp.micros // 1_000_000) for e in run_result.emissions(outputs["sorted"])]
    assert emitted == [(("a", 2), 2), (("a", 4), 3), (("a", 1), 5), (("b", 6), 7), (("b", 3), 9)]
    assert [(e.value, e.timestamp.micros // 1_000_000) for e in run_result.emissions(outputs["late"])] == [(("a", 5), 1)]
    # Each left in a step whose input watermark had reached its time; b@7 only at the end.
    timeline = run_result.watermarks()
    stage = next(name for name in timeline.stage_names if name.startswith("Sort"))
    watermark_at = {r.step: r.input_watermark for r in timeline.for_stage(stage)}
    for e in run_result.emissions(outputs["sorted"]):
        assert watermark_at[e.step] >= e.timestamp.micros, e
    b7 = next(e for e in run_result.emissions(outputs["sorted"]) if e.value == ("b", 6))
    assert watermark_at[b7.step] > 6_000_000


def test_late_elements_are_dropped_and_counted_without_a_tag():
    script = [([("a", 5, 1)], 6), ([("a", 2, 2), ("a", 8, 3)], None)]
    run_result, outputs = run(script, late_tag=None)
    assert [e.value for e in run_result.emissions(outputs["sorted"])] == [("a", 1), ("a", 3)]
    counters = run_result.metrics().query(MetricsFilter().with_name("late_elements"))["counters"]
    assert sum(c.committed for c in counters) == 1


def test_in_batch_everything_comes_out_sorted():
    p = beam.Pipeline()
    rows = [("k", 5), ("k", 1), ("j", 3), ("k", 3)]
    stamped = p | beam.Create(rows) | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
    out = beam.capture(stamped | SortByEventTime())
    result = run_in_memory(p)
    assert [e.value for e in result.emissions(out) if e.value[0] == "k"] == [("k", 1), ("k", 3), ("k", 5)]


def test_a_bad_late_tag_names_the_transform():
    with pytest.raises(ValueError, match="SortByEventTime: late_tag"):
        SortByEventTime(late_tag="")
