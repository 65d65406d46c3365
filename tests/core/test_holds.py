"""Timestamp combiners: output times, holds, the overlapping-window rule, merging, GC holds."""

from __future__ import annotations

import pickle

import pytest

from sparkbeam.runners.core.grouping.holds import (
    HoldPolicy,
    output_watermark,
    single_pane_timestamp,
)
from sparkbeam.trigger import AfterCount, DefaultTrigger, Repeatedly
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from sparkbeam.window import (
    BoundedWindow,
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    TimestampCombiner,
)
from sparkbeam.windowing import Windowing

S = 1_000_000
EOW = TimestampCombiner.OUTPUT_AT_EOW
EARLIEST = TimestampCombiner.OUTPUT_AT_EARLIEST
LATEST = TimestampCombiner.OUTPUT_AT_LATEST
TRANSFORMED = TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED


def policy(window_fn, combiner, *, rule: bool = True) -> HoldPolicy:
    return HoldPolicy(Windowing(window_fn, timestamp_combiner=combiner), overlapping_window_rule=rule)


def hold_of(p: HoldPolicy, window: IntervalWindow, seconds: list[int], output_watermark: int = -(10**18)):
    return p.element_hold(window, [t * S for t in seconds], output_watermark)


class PlusHundred(FixedWindows):
    def get_transformed_output_time(self, window, input_timestamp):
        return input_timestamp + 100


def test_end_of_window_output_time_is_the_windows_last_microsecond():
    window = IntervalWindow(0, 10)
    assert policy(FixedWindows(10), EOW).output_time(window, 3 * S) == 10 * S - 1
    assert hold_of(policy(FixedWindows(10), EOW), window, [1, 2]) == (10 * S - 1, False)


def test_earliest_holds_at_the_earliest_element():
    assert hold_of(policy(FixedWindows(10), EARLIEST), IntervalWindow(0, 10), [7, 2, 5]) == (2 * S, False)


def test_latest_holds_at_the_latest_element():
    assert hold_of(policy(FixedWindows(10), LATEST), IntervalWindow(0, 10), [7, 2, 5]) == (7 * S, False)


def test_elements_behind_the_output_watermark_add_no_hold_and_say_so():
    p = policy(FixedWindows(10), EARLIEST)
    assert hold_of(p, IntervalWindow(0, 10), [2, 3, 7, 8], output_watermark=5 * S) == (7 * S, True)
    assert hold_of(p, IntervalWindow(0, 10), [2, 3], output_watermark=5 * S) == (None, True)


def test_end_of_window_behind_the_output_watermark_adds_no_hold():
    p = policy(FixedWindows(10), EOW)
    assert hold_of(p, IntervalWindow(0, 10), [2], output_watermark=10 * S) == (None, True)


@pytest.mark.parametrize("combiner", [EARLIEST, TRANSFORMED])
def test_overlap_rule_never_stamps_before_the_previous_window_ends(combiner):
    p = policy(SlidingWindows(10, 5), combiner)
    # [5, 15) overlaps [0, 10): its panes are never stamped before 10.
    assert p.output_time(IntervalWindow(5, 15), 7 * S) == 10 * S
    assert p.output_time(IntervalWindow(5, 15), 12 * S) == 12 * S
    assert hold_of(p, IntervalWindow(5, 15), [7, 12]) == (10 * S, False)
    assert p.output_time(IntervalWindow(0, 10), 7 * S) == 7 * S


def test_overlap_rule_off_is_beams_current_behaviour():
    p = policy(SlidingWindows(10, 5), EARLIEST, rule=False)
    assert p.output_time(IntervalWindow(5, 15), 7 * S) == 7 * S


def test_overlap_rule_does_not_touch_latest_or_end_of_window():
    assert policy(SlidingWindows(10, 5), LATEST).output_time(IntervalWindow(5, 15), 7 * S) == 7 * S
    assert policy(SlidingWindows(10, 5), EOW).output_time(IntervalWindow(5, 15), 7 * S) == 15 * S - 1


def test_windows_that_do_not_overlap_have_no_floor():
    p = policy(SlidingWindows(10, 10), EARLIEST)
    assert p.output_time(IntervalWindow(10, 20), 11 * S) == 11 * S


def test_floor_applies_before_the_output_watermark_test():
    # 7 s alone would be behind a 9 s output watermark; floored to 10 s it holds.
    p = policy(SlidingWindows(10, 5), EARLIEST)
    assert hold_of(p, IntervalWindow(5, 15), [7], output_watermark=9 * S) == (10 * S, False)


def test_earliest_transformed_uses_the_window_fns_hook():
    p = policy(PlusHundred(10), TRANSFORMED)
    assert p.output_time(IntervalWindow(0, 10), 1 * S) == 101 * S
    assert hold_of(p, IntervalWindow(0, 10), [3, 1, 2]) == (101 * S, False)
    # EARLIEST alone does not call the hook.
    assert policy(PlusHundred(10), EARLIEST).output_time(IntervalWindow(0, 10), 1 * S) == 1 * S


def test_merged_holds_take_min_max_or_the_merged_windows_end():
    merged = IntervalWindow(1, 22)
    assert policy(Sessions(10), EARLIEST).merge(merged, [5 * S, None, 3 * S]) == 3 * S
    assert policy(Sessions(10), LATEST).merge(merged, [5 * S, 12 * S]) == 12 * S
    assert policy(Sessions(10), EOW).merge(merged, [14 * S]) == 22 * S - 1
    assert policy(Sessions(10), EOW).merge(merged, [None, None]) is None


def test_combining_two_holds_of_one_window():
    assert policy(FixedWindows(10), EARLIEST).combine(4, 2) == 2
    assert policy(FixedWindows(10), LATEST).combine(4, 2) == 4
    assert policy(FixedWindows(10), EARLIEST).combine(None, 2) == 2
    assert policy(FixedWindows(10), EARLIEST).combine(4, None) == 4


def test_a_pane_without_hold_is_stamped_at_the_windows_last_microsecond():
    assert HoldPolicy.pane_timestamp(10 * S - 1, None) == 10 * S - 1
    assert HoldPolicy.pane_timestamp(10 * S - 1, 3 * S) == 3 * S


def test_hook_receives_a_timestamp():
    seen = []

    class Spy(FixedWindows):
        def get_transformed_output_time(self, window, input_timestamp):
            seen.append(input_timestamp)
            return input_timestamp

    policy(Spy(10), TRANSFORMED).output_time(IntervalWindow(0, 10), 3 * S)
    assert seen == [Timestamp(3)]


@pytest.mark.parametrize("combiner", [EOW, EARLIEST, LATEST, TRANSFORMED])
@pytest.mark.parametrize("rule", [True, False])
def test_output_times_of_a_bundle_are_each_elements_output_time(combiner, rule):
    p = policy(SlidingWindows(10, 5), combiner, rule=rule)
    window = IntervalWindow(5, 15)
    timestamps = [6 * S, 9 * S, 11 * S, 14 * S]
    assert p.output_times(window, timestamps) == [p.output_time(window, ts) for ts in timestamps]


def test_gc_time_is_the_windows_last_instant_plus_allowed_lateness_clamped_below_the_end_of_time():
    p = HoldPolicy(Windowing(FixedWindows(10), allowed_lateness=5))
    assert p.gc_time(IntervalWindow(0, 10)) == 15 * S - 1
    end = MAX_TIMESTAMP.micros - 2 * S
    last_window = IntervalWindow(Timestamp.from_micros(end - 10 * S), Timestamp.from_micros(end))
    assert p.gc_time(last_window) == MAX_TIMESTAMP.micros - 1


def test_late_data_pending_holds_a_window_at_its_gc_time_unless_its_hold_is_earlier():
    p = HoldPolicy(Windowing(FixedWindows(10), allowed_lateness=5))
    window = IntervalWindow(0, 10)
    assert p.window_hold(window, None, gc_hold=False) is None
    assert p.window_hold(window, 3 * S, gc_hold=False) == 3 * S
    assert p.window_hold(window, None, gc_hold=True) == 15 * S - 1
    assert p.window_hold(window, 3 * S, gc_hold=True) == 3 * S
    assert p.window_hold(window, 20 * S, gc_hold=True) == 15 * S - 1


def test_a_pane_takes_the_hold_unless_an_on_time_pane_is_still_to_come():
    window = IntervalWindow(0, 10)
    default = policy(FixedWindows(10), EARLIEST)  # DefaultTrigger: an on-time pane
    assert default.hold_after_pane(3 * S, window, watermark=5 * S, finished=False) == 3 * S
    assert default.hold_after_pane(3 * S, window, watermark=10 * S, finished=False) is None
    assert default.hold_after_pane(3 * S, window, watermark=5 * S, finished=True) is None
    counting = HoldPolicy(Windowing(FixedWindows(10), triggerfn=Repeatedly(AfterCount(2))))
    assert counting.hold_after_pane(3 * S, window, watermark=5 * S, finished=False) is None


def test_the_output_watermark_is_the_input_held_back_by_the_earliest_hold_and_never_moves_back():
    assert output_watermark(0, 10 * S, None) == 10 * S
    assert output_watermark(0, 10 * S, 4 * S) == 4 * S
    assert output_watermark(0, 3 * S, 4 * S) == 3 * S
    assert output_watermark(6 * S, 10 * S, 4 * S) == 6 * S


def test_batch_single_panes_are_stamped_as_beams_batch_runner_does():
    assert single_pane_timestamp(Windowing(), DefaultTrigger()) == GlobalWindow().max_timestamp().micros
    global_per_element = Windowing(GlobalWindows(), triggerfn=AfterCount(1))
    assert single_pane_timestamp(global_per_element, AfterCount(1)) == MIN_TIMESTAMP.micros
    assert single_pane_timestamp(Windowing(FixedWindows(10)), DefaultTrigger()) is None


@pytest.mark.parametrize("combiner", [EOW, EARLIEST, LATEST, TRANSFORMED])
def test_a_policy_pickles_and_keeps_its_rules(combiner):
    p = policy(SlidingWindows(10, 5), combiner)
    copy = pickle.loads(pickle.dumps(p))
    window = IntervalWindow(5, 15)
    assert copy.output_time(window, 7 * S) == p.output_time(window, 7 * S)
    assert copy.combine(4, 2) == p.combine(4, 2)


class LastInstantFirst(BoundedWindow):
    """A window of the user's whose panes are stamped one second before its end."""

    def __init__(self, end):
        super().__init__(end)

    def max_timestamp(self):
        return Timestamp.from_micros(self.end.micros - S)

    def __eq__(self, other):
        return type(other) is type(self) and other.end == self.end

    def __hash__(self):
        return hash(self.end.micros)


def test_a_users_window_is_asked_for_its_last_instant():
    window = LastInstantFirst(10)
    p = policy(FixedWindows(10), EOW)
    assert p.output_time(window, 3 * S) == 9 * S
    assert hold_of(p, window, [3]) == (9 * S, False)
    assert HoldPolicy(Windowing(FixedWindows(10), allowed_lateness=5)).gc_time(window) == 14 * S
