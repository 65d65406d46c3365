"""The fused body's cheap paths per element are the ones taken (#11 item 2), checked by
structure and by counting what is built, never by timing: a plain Map is one call, an
element whose windows, timestamp and value do not change goes on uncopied, a body with one
input and one output passes bare elements, TimestampedValue keeps integer microseconds."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam import window
from sparkbeam.dofn import DoFn
from sparkbeam.runners.core import window_assignment
from sparkbeam.runners.core.dofn_invoker import DoFnRunner
from sparkbeam.runners.core.fused import FusedBody
from sparkbeam.runners.core.ops import ParDoOp, lower
from sparkbeam.runners.core.plan import plan_stages
from sparkbeam.runners.core.window_assignment import GLOBAL_WINDOWS, cached_assignment
from sparkbeam.transforms import core
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import FixedWindows, GlobalWindows, IntervalWindow, TimestampedValue

S = 1_000_000


def _body(*transforms: beam.PTransform) -> tuple[FusedBody, int]:
    """The fused body of ``Create | transforms...`` with one bare output, and its input id."""
    pipeline = beam.Pipeline()
    pcoll = pipeline | beam.Create([0])
    for index, transform in enumerate(transforms):
        pcoll = pcoll | f"Step{index}" >> transform
    beam.capture(pcoll)
    (stage,) = plan_stages(lower(pipeline)).stages
    (source,) = stage.head.outputs  # type: ignore[union-attr]
    return FusedBody(stage, bare=True), source


def _global(value) -> WindowedValue:
    return WindowedValue(value, MIN_TIMESTAMP.micros, GLOBAL_WINDOWS, PANE_INFO_UNKNOWN)


def _pardo(dofn) -> ParDoOp:
    return ParDoOp(
        label="P", location="test.py:1", inputs=(0,), outputs=(1,), dofn=dofn, args=(), kwargs={}, output_tags=(None,)
    )


def test_a_map_is_one_plain_call_and_a_dofn_with_parameters_is_not():
    assert DoFnRunner(_pardo(core.Map(str).fn), {None: print}, None).plain

    class Stamped(DoFn):
        def process(self, element, timestamp=DoFn.TimestampParam):
            yield element

    assert not DoFnRunner(_pardo(Stamped()), {None: print}, None).plain


def test_a_map_that_returns_its_input_passes_the_element_on_uncopied():
    body, source = _body(beam.Map(lambda x: x), beam.Filter(lambda x: True))
    element = _global(("k", 1))
    (out,) = body.run_bare(source, [element])
    assert out is element


def test_a_map_with_a_new_value_keeps_the_inputs_timestamp_windows_and_pane():
    body, source = _body(beam.Map(lambda x: x + 1))
    (out,) = body.run_bare(source, [WindowedValue(1, 5 * S, (IntervalWindow(0, 10),), PANE_INFO_UNKNOWN)])
    assert out == WindowedValue(2, 5 * S, (IntervalWindow(0, 10),), PANE_INFO_UNKNOWN)


def test_window_into_that_changes_no_window_passes_the_element_on_uncopied():
    body, source = _body(beam.WindowInto(GlobalWindows()))
    element = _global("a")
    (out,) = body.run_bare(source, [element])
    assert out is element


def test_window_into_new_windows_copies_once_per_input_window():
    body, source = _body(beam.WindowInto(FixedWindows(10)))
    element = WindowedValue("a", 12 * S, GLOBAL_WINDOWS, PANE_INFO_UNKNOWN)
    (out,) = body.run_bare(source, [element])
    assert out.windows == (IntervalWindow(10, 20),)
    assert out is not element


def test_equal_window_fns_share_one_assignment_so_a_second_window_into_copies_nothing():
    assign = cached_assignment(FixedWindows(60))
    assert assign is not None
    assert cached_assignment(FixedWindows(60)) is assign
    # Windowed by one FixedWindows(60) (here, a DoFn's re-stamped output, upstream) ...
    element = WindowedValue("a", 75 * S, assign(75 * S), PANE_INFO_UNKNOWN)
    # ... and by another, equal one further down: nothing changes, nothing is copied.
    body, source = _body(beam.Map(lambda x: x), beam.WindowInto(FixedWindows(60)))
    (out,) = body.run_bare(source, [element])
    assert out is element
    restamping, source = _body(beam.Map(lambda x: window.TimestampedValue(x, 75)), beam.WindowInto(FixedWindows(60)))
    (restamped,) = restamping.run_bare(source, [_global("a")])
    assert restamped.windows is element.windows


def test_the_shared_window_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(window_assignment, "MAX_CACHED_WINDOWS", 3)
    monkeypatch.setattr(window_assignment, "_ASSIGNMENTS", {})
    assign = cached_assignment(FixedWindows(1))
    assert assign is not None
    first = assign(0)
    for second in range(1, 4):
        assign(second * S)
    # The fourth window emptied the cache: the first is built again, equal but new.
    assert assign(0) == first
    assert assign(0) is not first


def test_a_bare_body_counts_what_entered_and_left():
    body, source = _body(beam.FlatMap(lambda x: [x, x]), beam.Filter(lambda x: x > 0))
    out = list(body.run_bare(source, [_global(0), _global(1), _global(2)]))
    assert [wv.value for wv in out] == [1, 1, 2, 2]
    assert (body.elements_in, body.elements_out) == (3, 4)


def test_a_bare_body_needs_exactly_one_output():
    pipeline = beam.Pipeline()
    outputs = pipeline | beam.Create([0]) | beam.Map(lambda x: x).with_outputs("odd", main="even")
    beam.capture(outputs.even)
    beam.capture(outputs.odd)
    (stage,) = plan_stages(lower(pipeline)).stages
    with pytest.raises(ValueError, match="has 2 outputs; a bare fused body has one"):
        FusedBody(stage, bare=True)


def test_timestamped_value_keeps_integer_microseconds_and_builds_no_timestamp(monkeypatch):
    class NoTimestamps:
        @staticmethod
        def of(value):
            msg = "a Timestamp was built"
            raise AssertionError(msg)

    monkeypatch.setattr(window, "Timestamp", NoTimestamps)
    stamped = [TimestampedValue("a", 1.5), TimestampedValue("b", 2), TimestampedValue("c", 0.1)]
    assert [tv.timestamp_micros for tv in stamped] == [1_500_000, 2_000_000, 100_000]


def test_timestamped_value_reads_as_beams():
    from sparkbeam.utils.timestamp import Timestamp

    tv = TimestampedValue(("k", 1), 1.5)
    assert tv.timestamp == Timestamp(1.5)
    assert tv == TimestampedValue(("k", 1), Timestamp(1.5))
    assert hash(tv) == hash(TimestampedValue(("k", 1), 1.5))
    assert repr(tv) == "TimestampedValue(value=('k', 1), timestamp=Timestamp(1.500000))"
    with pytest.raises(TypeError, match="not True"):
        TimestampedValue("a", True)


def _count_built(monkeypatch) -> list:
    """Every WindowedValue the DoFn runner and the WindowInto build, recorded."""
    from sparkbeam.runners.core import dofn_invoker
    from sparkbeam.utils.windowed_value import new_windowed_value

    built: list = []

    def counting(fields):
        built.append(fields)
        return new_windowed_value(fields)

    monkeypatch.setattr(dofn_invoker, "new_windowed_value", counting)
    monkeypatch.setattr(window_assignment, "new_windowed_value", counting)
    return built


def _restamp_then_window(*, also_capture_the_stamped: bool):
    pipeline = beam.Pipeline()
    windowed = pipeline | beam.Create([0]) | "Slide" >> beam.WindowInto(window.SlidingWindows(10, 5))
    stamped = windowed | "Stamp" >> beam.Map(lambda x: window.TimestampedValue(x, 12))
    beam.capture(stamped | "Minutes" >> beam.WindowInto(FixedWindows(60)))
    if also_capture_the_stamped:
        beam.capture(stamped)
    (stage,) = plan_stages(lower(pipeline)).stages
    (source,) = stage.head.outputs  # type: ignore[union-attr]
    return stage, source


def test_a_restamped_output_read_only_by_window_into_is_windowed_once_with_nothing_in_between(monkeypatch):
    built = _count_built(monkeypatch)
    body, source = _body(beam.Map(lambda x: window.TimestampedValue(x, 75)), beam.WindowInto(FixedWindows(60)))
    (out,) = body.run_bare(source, [_global("a")])
    assert out == WindowedValue("a", 75 * S, (IntervalWindow(60, 120),), PANE_INFO_UNKNOWN)
    assert len(built) == 1  # the WindowInto's output alone: no element in the input's windows


def test_restamping_straight_into_window_into_gives_what_the_two_steps_give():
    # Slide puts the element in two windows (Map runs once per copy it makes: two), each
    # output re-stamped into two sliding windows again, in each of its input's two
    # windows: the WindowInto emits 2 x 2 x 2 elements either way.
    element = WindowedValue("a", 7 * S, (IntervalWindow(0, 10), IntervalWindow(5, 15)), PANE_INFO_UNKNOWN)
    fused_stage, source = _restamp_then_window(also_capture_the_stamped=False)
    plain_stage, _ = _restamp_then_window(also_capture_the_stamped=True)
    _slide, stamp, minutes = fused_stage.body
    assert FusedBody(fused_stage).sole_reader(stamp.outputs[0]) is minutes
    assert FusedBody(plain_stage).sole_reader(plain_stage.body[1].outputs[0]) is None  # captured too
    fused = list(FusedBody(fused_stage).run([(source, element)]))
    plain = list(FusedBody(plain_stage).run([(source, element)]))
    windowed = [wv for pcoll, wv in plain if pcoll == plain_stage.body[2].outputs[0]]
    assert [wv for _, wv in fused] == windowed
    assert len(windowed) == 8
    assert {(wv.windows, wv.timestamp_micros) for wv in windowed} == {((IntervalWindow(0, 60),), 12 * S)}
