"""Window assignment at run time: the cached assignment equals WindowFn.assign for the
built-in window fns, and a DoFn's TimestampedValue outputs are windowed again by the input
PCollection's window fn (Beam Python's ``_maybe_propagate_windowing_info``)."""

from __future__ import annotations

import random

import pytest

from sparkbeam.runners.core.elements.dofn_invoker import DoFnRunner
from sparkbeam.runners.core.elements.window_assignment import cached_assignment, restamp_assigner
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import ParDoOp
from sparkbeam.transforms import core
from sparkbeam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    NonMergingWindowFn,
    Sessions,
    SlidingWindows,
    Timestamp,
    TimestampedValue,
    WindowFn,
)
from sparkbeam.utils.windowed_value import (
    PANE_INFO_UNKNOWN,
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
)


@pytest.mark.parametrize(
    "windowfn",
    [
        FixedWindows(60),
        FixedWindows(10, 3),
        SlidingWindows(60, 20),
        SlidingWindows(30, 7, 2),  # size not a multiple of period: the count of windows varies
        SlidingWindows(10, 20),  # hopping with gaps: some timestamps are in no window
        GlobalWindows(),
    ],
    ids=repr,
)
def test_cached_assignment_matches_assign(windowfn):
    assign = cached_assignment(windowfn)
    rng = random.Random(7)
    for _ in range(3000):
        micros = rng.choice([rng.randint(-10**10, 10**10), rng.randint(-200, 200)])
        expected = tuple(windowfn.assign(WindowFn.AssignContext(Timestamp.from_micros(micros))))
        assert assign(micros) == expected, micros


def test_subclasses_and_merging_fns_use_their_own_assign():
    class Shifted(FixedWindows):
        def assign(self, context):
            return super().assign(WindowFn.AssignContext(context.timestamp + 1))

    assert cached_assignment(Shifted(10)) is None
    assert cached_assignment(Sessions(10)) is None


S = 1_000_000
EARLY_PANE = PaneInfo(True, False, PaneInfoTiming.EARLY, 0, -1)


def run_dofn(fn, windowfn, wv):
    """The outputs of ``beam.FlatMap(fn)`` over ``wv``, its input windowed by ``windowfn``."""
    op = ParDoOp(
        label="Restamp",
        location="test.py:1",
        inputs=(0,),
        outputs=(1,),
        dofn=core.FlatMap(fn).fn,
        args=(),
        kwargs={},
        output_tags=(None,),
        input_windowfn=windowfn,
    )
    out = []
    runner = DoFnRunner(op, {None: out.append}, None)
    runner.process(wv)
    return out


def test_a_restamped_output_lands_in_the_fixed_window_of_its_new_timestamp():
    wv = WindowedValue("a", 5 * S, (IntervalWindow(0, 10),), EARLY_PANE)
    (out,) = run_dofn(lambda e: [TimestampedValue(e, 25)], FixedWindows(10), wv)
    assert out == WindowedValue("a", 25 * S, (IntervalWindow(20, 30),), PANE_INFO_UNKNOWN)


def test_a_restamped_output_after_sessions_starts_a_session_at_its_timestamp():
    wv = WindowedValue("a", 15 * S - 1, (IntervalWindow(1, 15),), EARLY_PANE)
    (out,) = run_dofn(lambda e: [TimestampedValue(e, 14)], Sessions(10), wv)
    assert out.windows == (IntervalWindow(14, 24),)


def test_a_restamp_is_assigned_once_per_input_window():
    windows = (IntervalWindow(0, 10), IntervalWindow(5, 15))  # SlidingWindows(10, 5) at 7
    (out,) = run_dofn(lambda e: [TimestampedValue(e, 12)], SlidingWindows(10, 5), WindowedValue("a", 7 * S, windows))
    assert out.windows == (IntervalWindow(10, 20), IntervalWindow(5, 15)) * 2


def test_outputs_that_keep_their_timestamp_keep_windows_and_pane():
    wv = WindowedValue("a", 5 * S, (IntervalWindow(0, 10),), EARLY_PANE)
    (out,) = run_dofn(lambda e: [e.upper()], Sessions(10), wv)
    assert out == WindowedValue("A", 5 * S, (IntervalWindow(0, 10),), EARLY_PANE)


def test_a_custom_window_fn_assigns_restamped_outputs_with_no_current_window():
    seen = []

    class Remembering(NonMergingWindowFn):
        def assign(self, context):
            seen.append((context.timestamp, context.element, context.window))
            return [GlobalWindow()]

    assign = restamp_assigner(Remembering())
    assert assign("v", 3 * S) == (GlobalWindow(),)
    assert seen == [(Timestamp(3), "v", None)]


def test_a_failing_window_fn_names_the_dofn():
    class Broken(NonMergingWindowFn):
        def assign(self, context):
            raise ValueError("no window for you")

    with pytest.raises(UserCodeError, match="no window for you") as failure:
        run_dofn(lambda e: [TimestampedValue(e, 1)], Broken(), WindowedValue("a", 0, (GlobalWindow(),)))
    assert failure.value.label == "Restamp"
