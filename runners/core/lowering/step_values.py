"""What a step ships to a stage's workers and what they report back, and the rule that
tells a keyed step with no new elements changes nothing (``nothing_due``): plain values
every room that runs a step shares, below the step loop that fills them in."""

from __future__ import annotations

from typing import Protocol

import attrs

__all__ = ["StageSummary", "StepParams", "TimersReport", "nothing_due"]


@attrs.frozen
class StepParams:
    """What a stage's workers need to know about the step (it is shipped to them)."""

    step: int
    old_input_watermark: int
    new_input_watermark: int
    output_watermark: int  # the stage's output watermark before this step
    now: int
    batch: bool
    #: (side-input PCollection, output watermark of the stage producing it) for each side
    #: input the stage reads: whether a side input is ready for a window (streaming only)
    side_input_watermarks: tuple[tuple[int, int], ...] = ()


@attrs.define
class StageSummary:
    """What a stage reports for one step (summed over partitions)."""

    elements_in: int = 0
    elements_out: int = 0
    # (element, window) pairs dropped, by reason (runners/core/grouping/drops.py)
    late_dropped: int = 0
    closed_dropped: int = 0
    earliest_hold: int | None = None
    hold_key: str | None = None
    hold_window: str | None = None
    next_event_timer: int | None = None
    next_processing_timer: int | None = None
    state_keys: int = 0
    state_windows: int = 0
    dead_letters: int = 0
    merged_into_closed_dropped: int = 0
    expired_state_dropped: int = 0
    #: main-input elements (per window) parked until their side input is ready
    side_input_waiting: int = 0
    #: records that crossed a grouping's shuffle: its elements, or fewer when its combine
    #: was lifted before the shuffle (runners/core/grouping/lifting.py)
    records_shuffled: int = 0

    def merge(self, other: StageSummary) -> StageSummary:
        hold_from_other = other.earliest_hold is not None and (
            self.earliest_hold is None or other.earliest_hold < self.earliest_hold
        )
        return StageSummary(
            elements_in=self.elements_in + other.elements_in,
            elements_out=self.elements_out + other.elements_out,
            late_dropped=self.late_dropped + other.late_dropped,
            closed_dropped=self.closed_dropped + other.closed_dropped,
            earliest_hold=other.earliest_hold if hold_from_other else self.earliest_hold,
            hold_key=other.hold_key if hold_from_other else self.hold_key,
            hold_window=other.hold_window if hold_from_other else self.hold_window,
            next_event_timer=_min_optional(self.next_event_timer, other.next_event_timer),
            next_processing_timer=_min_optional(self.next_processing_timer, other.next_processing_timer),
            state_keys=self.state_keys + other.state_keys,
            state_windows=self.state_windows + other.state_windows,
            dead_letters=self.dead_letters + other.dead_letters,
            merged_into_closed_dropped=self.merged_into_closed_dropped + other.merged_into_closed_dropped,
            expired_state_dropped=self.expired_state_dropped + other.expired_state_dropped,
            side_input_waiting=self.side_input_waiting + other.side_input_waiting,
            records_shuffled=self.records_shuffled + other.records_shuffled,
        )

    @staticmethod
    def carried(previous: StageSummary | None) -> StageSummary:
        """The summary of a step a stage skipped (``Strategy.SKIP_IDLE``): ``previous``'s,
        its holds and timers standing, its counts zero."""
        return (previous or StageSummary()).for_idle_step()

    def for_idle_step(self) -> StageSummary:
        """This summary carried into a step where the stage did nothing: its holds and
        timers stand, its per-step counts are zero."""
        return attrs.evolve(
            self,
            elements_in=0,
            elements_out=0,
            late_dropped=0,
            closed_dropped=0,
            merged_into_closed_dropped=0,
            expired_state_dropped=0,
            records_shuffled=0,
        )


def _min_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)



class TimersReport(Protocol):
    """What ``nothing_due`` reads of a report: a stage's last summary, or a state bucket's
    header (``keyed_buckets.py``)."""

    @property
    def next_event_timer(self) -> int | None: ...
    @property
    def next_processing_timer(self) -> int | None: ...
    @property
    def state_keys(self) -> int: ...


def nothing_due(previous: TimersReport | None, params: StepParams, *, has_state: bool, side_inputs: bool) -> bool:
    """Whether a keyed step (a grouping or a stateful DoFn) with no new elements would change
    nothing: no processing-time timer is due, and the input watermark stands still or moves
    without reaching the earliest event-time timer of its state (the end-of-window, trigger,
    user-timer and garbage-collection times the engine and the stateful step report as
    ``next_event_timer``), or there is no state at all. A stage that reads side inputs runs
    whenever its watermark moves, since a side input's window may have become ready and
    released parked elements. Such a step is skipped: no job, the state carried as it is."""
    if previous is not None and previous.next_processing_timer is not None and previous.next_processing_timer <= params.now:
        return False
    if params.new_input_watermark == params.old_input_watermark:
        return True
    if side_inputs:
        return False
    if not has_state:
        return True
    if previous is None:
        return False
    if previous.next_event_timer is None:
        return previous.state_keys == 0
    return params.new_input_watermark < previous.next_event_timer
