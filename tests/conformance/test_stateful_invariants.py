"""Invariants of stateful stages on random out-of-order streams (hypothesis), as
``test_invariants.py`` checks them for groupings:

- every stage's watermarks never decrease, and its output watermark stays <= its input;
- no timer fires before the stage's input watermark has passed it (what a callback emits
  at step s, stamped with the timer's time T, has input watermark(s) >= T), and nothing a
  timer emits is behind the stage's output watermark as it stood (the timers' holds);
- a stateful stage emits no more than it is given (here: at most one output per input);
- Spark equals the engine, watermarks included.
"""


from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, given, settings

import sparkbeam as beam
from sparkbeam.coders import PickleCoder
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.transforms.userstate import BagStateSpec, TimeDomain, TimerSpec, on_timer
from sparkbeam.transforms.util import SortByEventTime
from tests.conformance.test_invariants import check_watermark_invariants, scripts


class FirstOfWindowAtEnd(beam.DoFn):
    """Buffers a key's values per window; at the window's end emits them, one output per
    input (a timer-driven stage whose outputs can be counted against its inputs)."""

    BUFFER = BagStateSpec("buffer", PickleCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, element, buffer=beam.DoFn.StateParam(BUFFER), end=beam.DoFn.TimerParam(END), w=beam.DoFn.WindowParam):
        buffer.add(element[1])
        end.set(w.max_timestamp())

    @on_timer(END)
    def flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        for value in buffer.read():
            yield key, value
        buffer.clear()


TIMER_DRIVEN = ("Sort", "AtWindowEnd")


def run(script, *, on_spark=False):
    p = beam.Pipeline(options=PipelineOptions(streaming=True, quiet=True))
    stream = TestStream()
    for batch, watermark in script:
        stream.add_elements([window.TimestampedValue((key, value), second) for key, second, value in batch])
        if watermark is not None:
            stream.advance_watermark_to(watermark)
    source = p | "Input" >> stream
    outputs = {
        "Sort": beam.capture(source | "Sort" >> SortByEventTime()),
        "AtWindowEnd": beam.capture(
            source
            | "Fixed" >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=5)
            | "AtWindowEnd" >> beam.ParDo(FirstOfWindowAtEnd())
        ),
    }
    result = p.run() if on_spark else run_in_memory(p, streaming=True)
    return result, outputs


def arrived_late(script):
    """(key, value, second) of the elements already behind the source's watermark on arrival:
    SortByEventTime emits such an element at once if it is still in order for its key,
    stamped with its own (late) time."""
    late, watermark = collections.Counter(), None
    for batch, new_watermark in script:
        late.update((key, value, second) for key, second, value in batch if watermark is not None and second * 1_000_000 < watermark)
        if new_watermark is not None:
            watermark = new_watermark * 1_000_000
    return late


def check_stateful_invariants(script, result, outputs):
    check_watermark_invariants(result, {})
    timeline = result.watermarks()
    inputs = sum(len(batch) for batch, _ in script)
    late_on_arrival = arrived_late(script)
    any_late_input = bool(late_on_arrival)
    for name in TIMER_DRIVEN:
        stage = next(s for s in timeline.stage_names if s.startswith(name))
        records = {r.step: r for r in timeline.for_stage(stage)}
        emitted = list(result.emissions(outputs[name]))
        assert len(emitted) <= inputs, name
        for e in emitted:
            assert records[e.step].input_watermark >= e.timestamp.micros, (name, e, records[e.step])
            before = records.get(e.step - 1)
            if before is not None and e.timestamp.micros < before.output_watermark:
                # Only late input may make late output (a timer set behind the watermark
                # fires at once): timers hold the rest. Sort's output is its input, one by one.
                item = (e.value[0], e.value[1], e.timestamp.micros // 1_000_000)
                if name == "Sort":
                    assert late_on_arrival[item] > 0, (name, e, before)
                    late_on_arrival[item] -= 1
                else:
                    assert any_late_input, (name, e, before)


def multiset(result, pcoll):
    return collections.Counter((e.value, e.timestamp.micros, e.windows, e.step) for e in result.emissions(pcoll))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts(allow_late=True))
def test_stateful_stages_keep_the_invariants_on_the_engine(script):
    result, outputs = run(script)
    check_stateful_invariants(script, result, outputs)


@pytest.mark.spark
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(script=scripts(allow_late=True))
def test_spark_agrees_with_the_engine_on_random_streams_through_stateful_stages(spark, script):
    spark_result, spark_outputs = run(script, on_spark=True)
    check_stateful_invariants(script, spark_result, spark_outputs)
    engine_result, engine_outputs = run(script)
    for name in spark_outputs:
        assert multiset(spark_result, spark_outputs[name]) == multiset(engine_result, engine_outputs[name]), name
    spark_marks = [(r.step, r.stage, r.input_watermark, r.output_watermark) for r in spark_result.watermarks()]
    engine_marks = [(r.step, r.stage, r.input_watermark, r.output_watermark) for r in engine_result.watermarks()]
    assert spark_marks == engine_marks
