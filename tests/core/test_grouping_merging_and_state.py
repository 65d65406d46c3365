"""The grouping engine for one key: merging windows, the state it keeps, batch single panes, the clock."""

from __future__ import annotations

import pickle
import random

import pytest

from sparkbeam.runners.core.grouping.grouping import KeyState, build_grouping_engine
from sparkbeam.runners.core.grouping.grouping_strategies import (
    EndOfWindowGrouping,
    SinglePaneGrouping,
    TriggeredGrouping,
)
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.loop.clock import ManualClock
from sparkbeam.trigger import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    Never,
    OrFinally,
    Repeatedly,
)
from sparkbeam.utils.windowed_value import PaneInfo, WindowedValue
from sparkbeam.window import (
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    TimestampCombiner,
)
from sparkbeam.windowing import Windowing
from tests.core.grouping_harness import (
    ACCUMULATING,
    DISCARDING,
    EARLY,
    LATE,
    MIN,
    ON_TIME,
    Key,
    S,
    SumFn,
    fixed,
    run_batch,
    sessions,
    summary,
)

# ---------------------------------------------------------------------------- merging


def test_sessions_merge_values_holds_and_timers():
    key = Key(sessions(timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST))
    key.add(5)
    key.add(20)
    key.add(12)  # [12, 22) bridges [5, 15) and [20, 30)
    assert list(key.state.windows) == [IntervalWindow(5, 30)]
    assert key.hold() == 5 * S
    assert key.engine.next_timers(key.state)[0] == 30 * S
    assert summary(key.watermark(30)) == [(5, [5, 20, 12], 5 * S, ON_TIME, 0, 0, False)]


def test_merging_resets_pane_indices_of_a_new_window():
    key = Key(sessions(trigger=Repeatedly(AfterCount(1)), accumulation_mode=DISCARDING))
    assert summary(key.add(1))[0][4] == 0
    assert summary(key.add(5)) == [(1, [5], 15 * S - 1, EARLY, 0, -1, False)]  # [1, 15) is new


def test_merging_keeps_pane_indices_when_the_merged_window_is_one_of_the_parts():
    key = Key(sessions(trigger=Repeatedly(AfterCount(1)), accumulation_mode=DISCARDING))
    key.add(1, 5)  # [1, 15)
    assert summary(key.add(2)) == [(1, [2], 15 * S - 1, EARLY, 1, -1, False)]  # [2, 12) inside


def test_a_closed_session_takes_no_part_in_later_merges():
    # Issue 10's case: [0, 11) fires and closes; b at 15 waits in [15, 25); c at 8 joins
    # [15, 25) only (Beam Java removes a closed window from its active set), so b is emitted.
    key = Key(sessions(trigger=AfterCount(2), accumulation_mode=DISCARDING))
    assert [p.value for p in key.add(0, 1)] == [("k", [0, 1])]
    assert key.add(15) == []
    assert summary(key.add(8)) == [(8, [15, 8], 25 * S - 1, EARLY, 0, -1, True)]
    assert key.stats.dropped == 0
    assert key.state.windows[IntervalWindow(0, 11)].closed
    assert key.state.windows[IntervalWindow(8, 25)].closed


def test_a_window_equal_to_a_closed_one_merges_as_a_new_window():
    # Beam Java's testMergingWithClosedDoesNotPoison: [2, 12) is closed; 1, 2 and 3 merge
    # into [1, 13), which is open.
    key = Key(sessions(trigger=AfterCount(1), accumulation_mode=DISCARDING))
    assert len(key.add(2)) == 1
    assert summary(key.add(1, 2, 3)) == [(1, [1, 2, 3], 13 * S - 1, EARLY, 0, -1, True)]
    assert key.stats.dropped == 0


def test_an_element_for_a_closed_session_alone_is_dropped_as_closed():
    key = Key(sessions(trigger=AfterCount(1)))
    key.add(1)  # [1, 11) fires and closes
    assert key.add(1) == []
    assert (key.stats.closed_dropped, key.stats.merged_into_closed_dropped) == (1, 0)


def test_a_merge_into_a_closed_window_keeps_it_closed_and_counts_what_merged():
    # Beam Java's testMergingWithClosedRepresentative, with a buffered part: the merge of
    # [1, 11), [8, 18) and the waiting [2, 12) is [1, 18), which is closed.
    key = Key(sessions(trigger=AfterCount(2), accumulation_mode=DISCARDING, allowed_lateness=100))
    assert [p.value for p in key.add(1, 8)] == [("k", [1, 8])]
    assert key.add(2) == []  # [2, 12) overlaps the closed [1, 18) but stays apart, open
    assert not key.state.windows[IntervalWindow(2, 12)].closed
    assert key.add(1, 8) == []
    assert key.stats.merged_into_closed_dropped == 3  # 2 buffered, 1 and 8 new
    assert key.stats.closed_dropped == 0
    assert list(key.state.windows) == [IntervalWindow(1, 18)]
    assert key.state.windows[IntervalWindow(1, 18)].closed
    assert key.watermark(200) == []
    assert key.stats.dropped == 3 and key.engine.is_empty(key.state)


def test_merging_into_a_closed_window_counts_only_unemitted_contents_when_accumulating():
    key = Key(
        sessions(trigger=OrFinally(Repeatedly(AfterCount(1)), AfterCount(3)), allowed_lateness=100)
    )
    key.add(1, 8)  # [1, 18) fires
    key.add(5, 5)  # and closes: four elements
    assert key.state.windows[IntervalWindow(1, 18)].closed
    key.add(2)  # [2, 12): open; it fires at once and keeps [2] (accumulating)
    key.add(3)  # [2, 13): fires again; nothing is pending after it
    assert key.state.windows[IntervalWindow(2, 13)].pending == 0
    assert key.add(1, 8) == []  # [1, 11), [8, 18) and [2, 13) merge into the closed [1, 18)
    assert key.stats.merged_into_closed_dropped == 2  # 1 and 8; 2 and 3 were emitted


def test_sessions_merge_combine_accumulators():
    key = Key(sessions(), combine_fn=SumFn())
    key.add(1, values=[10])
    key.add(5, values=[32])
    assert [p.value for p in key.watermark(100)] == [("k", 42)]


# ---------------------------------------------------------------------------- state


def test_key_state_pickles_and_the_engine_continues_from_it():
    key = Key(
        fixed(
            trigger=AfterWatermark(early=AfterCount(3)),
            timestamp_combiner=TimestampCombiner.OUTPUT_AT_LATEST,
        )
    )
    key.add(1, 2)
    restored = pickle.loads(pickle.dumps(key.state))
    assert isinstance(restored, KeyState) and restored == key.state
    key.state = restored
    assert summary(key.add(3)) == [(0, [1, 2, 3], 3 * S, EARLY, 0, -1, False)]


def test_next_timers_and_is_empty_track_the_windows():
    key = Key(fixed(allowed_lateness=5))
    assert key.engine.is_empty(key.state)
    assert key.engine.next_timers(key.state) == (None, None)
    key.add(1)
    assert key.engine.next_timers(key.state) == (10 * S, None)
    key.watermark(10)
    assert key.engine.next_timers(key.state) == (15 * S, None)  # GC: 14.999999 s + 1 µs
    key.watermark(15)
    assert key.engine.is_empty(key.state)


def regrouping_in_the_global_window(**engine_options) -> Key:
    """Reshuffle's windowing: the global window, a pane per bundle, discarding, EARLIEST."""
    windowing = Windowing(
        GlobalWindows(), Always(), DISCARDING, TimestampCombiner.OUTPUT_AT_EARLIEST
    )
    return Key(windowing, **engine_options)


def test_a_fired_window_keeps_its_pane_index_until_it_expires():
    key = regrouping_in_the_global_window()
    (first,) = key.add(1)
    key.watermark(5)
    assert not key.engine.is_empty(key.state)  # the global window never expires
    (second,) = key.add(7)
    assert (first.pane_info.index, second.pane_info.index) == (0, 1)
    assert not second.pane_info.is_first


def test_without_pane_indices_a_key_whose_windows_all_fired_keeps_no_state():
    key = regrouping_in_the_global_window(keep_pane_indices=False)
    (first,) = key.add(1, 2)
    assert first.value == ("k", [1, 2]) and first.timestamp_micros == 1 * S
    assert key.watermark(5) == []
    assert key.engine.is_empty(key.state)
    (second,) = key.add(7)
    assert second.value == ("k", [7]) and second.timestamp_micros == 7 * S
    key.watermark(8)
    assert key.engine.is_empty(key.state)


@pytest.mark.parametrize(
    "windowing",
    [
        # contents kept for the next pane
        fixed(trigger=Repeatedly(AfterCount(1)), accumulation_mode=ACCUMULATING),
        # an end-of-window timer still to fire
        fixed(trigger=AfterWatermark(early=AfterCount(1))),
        # a closed window must count what comes for it until it expires
        fixed(trigger=AfterCount(1)),
        # a session that may still merge
        Windowing(Sessions(10), Repeatedly(AfterCount(1))),
    ],
    ids=["accumulating", "timer", "closed", "sessions"],
)
def test_windows_that_still_hold_something_are_kept_without_pane_indices(windowing):
    key = Key(windowing, keep_pane_indices=False)
    assert len(key.add(1)) == 1
    key.watermark(2)
    assert not key.engine.is_empty(key.state)


@pytest.mark.parametrize(
    "windowing",
    [
        fixed(allowed_lateness=5),
        fixed(trigger=AfterCount(1)),  # closed after its pane: kept until it expires
        fixed(trigger=Repeatedly(AfterCount(2)), accumulation_mode=ACCUMULATING),
        fixed(trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)), allowed_lateness=20),
        Windowing(Sessions(10), Repeatedly(AfterCount(1))),
        Windowing(SlidingWindows(10, 5), AfterProcessingTime(5)),
    ],
    ids=[
        "default",
        "closed",
        "repeated-accumulating",
        "early-and-late",
        "sessions",
        "sliding-processing-time",
    ],
)
def test_a_key_whose_windows_all_expired_keeps_no_state(windowing):
    key = Key(windowing)
    key.add(1, 3, 12)
    key.clock.set(6 * S)
    key.watermark(15)
    key.add(14, 16)
    key.watermark(100)
    assert key.engine.is_empty(key.state)


def test_the_default_trigger_fast_path_matches_the_trigger_machine():
    rng = random.Random(7)
    for _ in range(50):
        windowing = fixed(
            allowed_lateness=rng.choice([0, 5]),
            timestamp_combiner=rng.choice(list(TimestampCombiner)[:3]),
            accumulation_mode=rng.choice([DISCARDING, ACCUMULATING]),
        )
        fast, general = Key(windowing), Key(windowing)
        assert isinstance(fast.engine, EndOfWindowGrouping)
        general.engine = TriggeredGrouping(
            windowing, windowing.triggerfn, HoldPolicy(windowing), None
        )
        watermark = 0.0
        for _step in range(6):
            if rng.random() < 0.5:
                stamps = [rng.randint(0, 40) for _ in range(3)]
                assert summary(fast.add(*stamps)) == summary(general.add(*stamps))
            else:
                watermark += rng.randint(1, 15)
                assert summary(fast.watermark(watermark)) == summary(general.watermark(watermark))
            assert fast.engine.next_timers(fast.state) == general.engine.next_timers(general.state)
            assert fast.hold() == general.hold()
            assert fast.stats == general.stats


@pytest.mark.parametrize(
    ("windowing", "batch", "strategy"),
    [
        (Windowing(FixedWindows(10)), False, EndOfWindowGrouping),
        (Windowing(FixedWindows(10)), True, EndOfWindowGrouping),
        (Windowing(SlidingWindows(10, 5)), False, EndOfWindowGrouping),
        (Windowing(Sessions(10)), False, TriggeredGrouping),
        (
            Windowing(FixedWindows(10), triggerfn=Repeatedly(AfterCount(2))),
            False,
            TriggeredGrouping,
        ),
        (Windowing(FixedWindows(10), triggerfn=Never()), True, TriggeredGrouping),
        (Windowing(), False, EndOfWindowGrouping),
        (Windowing(), True, SinglePaneGrouping),
        (Windowing(GlobalWindows(), triggerfn=AfterCount(1)), True, SinglePaneGrouping),
        (Windowing(GlobalWindows(), triggerfn=Never()), True, SinglePaneGrouping),
        (Windowing(GlobalWindows(), triggerfn=AfterCount(1)), False, TriggeredGrouping),
    ],
)
def test_the_strategy_is_chosen_once_from_the_windowing_and_the_batch_flag(
    windowing, batch, strategy
):
    engine = build_grouping_engine(windowing, batch=batch)
    assert type(engine) is strategy


# ---------------------------------------------------------------------------- batch


def test_batch_default_windowing_gives_one_pane_per_key_at_the_end_of_the_global_window():
    (pane,) = run_batch(Windowing(), 3, 1, 2)
    assert pane == WindowedValue(
        ("k", [3, 1, 2]),
        GlobalWindow().max_timestamp().micros,
        (GlobalWindow(),),
        PaneInfo(True, True, ON_TIME, 0, 0),
    )


@pytest.mark.parametrize("trigger", [AfterCount(1), Always(), Never()])
def test_batch_global_window_firing_per_element_gives_one_pane_at_the_start_of_time(trigger):
    (pane,) = run_batch(Windowing(GlobalWindows(), trigger, ACCUMULATING), 3, 1)
    assert (pane.value, pane.timestamp_micros, pane.pane_info) == (
        ("k", [3, 1]),
        MIN,
        PaneInfo(True, True, ON_TIME, 0, 0),
    )


def test_batch_never_fires_once_as_always_in_fixed_windows():
    panes = run_batch(fixed(trigger=Never(), accumulation_mode=ACCUMULATING), 1, 2, 15)
    assert summary(panes) == [
        (0, [1, 2], 10 * S - 1, EARLY, 0, -1, False),
        (10, [15], 20 * S - 1, EARLY, 0, -1, False),
    ]


def test_batch_general_engine_keeps_count_based_early_panes():
    trigger = AfterWatermark(early=AfterCount(2))
    panes = run_batch(fixed(trigger=trigger, accumulation_mode=ACCUMULATING), 1, 2, 3)
    assert summary(panes) == [
        (0, [1, 2, 3], 10 * S - 1, EARLY, 0, -1, False),
        (0, [1, 2, 3], 10 * S - 1, ON_TIME, 1, 0, True),
    ]


def test_batch_combines_with_a_combine_fn():
    (pane,) = run_batch(Windowing(), 3, 1, 2, combine_fn=SumFn())
    assert pane.value == ("k", 6)


def test_batch_processing_time_triggers_fire_at_the_final_clock():
    panes = run_batch(fixed(trigger=AfterProcessingTime(60), accumulation_mode=ACCUMULATING), 1)
    assert summary(panes) == [(0, [1], 10 * S - 1, LATE, 0, 0, True)]


# ---------------------------------------------------------------------------- clock


def test_manual_clock_moves_only_forward_and_only_in_microseconds():
    clock = ManualClock(start_micros=5)
    clock.advance(10)
    clock.set(20)
    assert clock.now_micros() == 20
    with pytest.raises(ValueError, match="backwards"):
        clock.set(19)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(TypeError, match="integer microseconds"):
        clock.advance(1.5)


def test_wall_clock_reads_the_system_clock():
    import time

    from sparkbeam.runners.core.loop.clock import Clock, WallClock

    clock = WallClock()
    assert isinstance(clock, Clock)
    assert abs(clock.now_micros() - time.time_ns() // 1000) < 10 * S
