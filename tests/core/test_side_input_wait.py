"""Streaming side inputs without Spark: which main elements wait, the hold they put on the
stage's watermark, when they go, and how long the step loop keeps side-input windows."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.grouping.records import Parked, ReleaseAt
from sparkbeam.runners.core.loop.clock import ManualClock
from sparkbeam.runners.core.loop.memory import MemoryBackend, run_in_memory
from sparkbeam.runners.core.loop.side_input_wait import (
    expire_side_contents,
    refuse_side_inputs_never_ready,
    run_waiting,
    side_input_op,
)
from sparkbeam.runners.core.loop.steps import StepLoop
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import lower
from sparkbeam.runners.core.lowering.step_values import StepParams
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import GlobalWindow, IntervalWindow, TimestampedValue

S = 1_000_000
MIN = MIN_TIMESTAMP.micros
MAX = MAX_TIMESTAMP.micros


def reading_stage(main_windows=None, side_windows=None, side_lateness=0):
    """A planned pipeline whose stage 'Read' pairs each main element with AsList(side)."""
    p = beam.Pipeline()
    stream = p | "Stream" >> TestStream().add_elements([TimestampedValue("x", 1)], tag="main").add_elements(
        [TimestampedValue("s", 1)], tag="side"
    )
    main = stream["main"] | "MainWindows" >> beam.WindowInto(main_windows or window.FixedWindows(10))
    side = stream["side"] | "SideWindows" >> beam.WindowInto(
        side_windows or window.FixedWindows(10), allowed_lateness=side_lateness
    )
    beam.capture(main | "Read" >> beam.Map(lambda x, s: (x, sorted(s)), beam.pvalue.AsList(side)))
    plan = plan_stages(lower(p))
    (stage,) = [s for s in plan.stages if s.name == "Read"]
    (slot,) = side_input_op(stage).side_inputs
    return stage, slot.pcoll


def params(side_pcoll, side_watermark, input_watermark=MIN):
    return StepParams(
        step=0,
        old_input_watermark=input_watermark,
        new_input_watermark=input_watermark,
        output_watermark=input_watermark,
        now=0,
        batch=False,
        side_input_watermarks=((side_pcoll, side_watermark),),
    )


def fixed(start, end):
    return IntervalWindow(start, end)


def element(value, seconds, *windows):
    return WindowedValue(value, seconds * S, windows)


def step(stage, side_pcoll, side_watermark, arriving=(), parked=(), input_watermark=MIN):
    """One step of the stage in one partition: (outputs, parked, release, summary)."""
    from sparkbeam.runners.core.elements.dofn_invoker import SideInputs

    contents = {side_pcoll: [element("s", 2, fixed(0, 10)), element("t", 12, fixed(10, 20))]}
    outputs, waiting, release, summary = [], [], None, None
    for _, record in run_waiting(
        stage, SideInputs(contents), params(side_pcoll, side_watermark, input_watermark), arriving, parked
    ):
        if type(record) is WindowedValue:
            outputs.append((record.value, record.windows))
        elif type(record) is Parked:
            waiting.append(record.element)
        elif type(record) is ReleaseAt:
            release = dict(record.watermarks)
        else:
            summary = record.summary
    return outputs, waiting, release, summary


def test_an_element_waits_while_the_side_watermark_is_before_its_side_windows_end():
    stage, side = reading_stage()
    x = element("x", 1, fixed(0, 10))
    outputs, waiting, release, summary = step(stage, side, 10 * S - 1, arriving=[x])
    assert outputs == []
    assert waiting == [x]
    assert release == {side: 10 * S}
    assert (summary.elements_in, summary.elements_out, summary.side_input_waiting) == (1, 0, 1)
    assert summary.earliest_hold == 1 * S
    assert summary.hold_key == "side-input wait AsList(SideWindows)"
    assert summary.hold_window == "[0.0, 10.0)"


def test_a_parked_element_goes_once_the_side_watermark_reaches_its_side_windows_end():
    stage, side = reading_stage()
    x = element("x", 1, fixed(0, 10))
    outputs, waiting, release, summary = step(stage, side, 10 * S, parked=[x])
    assert outputs == [(("x", ["s"]), (fixed(0, 10),))]
    assert waiting == []
    assert release == {}
    # Released elements were counted in when they arrived.
    assert (summary.elements_in, summary.elements_out, summary.side_input_waiting) == (0, 1, 0)
    assert summary.earliest_hold is None


def test_an_element_in_several_windows_waits_only_in_those_not_ready():
    stage, side = reading_stage(main_windows=window.SlidingWindows(10, 5))
    both = element("x", 7, fixed(0, 10), fixed(5, 15))
    outputs, waiting, _, summary = step(stage, side, 10 * S, arriving=[both])
    # [0, 10) reads side window [0, 10), ready; [5, 15) reads [10, 20), not yet.
    assert outputs == [(("x", ["s"]), (fixed(0, 10),))]
    assert waiting == [element("x", 7, fixed(5, 15))]
    assert summary.hold_window == "[10.0, 20.0)"


def test_an_element_whose_side_window_expired_is_dropped_and_counted_late():
    stage, side = reading_stage(side_lateness=5)
    late = element("x", 1, fixed(0, 10))
    # The side window [0, 10) is kept until 10s - 1us + 5s, behind the stage's input watermark.
    outputs, waiting, _, summary = step(stage, side, MAX, arriving=[late], input_watermark=15 * S - 1)
    assert outputs == [(("x", ["s"]), (fixed(0, 10),))]
    outputs, waiting, _, summary = step(stage, side, MAX, arriving=[late], input_watermark=15 * S)
    assert (outputs, waiting) == ([], [])
    assert (summary.elements_in, summary.late_dropped) == (1, 1)


def test_expired_side_windows_are_dropped_and_live_ones_kept():
    early = element("a", 1, fixed(0, 10))
    sliding = element("b", 7, fixed(0, 10), fixed(5, 15))
    everywhere = WindowedValue("g", 0, (GlobalWindow(),))
    contents = [early, sliding, everywhere]
    assert expire_side_contents(contents, 10 * S - 1, 0) == contents
    assert expire_side_contents(contents, 10 * S, 0) == [element("b", 7, fixed(5, 15)), everywhere]
    assert expire_side_contents(contents, 12 * S, 3 * S) == contents
    assert expire_side_contents(contents, MAX, 0) == []


def stream_with_a_waiting_element(**options):
    """Main 'x' at 1s; the side input's watermark reaches 5s, then 10s (its window's end).
    ``options``: the pipeline's (a kind of Spark session's)."""
    from sparkbeam.options.pipeline_options import PipelineOptions

    p = beam.Pipeline(options=PipelineOptions(**options)) if options else beam.Pipeline()
    stream = (
        TestStream()
        .add_elements([TimestampedValue("x", 1)], tag="main")
        .advance_watermark_to(30, tag="main")
        .add_elements([TimestampedValue("s", 2)], tag="side")
        .advance_watermark_to(5, tag="side")
        .advance_watermark_to(10, tag="side")
        .advance_watermark_to(20, tag="side")
    )
    s = p | "Stream" >> stream
    main = s["main"] | "MainWindows" >> beam.WindowInto(window.FixedWindows(10))
    side = s["side"] | "SideWindows" >> beam.WindowInto(window.FixedWindows(10))
    read = beam.capture(main | "Read" >> beam.Map(lambda x, s: (x, s), beam.pvalue.AsList(side)))
    return p, read


def test_a_waiting_element_holds_the_stages_output_watermark_and_shows_in_the_timeline():
    p, read = stream_with_a_waiting_element()
    result = run_in_memory(p, streaming=True)
    (emitted,) = result.emissions(read)
    assert emitted.value == ("x", ["s"])
    rows = [
        (r.step, r.input_watermark, r.output_watermark, r.earliest_hold, r.hold_key, r.hold_window, r.side_input_waiting)
        for r in result.watermarks().for_stage("Read")
    ]
    waiting = [row for row in rows if row[0] < emitted.step]
    assert waiting, "the element went at once: nothing was tested"
    for _, _, output_watermark, hold, key, side_window, count in waiting:
        assert output_watermark <= 1 * S
        assert (hold, key, side_window, count) == (1 * S, "side-input wait AsList(SideWindows)", "[0.0, 10.0)", 1)
    # It waited while the side watermark was at 5s although the stage's input had passed 1s.
    assert any(input_watermark == 5 * S and output_watermark == 1 * S for _, input_watermark, output_watermark, *_ in waiting)
    # It went in the step the side watermark reached 10s, and nothing holds the stage then.
    (released,) = [row for row in rows if row[0] == emitted.step]
    assert released[1] == 10 * S and released[2] == 10 * S
    assert (released[3], released[6]) == (None, 0)
    assert "side-input wait AsList(SideWindows) [0.0, 10.0)" in result.watermarks().format()


def test_the_step_loop_drops_side_input_windows_once_they_expire():
    p = beam.Pipeline()
    stream = (
        TestStream()
        .add_elements([TimestampedValue("a", 1), TimestampedValue("b", 12)], tag="side")
        .advance_watermark_to(10, tag="side")
        .advance_watermark_to(10, tag="main")
        .advance_watermark_to(14, tag="side")
        .advance_watermark_to(14, tag="main")
        .advance_watermark_to(30, tag="side")
        .advance_watermark_to(30, tag="main")
    )
    s = p | "Stream" >> stream
    side = s["side"] | "SideWindows" >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=3)
    s["main"] | "MainWindows" >> beam.WindowInto(window.FixedWindows(10)) | "Read" >> beam.Map(
        lambda x, s: (x, s), beam.pvalue.AsList(side)
    )
    plan = plan_stages(lower(p))
    loop = StepLoop(plan, MemoryBackend(), ManualClock(), batch=False)
    (side_pcoll,) = loop.side_contents
    kept = []
    while not loop.finished():
        loop.run_step()
        kept.append(sorted(wv.value for wv in loop.side_contents[side_pcoll]))
    # 'a' ([0, 10), kept to 13s) goes once the reading stage's input passes 13s; 'b' at the end.
    assert kept[:3] == [["a", "b"], ["a", "b"], ["a", "b"]]
    assert ["b"] in kept
    assert kept[-1] == []
    assert "side_contents" in loop.snapshot()
    assert loop.snapshot()["side_contents"][side_pcoll] == []


def endless_stream_pipeline(side_windows, main_windows):
    p = beam.Pipeline()
    rates = p | "Rates" >> beam.io.ReadFromRate(rows_per_second=1)
    side = rates | "SideWindows" >> beam.WindowInto(side_windows)
    main = p | "Main" >> beam.io.ReadFromRate(rows_per_second=1) | "MainWindows" >> beam.WindowInto(main_windows)
    main | "Enrich" >> beam.Map(lambda x, s: (x, len(s)), beam.pvalue.AsList(side))
    return p


def test_a_global_window_side_input_of_an_endless_stream_is_refused_naming_the_transform():
    p = endless_stream_pipeline(window.GlobalWindows(), window.FixedWindows(60))
    plan = plan_stages(lower(p))
    with pytest.raises(TransformError, match=r"'Enrich' \(applied at .*test_side_input_wait.py:\d+\).*AsList\(SideWindows\) is in the global window.*'Rates/Read'"):
        refuse_side_inputs_never_ready(plan, sources_end=False)
    refuse_side_inputs_never_ready(plan, sources_end=True)  # --available_now: the stream ends
    # The runner refuses it before starting Spark.
    with pytest.raises(TransformError, match="never ends"):
        p.run()


def test_main_elements_in_the_global_window_reading_an_endless_streams_windows_are_refused():
    plan = plan_stages(lower(endless_stream_pipeline(window.FixedWindows(60), window.GlobalWindows())))
    with pytest.raises(TransformError, match=r"read from main-input elements in the global window"):
        refuse_side_inputs_never_ready(plan, sources_end=False)


def test_side_inputs_of_an_endless_stream_in_closing_windows_are_accepted():
    plan = plan_stages(lower(endless_stream_pipeline(window.FixedWindows(60), window.FixedWindows(60))))
    refuse_side_inputs_never_ready(plan, sources_end=False)
