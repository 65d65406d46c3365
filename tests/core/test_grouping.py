"""The grouping engine for one key: firing, lateness and garbage collection, holds."""

from __future__ import annotations

from sparkbeam.trigger import (
    AfterAny,
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Never,
    Repeatedly,
)
from sparkbeam.utils.windowed_value import PaneInfo, WindowedValue
from sparkbeam.window import (
    FixedWindows,
    GlobalWindows,
    IntervalWindow,
    SlidingWindows,
    TimestampCombiner,
)
from sparkbeam.windowing import Windowing
from tests.core.grouping_harness import (
    ACCUMULATING,
    DISCARDING,
    EARLY,
    LATE,
    MAX,
    ON_TIME,
    Key,
    S,
    SumFn,
    fixed,
    summary,
)

# ---------------------------------------------------------------------------- firing


def test_default_trigger_emits_the_on_time_pane_when_the_watermark_passes_the_window_end():
    key = Key(fixed())
    assert key.add(1, 2, 12) == []
    assert key.watermark(9.9) == []
    (pane,) = key.watermark(10)
    assert pane == WindowedValue(
        ("k", [1, 2]), 10 * S - 1, (IntervalWindow(0, 10),), PaneInfo(True, False, ON_TIME, 0, 0)
    )
    assert key.stats.panes_fired == 1


def test_triggers_are_evaluated_once_per_bundle():
    key = Key(fixed(trigger=Repeatedly(AfterCount(2))))
    assert summary(key.add(1, 2, 3, 4, 5)) == [
        (0, [1, 2, 3, 4, 5], 10 * S - 1, EARLY, 0, -1, False)
    ]


def test_discarding_clears_and_accumulating_keeps_the_pane_contents():
    trigger = Repeatedly(AfterCount(1))
    discarding = Key(fixed(trigger=trigger, accumulation_mode=DISCARDING))
    accumulating = Key(fixed(trigger=trigger, accumulation_mode=ACCUMULATING))
    for key in (discarding, accumulating):
        key.add(1)
    assert discarding.add(2)[0].value == ("k", [2])
    assert accumulating.add(2)[0].value == ("k", [1, 2])


def test_a_combine_fn_keeps_an_accumulator_across_firings_when_accumulating():
    trigger = Repeatedly(AfterCount(1))
    accumulating = Key(fixed(trigger=trigger, accumulation_mode=ACCUMULATING), combine_fn=SumFn())
    discarding = Key(fixed(trigger=trigger, accumulation_mode=DISCARDING), combine_fn=SumFn())
    for key in (accumulating, discarding):
        key.add(1, 2)
    assert accumulating.add(3)[0].value == ("k", 6)
    assert discarding.add(3)[0].value == ("k", 3)
    assert accumulating.state.windows[IntervalWindow(0, 10)].contents == 6


def test_an_empty_on_time_pane_is_emitted_after_early_panes():
    key = Key(fixed(trigger=AfterWatermark(early=AfterCount(1)), accumulation_mode=DISCARDING))
    assert summary(key.add(1)) == [(0, [1], 10 * S - 1, EARLY, 0, -1, False)]
    assert summary(key.watermark(10)) == [(0, [], 10 * S - 1, ON_TIME, 1, 0, True)]


def test_after_watermark_late_trigger_fires_late_panes():
    key = Key(fixed(trigger=AfterWatermark(late=AfterCount(1)), allowed_lateness=20))
    key.add(1)
    key.watermark(15)
    assert summary(key.add(2)) == [(0, [2], 10 * S - 1, LATE, 1, 1, False)]


def test_processing_time_trigger_fires_when_the_clock_reaches_its_deadline():
    key = Key(fixed(trigger=Repeatedly(AfterProcessingTime(5)), accumulation_mode=DISCARDING))
    key.clock.set(100 * S)
    key.add(1)
    assert key.engine.next_timers(key.state) == (10 * S, 105 * S)  # GC at 10 s, deadline
    key.clock.advance(4 * S)
    assert key.fire() == []
    key.clock.advance(1 * S)
    assert summary(key.fire()) == [(0, [1], 10 * S - 1, EARLY, 0, -1, False)]


def test_event_time_timers_fire_before_processing_time_timers_in_time_order():
    trigger = AfterWatermark(early=AfterProcessingTime(1), late=AfterCount(1))
    key = Key(Windowing(FixedWindows(10), trigger, allowed_lateness=100))
    key.add(15)
    key.add(3)
    key.clock.advance(5 * S)
    key.input_watermark = 30 * S
    panes = key.fire()
    # Both windows' ends passed: their on-time panes come first, earliest window first,
    # and the early deadlines that are also due no longer fire (the panes are late now).
    assert [(int(p.windows[0].start), p.pane_info.timing) for p in panes] == [
        (0, ON_TIME),
        (10, ON_TIME),
    ]


# ---------------------------------------------------------------------------- lateness and GC


def test_late_element_after_gc_is_dropped_and_counted():
    key = Key(fixed(allowed_lateness=5))
    key.watermark(16)  # [0, 10) is collected once the watermark passes 14.999999
    assert key.add(3, 12) == []
    assert key.stats.late_dropped == 1
    assert list(key.state.windows) == [IntervalWindow(10, 20)]


def test_a_window_is_late_at_its_gc_time_plus_one_microsecond():
    key = Key(fixed())
    key.input_watermark = 10 * S - 1  # the window's max timestamp: not yet late
    key.add(5)
    assert key.stats.late_dropped == 0
    key.input_watermark = 10 * S
    key.add(5)
    assert key.stats.late_dropped == 1


def test_each_late_window_of_an_element_counts():
    key = Key(Windowing(SlidingWindows(10, 5)))
    key.watermark(16)  # [0, 10) and [5, 15) are collected; [10, 20) is not
    key.add(9, 12)
    assert key.stats.late_dropped == 3  # 9 in [0, 10) and [5, 15), 12 in [5, 15)
    assert sorted(int(w.start) for w in key.state.windows) == [10]


def test_element_for_a_closed_window_is_dropped_and_counted():
    key = Key(fixed(trigger=AfterCount(1)))
    assert len(key.add(1)) == 1
    assert key.add(2, 3) == []
    assert key.stats.closed_dropped == 2
    assert key.state.windows[IntervalWindow(0, 10)].closed


def test_gc_emits_a_final_pane_for_pending_data_then_forgets_the_window():
    key = Key(fixed(trigger=Never()))
    key.add(1, 2)
    assert summary(key.watermark(10)) == [(0, [1, 2], 10 * S - 1, ON_TIME, 0, 0, True)]
    assert key.engine.is_empty(key.state)


def test_gc_after_early_panes_gives_a_final_on_time_pane_of_the_leftovers():
    key = Key(fixed(trigger=Repeatedly(AfterCount(2)), accumulation_mode=DISCARDING))
    key.add(1, 2)
    key.add(3)
    assert summary(key.watermark(100)) == [(0, [3], 10 * S - 1, ON_TIME, 1, 0, True)]


def test_gc_without_pending_data_emits_nothing():
    key = Key(fixed(trigger=Repeatedly(AfterCount(1))))
    key.add(1)
    assert key.watermark(100) == []
    assert key.engine.is_empty(key.state)


def test_gc_of_late_data_gives_a_late_final_pane():
    key = Key(fixed(trigger=AfterWatermark(late=AfterCount(5)), allowed_lateness=10))
    key.add(1)
    key.watermark(12)
    key.add(2)
    assert summary(key.watermark(20)) == [(0, [2], 10 * S - 1, LATE, 1, 1, True)]


def test_the_final_watermark_collects_the_global_window_whatever_the_lateness():
    key = Key(Windowing(GlobalWindows(), Never(), allowed_lateness=10**9))
    key.add(1)
    assert key.engine.next_timers(key.state) == (MAX, None)
    assert len(key.watermark(MAX / S)) == 1
    assert key.engine.is_empty(key.state)


# ---------------------------------------------------------------------------- holds


def test_earliest_hold_is_the_element_hold_until_the_on_time_pane():
    key = Key(fixed(timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST))
    key.add(7, 3)
    assert key.engine.earliest_hold(key.state) == (3 * S, IntervalWindow(0, 10))
    (pane,) = key.watermark(10)
    assert pane.timestamp_micros == 3 * S
    assert key.hold() is None


def test_the_hold_outlives_an_early_pane_for_the_on_time_pane_to_come():
    trigger = AfterWatermark(early=AfterCount(1))
    key = Key(
        fixed(
            trigger=trigger,
            accumulation_mode=DISCARDING,
            timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
        )
    )
    assert key.add(4)[0].timestamp_micros == 4 * S
    assert key.hold() == 4 * S
    (on_time,) = key.watermark(10)
    assert (on_time.value, on_time.timestamp_micros) == (("k", []), 4 * S)
    assert key.hold() is None


def test_elements_behind_the_output_watermark_stamp_the_pane_at_the_window_end():
    key = Key(fixed(timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST))
    key.watermark(8)
    key.add(2, 3, 7)
    assert key.hold() == 10 * S - 1  # the GC hold (no lateness): the pane is still to come
    (pane,) = key.watermark(11)
    assert pane.timestamp_micros == 10 * S - 1


def test_the_gc_hold_holds_the_watermark_without_changing_the_pane_timestamp():
    key = Key(fixed(trigger=AfterWatermark(late=AfterCount(2)), allowed_lateness=10))
    key.add(1)
    key.watermark(12)
    key.add(3)  # late, pending until the late trigger or GC fires
    assert key.engine.earliest_hold(key.state) == (20 * S - 1, IntervalWindow(0, 10))
    (pane,) = key.add(4)
    assert pane.timestamp_micros == 10 * S - 1
    assert key.hold() is None


def test_the_hold_of_a_finished_window_is_released():
    # Beam Python keeps the hold of a trigger with an on-time part that finished early,
    # and so holds the watermark until the window is collected; a closed window cannot
    # emit again, so the engine releases it.
    trigger = AfterAny(AfterCount(1), AfterWatermark())
    key = Key(fixed(trigger=trigger, timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST))
    (pane,) = key.add(4)
    assert pane.pane_info.is_last
    assert key.hold() is None


def test_overlapping_window_rule_in_the_engine():
    windowing = Windowing(
        SlidingWindows(10, 5), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST
    )
    on, off = Key(windowing), Key(windowing, overlapping_window_rule=False)
    for key in (on, off):
        key.add(7)
    assert sorted(p.timestamp_micros for p in on.watermark(100)) == [7 * S, 10 * S]
    assert sorted(p.timestamp_micros for p in off.watermark(100)) == [7 * S, 7 * S]
