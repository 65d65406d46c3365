"""Trigger state machines alone: one window's cell, explicit watermarks and clock."""

from __future__ import annotations

import pickle

import pytest

from sparkbeam.runners.core.grouping.triggers import (
    TimeDomain,
    TriggerCell,
    TriggerContext,
    build_trigger_machine,
    merge_trigger_cells,
)
from sparkbeam.trigger import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DefaultTrigger,
    Never,
    OrFinally,
    Repeatedly,
    TriggerFn,
    _AfterSynchronizedProcessingTime,
)
from sparkbeam.window import IntervalWindow

S = 1_000_000  # one second in microseconds
EVENT = TimeDomain.EVENT_TIME
PROCESSING = TimeDomain.PROCESSING_TIME
WINDOW = IntervalWindow(0, 10)  # ends at 10 s
BEFORE_END = 5 * S
AT_END = 10 * S


class Window:
    """One window's trigger under test: a machine, a cell, a context."""

    def __init__(self, spec: TriggerFn, window: IntervalWindow = WINDOW, now: int = 0) -> None:
        self.machine = build_trigger_machine(spec)
        self.cell = TriggerCell()
        self.window = window
        self.now = now

    @property
    def ctx(self) -> TriggerContext:
        return TriggerContext(self.cell, self.window, self.now)

    def elements(self, count: int = 1) -> None:
        self.machine.on_element(self.ctx, count)

    def should_fire(self, watermark: int, domain: TimeDomain = EVENT) -> bool:
        return self.machine.should_fire(self.ctx, domain, watermark)

    def fire(self, watermark: int, domain: TimeDomain = EVENT) -> bool:
        """should_fire then on_fire; returns finished (fails if it would not fire)."""
        ctx = self.ctx
        assert self.machine.should_fire(ctx, domain, watermark)
        return self.machine.on_fire(ctx, domain, watermark)

    @property
    def timers(self) -> dict[str, int]:
        return dict(self.cell.timers or {})


def test_after_count_fires_once_count_is_reached_and_finishes():
    window = Window(AfterCount(3))
    window.elements(2)
    assert not window.should_fire(BEFORE_END)
    window.elements(1)
    assert window.fire(BEFORE_END) is True


def test_default_trigger_sets_a_timer_at_the_window_end_and_fires_there():
    window = Window(DefaultTrigger())
    window.elements()
    assert window.timers == {"e|": AT_END}
    assert not window.should_fire(AT_END - 1)
    assert window.fire(AT_END) is False  # never finishes
    assert window.timers == {}  # cleared by should_fire, so a late element fires once


def test_after_watermark_switches_to_its_late_trigger_after_the_on_time_firing():
    window = Window(AfterWatermark(late=AfterCount(2)))
    window.elements()
    assert window.fire(AT_END) is False
    assert window.cell.trigger_state == {"is_late": True}
    window.elements()  # late: goes to the late trigger, sets no end-of-window timer
    assert not window.should_fire(AT_END + S)
    assert window.timers == {}
    window.elements()
    assert window.fire(AT_END + S) is False  # Repeatedly(AfterCount(2)) never finishes
    assert window.cell.trigger_state == {"is_late": True}  # the late count was reset


def test_after_watermark_without_late_trigger_finishes_with_the_on_time_pane():
    window = Window(AfterWatermark())
    window.elements()
    assert window.fire(AT_END) is True


def test_after_watermark_early_trigger_fires_before_the_end_and_restarts():
    window = Window(AfterWatermark(early=AfterCount(2)))
    window.elements(2)
    assert window.fire(BEFORE_END) is False
    assert window.cell.trigger_state == {}  # the early count restarts
    window.elements(1)
    assert not window.should_fire(BEFORE_END)
    assert window.timers == {"e|": AT_END}


def test_after_processing_time_is_due_delay_after_the_first_element():
    window = Window(AfterProcessingTime(5), now=2 * S)
    window.elements()
    window.now = 4 * S
    window.elements()  # the deadline stays at the first element's
    assert window.timers == {"p|": 7 * S}
    assert not window.should_fire(BEFORE_END, PROCESSING)
    window.now = 7 * S
    assert window.fire(BEFORE_END, PROCESSING) is True


def test_repeated_after_processing_time_starts_a_new_deadline_after_firing():
    window = Window(Repeatedly(AfterProcessingTime(5)))
    window.elements()
    window.now = 5 * S
    assert window.fire(BEFORE_END, PROCESSING) is False
    assert window.timers == {} and not window.cell.trigger_state
    window.elements()
    assert window.timers == {"p|": 10 * S}


def test_after_any_finishes_when_a_firing_subtrigger_finishes():
    window = Window(AfterAny(AfterCount(2), AfterWatermark()))
    window.elements(2)
    assert window.fire(BEFORE_END) is True


def test_after_all_fires_only_when_every_subtrigger_would():
    window = Window(AfterAll(AfterCount(2), AfterWatermark()))
    window.elements(2)
    assert not window.should_fire(BEFORE_END)
    assert window.fire(AT_END) is True


def test_after_each_runs_subtriggers_in_sequence():
    window = Window(AfterEach(AfterCount(1), AfterCount(2)))
    window.elements(5)  # all go to the first subtrigger
    assert window.fire(BEFORE_END) is False
    assert window.cell.trigger_state["index"] == 1
    window.elements()
    assert not window.should_fire(BEFORE_END)  # the second counts afresh
    window.elements()
    assert window.fire(BEFORE_END) is True


def test_or_finally_finishes_when_its_processing_time_until_fires():
    # Beam Python asks subtriggers again in event time inside on_fire, so its
    # AfterProcessingTime never finishes there; ours is asked in the firing's domain.
    window = Window(OrFinally(Repeatedly(AfterCount(5)), AfterProcessingTime(10)))
    window.elements()
    window.now = 10 * S
    assert window.fire(BEFORE_END, PROCESSING) is True


def test_a_processing_time_subtrigger_is_not_due_because_a_sibling_is():
    window = Window(AfterAll(AfterProcessingTime(5), AfterProcessingTime(10)))
    window.elements()
    window.now = 5 * S
    assert not window.should_fire(BEFORE_END, PROCESSING)
    window.now = 10 * S
    assert window.fire(BEFORE_END, PROCESSING) is True


@pytest.mark.parametrize("spec", [Always(), _AfterSynchronizedProcessingTime()])
def test_always_fires_on_every_evaluation_and_never_finishes(spec):
    window = Window(spec)
    assert window.fire(BEFORE_END) is False
    assert window.fire(BEFORE_END) is False


def test_never_never_fires():
    window = Window(Never())
    window.elements(100)
    assert not window.should_fire(AT_END)
    assert not window.should_fire(AT_END, PROCESSING)


def test_nested_triggers_keep_their_state_apart():
    window = Window(AfterAll(AfterCount(2), Repeatedly(AfterCount(3))))
    window.elements(1)
    assert window.cell.trigger_state == {"0/count": 1, "1/count": 1}


def test_merging_adds_counts_ors_lateness_and_keeps_the_earliest_timer():
    machine = build_trigger_machine(AfterWatermark(early=AfterCount(3), late=AfterCount(2)))
    parts = [
        TriggerCell({"early/count": 1}, {"e|": 11 * S}),
        TriggerCell({"early/count": 1, "is_late": False}, {"e|": 15 * S}),
    ]
    merged = TriggerCell()
    merge_trigger_cells(machine, parts, merged)
    assert merged.trigger_state == {"early/count": 2, "is_late": False}
    assert merged.timers == {"e|": 11 * S}


def test_after_watermark_merge_drops_a_timer_whose_window_end_moved():
    machine = build_trigger_machine(AfterWatermark())
    merged_window = IntervalWindow(1, 15)
    merged = TriggerCell(None, {"e|": 11 * S})
    machine.on_merge(TriggerContext(merged, merged_window, 0), [IntervalWindow(1, 11), merged_window])
    assert merged.timers == {}


def test_after_each_index_merges_to_the_furthest_part():
    machine = build_trigger_machine(AfterEach(AfterCount(1), AfterCount(1), AfterCount(1)))
    merged = TriggerCell()
    merge_trigger_cells(machine, [TriggerCell({"index": 2}), TriggerCell({"index": 1})], merged)
    assert merged.trigger_state == {"index": 2}


def test_merging_state_the_trigger_does_not_know_is_an_error():
    machine = build_trigger_machine(AfterCount(2))
    with pytest.raises(RuntimeError, match="no merge rule"):
        merge_trigger_cells(machine, [TriggerCell({"is_late": True}), TriggerCell()], TriggerCell())


def test_an_unknown_trigger_spec_is_rejected_by_name():
    class Custom(AfterCount):
        pass

    with pytest.raises(TypeError, match="no trigger state machine for"):
        build_trigger_machine(Custom(2))


def test_machines_and_cells_pickle():
    machine = build_trigger_machine(AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)))
    window = Window(AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)))
    window.elements()
    assert pickle.loads(pickle.dumps(window.cell)) == window.cell
    assert repr(pickle.loads(pickle.dumps(machine))) == repr(machine)
