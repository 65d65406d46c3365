"""The fused body's cheap paths per element are the ones taken (#11 item 2), checked by
structure and by counting what is built, never by timing: a plain Map is one call, an
element whose windows, timestamp and value do not change goes on uncopied, a body with one
input and one output passes bare elements, TimestampedValue keeps integer microseconds."""

from __future__ import annotations

import attrs
import pytest

import sparkbeam as beam
from sparkbeam import window
from sparkbeam.dofn import DoFn
from sparkbeam.runners.core.elements import window_assignment
from sparkbeam.runners.core.elements.dofn_invoker import DoFnRunner
from sparkbeam.runners.core.elements.fused import FusedBody
from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS, cached_assignment
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import ParDoOp, lower
from sparkbeam.runners.core.plan.plan import plan_stages
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
    from sparkbeam.runners.core.elements import dofn_invoker, fast_paths
    from sparkbeam.utils.windowed_value import new_windowed_value

    built: list = []

    def counting(fields):
        built.append(fields)
        return new_windowed_value(fields)

    monkeypatch.setattr(dofn_invoker, "new_windowed_value", counting)
    monkeypatch.setattr(fast_paths, "new_windowed_value", counting)
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


def _stamp_in_minutes(*, also_capture_the_stamped: bool, input_windows=None):
    """``Create | [WindowInto(input_windows)] | Map(re-stamp to 75 s) | WindowInto(FixedWindows(60))``."""
    pipeline = beam.Pipeline()
    pcoll = pipeline | beam.Create([0])
    if input_windows is not None:
        pcoll = pcoll | "Input" >> beam.WindowInto(input_windows)
    stamped = pcoll | "Stamp" >> beam.Map(lambda x: window.TimestampedValue(x, 75))
    beam.capture(stamped | "Minutes" >> beam.WindowInto(FixedWindows(60)))
    if also_capture_the_stamped:
        beam.capture(stamped)
    (stage,) = plan_stages(lower(pipeline)).stages
    (source,) = stage.head.outputs  # type: ignore[union-attr]
    return stage, source


def test_a_restamping_map_into_window_into_is_one_call_per_element_that_sends_straight_to_the_output():
    stage, source = _stamp_in_minutes(also_capture_the_stamped=False)
    body = FusedBody(stage, bare=True)
    stamp = next(op for op in stage.body if op.label == "Stamp")
    assert body.scoped_op is stamp
    (receive,) = body._receivers[source]
    assert receive.__name__ == "process_map_restamped_into"  # no StepScopedRunner around it
    (runner,) = body._runners
    assert runner.runner._into[1] == body._out.append  # the WindowInto's sender is the exit itself


@pytest.mark.parametrize("copies", [0, 1, 2])
def test_the_one_call_restamping_map_gives_what_the_two_steps_give(copies):
    # Input windows are fixed (one window per re-stamped output): the fused call sends one
    # copy per input window, none for an element in no window.
    windows = (IntervalWindow(0, 10), IntervalWindow(10, 20))[:copies]
    element = WindowedValue("a", 7 * S, windows, PANE_INFO_UNKNOWN)
    fused_stage, _ = _stamp_in_minutes(also_capture_the_stamped=False, input_windows=FixedWindows(10))
    plain_stage, _ = _stamp_in_minutes(also_capture_the_stamped=True, input_windows=FixedWindows(10))
    # Handed straight to the Map, in the windows the test gives it.
    (windowed,) = next(op for op in fused_stage.body if op.label == "Stamp").inputs
    fused_body = FusedBody(fused_stage)
    assert fused_body._receivers[windowed][0].__name__ == "process_map_restamped_into"
    fused = [wv for _, wv in fused_body.run([(windowed, element)])]
    minutes = next(op for op in plain_stage.body if op.label == "Minutes").outputs[0]
    plain = [wv for pcoll, wv in FusedBody(plain_stage).run([(windowed, element)]) if pcoll == minutes]
    assert fused == plain
    assert fused == [WindowedValue("a", 75 * S, (IntervalWindow(60, 120),), PANE_INFO_UNKNOWN)] * copies


def test_a_body_whose_only_user_code_is_one_dofn_names_its_step_itself_and_restores_it():
    from sparkbeam.metrics.execution import _CURRENT

    seen_steps: list = []

    def record(x):
        seen_steps.append(_CURRENT.step)
        return x + 1

    body, source = _body(beam.Map(record), beam.WindowInto(FixedWindows(60)))
    assert body.scoped_op is not None
    (receive,) = body._receivers[source]
    assert receive is body._runners[0].runner.process  # the DoFn runner's own, no StepScopedRunner around it
    _CURRENT.step = "outer"
    try:
        outputs = body.run_bare(source, [_global(1), _global(2)])
        assert _CURRENT.step == "outer"
        assert [wv.value for wv in outputs] == [2, 3]
        assert _CURRENT.step == "outer"
    finally:
        _CURRENT.step = None
    assert seen_steps == [body.scoped_op.label] * 2


def test_a_body_with_two_dofns_leaves_each_to_name_its_own_step():
    from sparkbeam.metrics.execution import _CURRENT

    steps: list = []

    def first(x):
        steps.append(_CURRENT.step)
        return x

    def second(x):
        steps.append(_CURRENT.step)
        return x

    body, source = _body(beam.Map(first), beam.Map(second))
    assert body.scoped_op is None
    list(body.run_bare(source, [_global(1)]))
    assert steps == [op.label for op in body.stage.body]


def test_fast_paths_of_a_chain_name_their_own_steps_with_no_wrapper_and_put_the_callers_back():
    from sparkbeam.metrics.execution import _CURRENT

    seen: list = []

    def explode(x):
        # the generator resumes after each output has gone downstream: still in its own step
        for n in range(2):
            seen.append(("explode", _CURRENT.step))
            yield x + n
        seen.append(("explode", _CURRENT.step))

    class Stamped(DoFn):  # not a fast path: named by a wrapper call, between two fast paths
        def process(self, element, timestamp=DoFn.TimestampParam):
            seen.append(("stamped", _CURRENT.step))
            yield element

    def double(x):
        seen.append(("double", _CURRENT.step))
        return 2 * x

    def keep(x):
        seen.append(("keep", _CURRENT.step))
        if x > 100:
            raise ValueError("too big")
        return True

    body, source = _body(beam.FlatMap(explode), beam.ParDo(Stamped()), beam.Map(double), beam.Filter(keep))
    labels = dict(zip(("explode", "stamped", "double", "keep"), (op.label for op in body.stage.body)))
    wrapped = {op.label: body._receivers[op.inputs[0]][0].__name__ == "stepped" for op in body.stage.body}
    assert wrapped == {labels["explode"]: False, labels["stamped"]: True, labels["double"]: False, labels["keep"]: False}
    _CURRENT.step = "outer"
    try:
        assert [wv.value for wv in body.run_bare(source, [_global(1)])] == [2, 4]
        assert _CURRENT.step == "outer"
        assert seen == [(name, labels[name]) for name in ("explode", "stamped", "double", "keep") * 2 + ("explode",)]
        failing, _ = _body(beam.FlatMap(explode), beam.ParDo(Stamped()), beam.Map(double), beam.Filter(keep))
        with pytest.raises(Exception, match="too big"):
            list(failing.run_bare(source, [_global(100)]))
        assert _CURRENT.step == "outer"  # put back by the body though the failure left a fast path's
    finally:
        _CURRENT.step = None


def test_a_dofn_whose_process_is_all_it_runs_per_element_takes_the_flatmaps_fast_path():
    class Split(DoFn):
        def setup(self):
            self.sep = ","

        def process(self, element):
            yield from element.split(self.sep)

    runner = DoFnRunner(_pardo(Split()), {None: (out := []).append}, None)
    assert runner.process.__name__ == "process_flat"
    runner.start()
    runner.process(_global("a,b"))
    assert [wv.value for wv in out] == ["a", "b"]


def test_a_bare_body_hands_its_outputs_on_a_chunk_at_a_time_in_order():
    from sparkbeam.runners.core.elements.fused import CHUNK

    pulled = 0

    def inputs():
        nonlocal pulled
        for value in range(CHUNK + 10):
            pulled += 1
            yield _global(value)

    body, source = _body(beam.Map(lambda x: x * 2))
    outputs = body.run_bare(source, inputs())
    first = next(outputs)
    assert (first.value, pulled) == (0, CHUNK)  # one resumption of the body per chunk of inputs
    assert [wv.value for wv in outputs] == [2 * value for value in range(1, CHUNK + 10)]
    assert (body.elements_in, body.elements_out) == (CHUNK + 10, CHUNK + 10)


def test_readers_of_one_pcollection_receive_in_body_order_though_the_body_joins_in_reverse():
    pipeline = beam.Pipeline()
    numbers = pipeline | beam.Create([0])
    beam.capture(numbers | "A" >> beam.Map(lambda x: ("a", x)))
    beam.capture(numbers | "B" >> beam.Map(lambda x: ("b", x)))
    beam.capture(numbers)
    (stage,) = plan_stages(lower(pipeline)).stages
    (source,) = stage.head.outputs  # type: ignore[union-attr]
    outputs = [wv.value for _, wv in FusedBody(stage).run([(source, _global(1))])]
    assert outputs == [1, ("a", 1), ("b", 1)]


def test_a_restamping_map_into_fixed_windows_looks_cached_windows_up_without_calling_the_assignment(monkeypatch):
    assign = cached_assignment(FixedWindows(7))  # a size no other test uses: its cache starts empty
    parts = window_assignment.fixed_window_parts(assign)
    assert parts is not None
    calls: list = []

    def counting(micros):
        calls.append(micros)
        return assign(micros)

    monkeypatch.setitem(window_assignment._FIXED_PARTS, counting, parts)
    out: list = []
    runner = DoFnRunner(_pardo(core.Map(lambda x: TimestampedValue(x, 8)).fn), {None: out.append}, None)
    runner.window_restamped_into(counting, out.append)
    assert runner.process.__name__ == "process_map_restamped_into"
    runner.process(_global("a"))
    runner.process(_global("b"))
    assert calls == [8 * S]  # the first builds the window; the second finds it in the cache
    assert [wv.windows for wv in out] == [(IntervalWindow(7, 14),)] * 2
    assert out[0].windows is out[1].windows


@pytest.mark.parametrize("restamping", [True, False])
def test_values_in_the_global_window_reach_a_restamping_map_as_values_and_anything_else_as_elements(monkeypatch, restamping):
    from sparkbeam.runners.core.elements import dofn_invoker, fast_paths, fused

    built: list = []

    def counting(fields):
        built.append(fields)
        return WindowedValue(*fields)

    monkeypatch.setattr(dofn_invoker, "new_windowed_value", counting)
    monkeypatch.setattr(fast_paths, "new_windowed_value", counting)
    monkeypatch.setattr(fused, "new_windowed_value", counting)
    if restamping:
        transforms = (beam.Map(lambda x: window.TimestampedValue(x, 75)), beam.WindowInto(FixedWindows(60)))
    else:
        transforms = (beam.Map(lambda x: x + "!"),)
    body, source = _body(*transforms)
    by_value = list(body.run_bare_values(source, ["a", "b"]))
    # Built by the body: the outputs, and the inputs only for a reader that needs them.
    assert len(built) == (2 if restamping else 4)
    as_elements = list(_body(*transforms)[0].run_bare(source, [_global("a"), _global("b")]))
    assert by_value == as_elements
    assert body.elements_in == 2 and body.elements_out == 2


@pytest.mark.parametrize("extra", [(), (TimestampedValue,), (TimestampedValue, 75)])
def test_a_maps_extra_arguments_reach_it_as_given_on_each_one_call_path(extra):
    # One extra argument is passed as such (no ``*args`` per element); none or several as before.
    calls: list = []

    def stamp(value, *args):
        calls.append((value, *args))
        return TimestampedValue(value, 75)

    map_fn = core.Map(stamp, *extra).fn
    assign = cached_assignment(FixedWindows(60))
    plain = DoFnRunner(ParDoOp(**{**attrs.asdict(_pardo(map_fn), recurse=False), "args": extra}), {None: [].append}, None)
    restamped: list = []
    into = DoFnRunner(ParDoOp(**{**attrs.asdict(_pardo(map_fn), recurse=False), "args": extra}), {None: [].append}, None)
    into.window_restamped_into(assign, restamped.append, lambda value, micros, windows: restamped.append((value, micros)))
    assert (plain.process.__name__, into.process.__name__) == ("process_map", "process_map_restamped_into")
    for process in (plain.process, into.process, into.process_global_value):
        bound = dict(zip(process.__code__.co_freevars, (cell.cell_contents for cell in process.__closure__)))
        assert bound["one_arg"] is (len(extra) == 1)
        if len(extra) == 1:
            assert bound["arg"] is TimestampedValue
    plain.process(_global("a"))
    into.process(_global("b"))
    into.process_global_value("c")
    assert calls == [("a", *extra), ("b", *extra), ("c", *extra)]
    assert all(arg is given for call in calls for arg, given in zip(call[1:], extra))
    assert restamped == [("b", 75 * S), ("c", 75 * S)]


def test_a_flatmaps_outputs_are_read_in_its_own_call_and_a_result_that_is_not_iterable_is_named():
    from sparkbeam.runners.core.lowering.errors import UserCodeError

    body, source = _body(beam.FlatMap(lambda x: [x, x + "!"]))
    (receive,) = body._receivers[source]
    assert receive.__name__ == "process_flat"  # no generator between the function and the output
    assert [wv.value for wv in body.run_bare(source, [_global("a")])] == ["a", "a!"]
    body, source = _body(beam.FlatMap(lambda x: 5))
    with pytest.raises(UserCodeError, match="returned 5, which is not iterable"):
        list(body.run_bare(source, [_global("a")]))
    body, source = _body(beam.FlatMap(lambda x: None))  # no outputs, as Beam reads it
    assert list(body.run_bare(source, [_global("a")])) == []


def test_maptuple_and_flatmaptuple_take_the_fast_paths_and_name_their_failures():
    pairs = DoFnRunner(_pardo(core.MapTuple(lambda key, value: (key, value + 1)).fn), {None: (out := []).append}, None)
    flat = DoFnRunner(_pardo(core.FlatMapTuple(lambda key, value: [key] * value).fn), {None: out.append}, None)
    assert (pairs.process.__name__, flat.process.__name__) == ("process_map", "process_flat")
    pairs.process(_global(("a", 1)))
    flat.process(_global(("b", 2)))
    assert [wv.value for wv in out] == [("a", 2), "b", "b"]
    with pytest.raises(UserCodeError, match="'P'"):
        pairs.process(_global(("a", 1, 2)))  # three parts for two parameters


def _map_then_window(windowfn, *, also_capture_the_mapped: bool, fn=lambda x: x + "!"):
    """``Create | WindowInto(FixedWindows(10)) | Map(fn) | WindowInto(windowfn)``; the Map's
    output also captured (read by two: not windowed at once) or not."""
    pipeline = beam.Pipeline()
    pcoll = pipeline | beam.Create([0]) | "Input" >> beam.WindowInto(FixedWindows(10))
    mapped = pcoll | "Shout" >> beam.Map(fn)
    beam.capture(mapped | "Minutes" >> beam.WindowInto(windowfn))
    if also_capture_the_mapped:
        beam.capture(mapped)
    (stage,) = plan_stages(lower(pipeline)).stages
    shout = next(op for op in stage.body if op.label == "Shout")
    minutes = next(op for op in stage.body if op.label == "Minutes")
    return stage, shout.inputs[0], minutes.outputs[0]


@pytest.mark.parametrize("windowfn", [FixedWindows(60), window.SlidingWindows(60, 20), GlobalWindows()], ids=["fixed", "sliding", "global"])
@pytest.mark.parametrize("copies", [0, 1, 2])
def test_a_maps_outputs_read_only_by_window_into_are_windowed_at_once_as_the_two_steps_window_them(monkeypatch, windowfn, copies):
    windows = (IntervalWindow(0, 10), IntervalWindow(10, 20))[:copies]
    element = WindowedValue("a", 75 * S, windows, PANE_INFO_UNKNOWN)
    fused_stage, windowed, _ = _map_then_window(windowfn, also_capture_the_mapped=False)
    plain_stage, _, minutes = _map_then_window(windowfn, also_capture_the_mapped=True)
    plain = [wv for pcoll, wv in FusedBody(plain_stage).run([(windowed, element)]) if pcoll == minutes]
    built = _count_built(monkeypatch)
    fused = [wv for _, wv in FusedBody(fused_stage).run([(windowed, element)])]
    assert fused == plain
    windows_of_75 = tuple(windowfn.assign(window.WindowFn.AssignContext(window.Timestamp.of(75), "a!")))
    assert fused == [WindowedValue("a!", 75 * S, windows_of_75, PANE_INFO_UNKNOWN)] * copies
    assert len(built) == min(copies, 1)  # the WindowInto's output alone, once for all its copies


def test_a_map_into_window_into_sends_an_unchanged_element_on_as_it_is_and_other_outputs_the_long_way():
    element = _global("a")
    stage, windowed, _ = _map_then_window(GlobalWindows(), also_capture_the_mapped=False, fn=lambda x: x)
    (out,) = [wv for _, wv in FusedBody(stage).run([(windowed, element)])]
    assert out is element
    stage, windowed, _ = _map_then_window(FixedWindows(60), also_capture_the_mapped=False, fn=lambda x: window.TimestampedValue(x, 75))
    (out,) = [wv for _, wv in FusedBody(stage).run([(windowed, element)])]
    assert out == WindowedValue("a", 75 * S, (IntervalWindow(60, 120),), PANE_INFO_UNKNOWN)


def _router(dead_letter_tag):
    from sparkbeam.io.streaming import _RouteBadRecords

    op = attrs.evolve(_pardo(_RouteBadRecords("ReadFromKafka 'Read'", dead_letter_tag)), outputs=(1, 2), output_tags=(None, "bad"))
    good: list = []
    bad: list = []
    return DoFnRunner(op, {None: good.append, "bad": bad.append}, None), good, bad


def test_a_stream_reads_router_hands_good_elements_on_with_no_call_and_routes_bad_records_through_its_process():
    from sparkbeam.io.filebased import BadRecord

    runner, good, bad = _router("bad")
    assert runner.process.__name__ == "process_pass_on"
    runner.start()
    element = _global(("k", "v"))
    failure = BadRecord("kafka t-0 offset 3", None, "b'x'", "UnicodeDecodeError: ...")
    stamped = _global(TimestampedValue("v", 75))  # read by its type by the DoFn's outputs: through process
    for wv in (element, _global(failure), stamped):
        runner.process(wv)
    assert good[0] is element
    assert good[1] == WindowedValue("v", 75 * S, GLOBAL_WINDOWS, PANE_INFO_UNKNOWN)
    assert [wv.value for wv in bad] == [failure]
    in_step = runner.process_in_step("Read/Records")
    assert in_step is not None and in_step.__name__ == "process_pass_on"


def test_a_stream_reads_router_without_dead_letters_stops_at_a_bad_record_naming_the_read():
    from sparkbeam.io.filebased import BadRecord

    runner, good, _ = _router(None)
    runner.start()
    runner.process(_global("fine"))
    with pytest.raises(UserCodeError, match=r"ReadFromKafka 'Read': bad record at kafka t-0 offset 3.*with_exception_handling"):
        runner.process(_global(BadRecord("kafka t-0 offset 3", None, "b'x'", "UnicodeDecodeError: ...")))
    assert [wv.value for wv in good] == ["fine"]


def test_a_body_of_a_stream_reads_router_and_one_map_names_the_maps_step_around_its_chunks():
    from sparkbeam.io.streaming import _RouteBadRecords

    body, source = _body(beam.ParDo(_RouteBadRecords("ReadFromKafka 'Read'", None)), beam.Map(lambda x: x * 2))
    _router, double = body.stage.body
    assert body.scoped_op is double  # the router runs no user code
    assert [wv.value for wv in body.run_bare(source, [_global(1), _global(2)])] == [2, 4]
