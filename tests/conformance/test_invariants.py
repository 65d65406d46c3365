"""Invariants of the step loop, on random inputs and random micro-batch cuts (hypothesis).

For any arrival order, cut into steps, and watermark progression:
- every stage's input and output watermarks never decrease, and output <= input;
- no EARLY or ON_TIME pane is stamped behind its stage's output watermark as it stood when
  the pane was emitted (so only LATE panes can be late downstream);
- with AfterWatermark-only triggers and no late data, the streaming result equals the
  batch result.

The engine alone runs many examples; Spark runs a few, and must agree with the engine.
"""

from __future__ import annotations

import collections
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.memory import run_in_memory
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import trigger, window
from sparkbeam.utils.windowed_value import PaneInfoTiming

WINDOW_FNS = {
    "fixed": lambda: window.FixedWindows(10),
    "sliding": lambda: window.SlidingWindows(20, 5),
    "sessions": lambda: window.Sessions(7),
}
COMBINERS = [
    window.TimestampCombiner.OUTPUT_AT_EOW,
    window.TimestampCombiner.OUTPUT_AT_EARLIEST,
    window.TimestampCombiner.OUTPUT_AT_LATEST,
]
TRIGGERS = {
    "default": lambda: trigger.DefaultTrigger(),
    "early_late": lambda: trigger.AfterWatermark(early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
    "count": lambda: trigger.Repeatedly(trigger.AfterCount(3)),
}

elements = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(min_value=0, max_value=60), st.integers(min_value=1, max_value=9)),
    min_size=1,
    max_size=25,
)


@st.composite
def scripts(draw, allow_late: bool):
    """Elements (key, second, value) cut into arrival batches, each followed by a watermark."""
    items = draw(st.permutations(draw(elements)))
    cuts = sorted(set(draw(st.lists(st.integers(min_value=1, max_value=max(1, len(items) - 1)), max_size=6))))
    batches = [items[a:b] for a, b in zip([0, *cuts], [*cuts, len(items)]) if items[a:b]]
    script, watermark = [], -1
    for index, batch in enumerate(batches):
        remaining = [second for batch_after in batches[index + 1 :] for _, second, _ in batch_after]
        # Without late data the watermark may not pass anything still to come.
        ceiling = 70 if allow_late or not remaining else min(remaining)
        target = draw(st.integers(min_value=watermark, max_value=max(watermark, ceiling)))
        script.append((batch, target if target > watermark else None))
        watermark = max(watermark, target)
    return script


def build(p, script, window_name, combiner, trigger_name, streaming):
    windowing = dict(
        timestamp_combiner=combiner,
        trigger=TRIGGERS[trigger_name](),
        accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        allowed_lateness=15,
    )
    if streaming:
        stream = TestStream()
        for batch, watermark in script:
            stream.add_elements([window.TimestampedValue((key, value), second) for key, second, value in batch])
            if watermark is not None:
                stream.advance_watermark_to(watermark)
        source = p | "Input" >> stream
    else:
        flat = [item for batch, _ in script for item in batch]
        source = (
            p
            | "Input" >> beam.Create(flat)
            | "Stamp" >> beam.Map(lambda e: window.TimestampedValue((e[0], e[2]), e[1]))
        )
    first = beam.capture(
        source
        | "Window1" >> beam.WindowInto(WINDOW_FNS[window_name](), **windowing)
        | "Sum1" >> beam.CombinePerKey(sum)
    )
    second = beam.capture(
        first
        | "Window2" >> beam.WindowInto(window.FixedWindows(30), timestamp_combiner=combiner)
        | "Rekey" >> beam.Map(lambda kv: ("all", kv[1]))
        | "Sum2" >> beam.CombinePerKey(sum)
    )
    return {"Sum1": first, "Sum2": second}


def run(script, window_name, combiner, trigger_name, *, streaming=True, on_spark=False):
    p = beam.Pipeline(options=PipelineOptions(streaming=streaming))
    outputs = build(p, script, window_name, combiner, trigger_name, streaming)
    result = p.run() if on_spark else run_in_memory(p, streaming=streaming)
    return result, outputs


def check_watermark_invariants(result, outputs):
    timeline = result.watermarks()
    for stage in timeline.stage_names:
        records = timeline.for_stage(stage)
        for before, after in itertools.pairwise(records):
            assert after.input_watermark >= before.input_watermark, (stage, after.step)
            assert after.output_watermark >= before.output_watermark, (stage, after.step)
        for record in records:
            assert record.output_watermark <= record.input_watermark, (stage, record.step)
    for stage_name, pcoll in outputs.items():
        stage = next(name for name in timeline.stage_names if name.startswith(stage_name))
        output_before = {r.step + 1: r.output_watermark for r in timeline.for_stage(stage)}
        for e in result.emissions(pcoll):
            if e.pane.timing in (PaneInfoTiming.EARLY, PaneInfoTiming.ON_TIME) and e.step in output_before:
                assert e.timestamp.micros >= output_before[e.step], (stage_name, e)


def multiset(result, pcoll):
    return collections.Counter((e.value, e.timestamp.micros, e.windows, e.pane) for e in result.emissions(pcoll))


common = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(
    script=scripts(allow_late=True),
    window_name=st.sampled_from(sorted(WINDOW_FNS)),
    combiner=st.sampled_from(COMBINERS),
    trigger_name=st.sampled_from(sorted(TRIGGERS)),
)
def test_watermarks_are_monotonic_and_on_time_panes_are_not_late(script, window_name, combiner, trigger_name):
    check_watermark_invariants(*run(script, window_name, combiner, trigger_name))


@common
@given(
    script=scripts(allow_late=False),
    window_name=st.sampled_from(sorted(WINDOW_FNS)),
    combiner=st.sampled_from(COMBINERS),
)
def test_watermark_triggers_without_late_data_give_the_batch_result(script, window_name, combiner):
    streaming, outputs = run(script, window_name, combiner, "default")
    batch, batch_outputs = run(script, window_name, combiner, "default", streaming=False)
    for name in outputs:
        assert multiset(streaming, outputs[name]) == multiset(batch, batch_outputs[name]), name


@pytest.mark.spark
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    script=scripts(allow_late=True),
    window_name=st.sampled_from(sorted(WINDOW_FNS)),
    combiner=st.sampled_from(COMBINERS),
    trigger_name=st.sampled_from(sorted(TRIGGERS)),
)
def test_spark_agrees_with_the_engine_on_random_streams(spark, script, window_name, combiner, trigger_name):
    spark_result, spark_outputs = run(script, window_name, combiner, trigger_name, on_spark=True)
    check_watermark_invariants(spark_result, spark_outputs)
    engine_result, engine_outputs = run(script, window_name, combiner, trigger_name)
    for name in spark_outputs:
        assert multiset(spark_result, spark_outputs[name]) == multiset(engine_result, engine_outputs[name]), name
    spark_marks = [(r.step, r.stage, r.input_watermark, r.output_watermark) for r in spark_result.watermarks()]
    engine_marks = [(r.step, r.stage, r.input_watermark, r.output_watermark) for r in engine_result.watermarks()]
    assert spark_marks == engine_marks
