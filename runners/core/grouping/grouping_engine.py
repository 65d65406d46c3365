"""What every grouping strategy shares: the per-key interface and the windowed pieces.

``GroupingEngine`` is the interface a runner drives (``grouping_step.py``): one call per key
and step to add elements, one to fire timers and collect garbage, and two questions for the
stage's summary (the key's earliest hold, its next timers). ``WindowedGrouping`` holds what
the streaming strategies share: bucketing a bundle per window (dropping, and counting, the
windows already behind their GC time), adding values to a window's contents with its hold,
emitting a pane, garbage collection with its final pane, forgetting spent windows. Holds and
timestamps are decided by ``holds.py``, drops counted through ``drops.py``.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Iterable
from typing import Any

import attrs

from sparkbeam.combine import CombineFn, accumulator_from
from sparkbeam.runners.core.grouping.drops import DropReason, GroupingStats
from sparkbeam.runners.core.grouping.holds import HoldPolicy, last_instant
from sparkbeam.runners.core.grouping.keys import user_key
from sparkbeam.runners.core.grouping.merging import Buckets
from sparkbeam.runners.core.grouping.records import Partial
from sparkbeam.runners.core.grouping.window_state import KeyState, WindowState
from sparkbeam.trigger import AccumulationMode, TriggerFn
from sparkbeam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue
from sparkbeam.window import BoundedWindow, IntervalWindow, window_sort_key
from sparkbeam.windowing import Windowing

__all__ = ["Arrival", "GroupingEngine", "WindowedGrouping"]

_EARLY = PaneInfoTiming.EARLY
_ON_TIME = PaneInfoTiming.ON_TIME
_LATE = PaneInfoTiming.LATE
# A bucket marker for a window whose elements are all behind its GC time.
_EXPIRED: tuple[list[Any], list[int] | None, Any] = ([], None, None)


@functools.lru_cache(maxsize=4096)
def _pane(is_first: bool, is_last: bool, timing: PaneInfoTiming, index: int, nonspeculative: int) -> PaneInfo:
    return PaneInfo(is_first, is_last, timing, index, nonspeculative)


@attrs.define(slots=True)
class Arrival:
    """A bundle's lifted partials for one window: their accumulators, element count and
    combined hold (``lifting.py``)."""

    accumulators: list[Any]
    count: int
    hold: int | None
    unheld: bool


class GroupingEngine(abc.ABC):
    """Groups one key's elements per window and decides when panes fire.

    Built once per stage by ``grouping.build_grouping_engine``, which picks the strategy
    for the windowing; the runner keeps one ``KeyState`` per key and calls, per step, the
    key's ``add_elements`` (at the input watermark as it was) and then ``fire_timers`` (at
    the new input watermark and the step's clock).
    """

    def __init__(
        self,
        windowing: Windowing,
        trigger: TriggerFn,
        holds: HoldPolicy,
        combine_fn: CombineFn | None,
    ) -> None:
        self.windowing = windowing
        #: the trigger this grouping runs (a batch grouping runs ``Never`` as ``Always``)
        self.trigger = trigger
        self.holds = holds
        self.combine_fn = combine_fn
        self._discarding = windowing.accumulation_mode is AccumulationMode.DISCARDING

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.windowing!r})"

    def new_key_state(self) -> KeyState:
        """Empty state for a key seen for the first time."""
        return KeyState()

    def is_empty(self, state: KeyState) -> bool:
        """Whether the key holds no window state (the runner may drop it)."""
        return not state.windows

    @abc.abstractmethod
    def add_elements(
        self,
        state: KeyState,
        key: Any,
        elements: Iterable[WindowedValue],
        *,
        input_watermark: int,
        output_watermark: int,
        now: int,
        stats: GroupingStats,
    ) -> list[WindowedValue]:
        """Add one bundle of ``key``'s elements; return the panes that element-driven
        triggers fire. Each window's trigger is evaluated once, after all of its elements
        are in, at ``input_watermark``."""

    @abc.abstractmethod
    def add_partials(
        self,
        state: KeyState,
        key: Any,
        partials: Iterable[Partial],
        *,
        input_watermark: int,
        output_watermark: int,
        now: int,
        stats: GroupingStats,
    ) -> list[WindowedValue]:
        """``add_elements`` for a bundle combined before the shuffle (``lifting.py``): each
        partial stands for ``count`` elements of its window, its hold already judged
        against ``output_watermark``. The panes are those the elements would fire."""

    @abc.abstractmethod
    def fire_timers(
        self,
        state: KeyState,
        key: Any,
        *,
        input_watermark: int,
        now: int,
        stats: GroupingStats,
        output_watermark: int | None = None,
    ) -> list[WindowedValue]:
        """Fire the event-time timers ``input_watermark`` has reached and the
        processing-time timers ``now`` has reached (each set in time order, event time
        first), then garbage-collect the windows whose GC time is behind
        ``input_watermark``: a final pane if data is pending, then all their state goes.

        ``output_watermark`` is the stage's output watermark before this step: a final
        pane at GC is ON_TIME only if downstream will not see it late (as Beam Java)."""

    @abc.abstractmethod
    def earliest_hold(self, state: KeyState) -> tuple[int, BoundedWindow] | None:
        """The earliest watermark hold of this key, with the window that sets it."""

    @abc.abstractmethod
    def next_timers(self, state: KeyState) -> tuple[int | None, int | None]:
        """The earliest pending event-time and processing-time timers of this key.

        An event-time timer at ``t`` is due once the input watermark is ``>= t``; window
        garbage collection counts as one (at GC time + 1µs). A processing-time timer is due
        once the clock is ``>= t``.
        """

    # ------------------------------------------------------------------ contents

    def _add_contents(self, window_state: WindowState, values: list[Any]) -> None:
        combine_fn = self.combine_fn
        if combine_fn is None:
            if window_state.contents is None:
                window_state.contents = values  # the bucket is ours to keep
            else:
                window_state.contents.extend(values)
            return
        accumulator = window_state.contents
        if accumulator is None:
            accumulator = combine_fn.create_accumulator()
        added = accumulator_from(combine_fn, "add_inputs", combine_fn.add_inputs(accumulator, values), accumulator)
        window_state.contents = combine_fn.compact(added)  # kept: see _add_accumulators

    def _add_accumulators(self, window_state: WindowState, accumulators: list[Any]) -> None:
        """Merge lifted accumulators into a window's contents (a combining grouping only)."""
        combine_fn = self.combine_fn
        if combine_fn is None:
            msg = "partials reached a grouping without a CombineFn; only a combine is lifted"
            raise TypeError(msg)
        if window_state.contents is not None:
            accumulators = [window_state.contents, *accumulators]
        if len(accumulators) == 1:
            window_state.contents = accumulators[0]
        else:
            merged = accumulator_from(combine_fn, "merge_accumulators", combine_fn.merge_accumulators(accumulators), accumulators)
            # What the state keeps is pickled between steps: compacted first, as Beam's runners
            # compact an accumulator before it is encoded (Beam's TopCombineFn with a key holds
            # comparables that lose their key function when pickled and must be compacted).
            window_state.contents = combine_fn.compact(merged)

    def _payload(self, contents: Any, keep: bool) -> Any:
        """A pane's value from a window's contents: the grouped values (a copy when the
        window keeps them), or the combiner's output."""
        combine_fn = self.combine_fn
        if combine_fn is None:
            if contents is None:
                return []
            return list(contents) if keep else contents
        accumulator = combine_fn.create_accumulator() if contents is None else contents
        return combine_fn.extract_output(accumulator)


class WindowedGrouping(GroupingEngine):
    """The pieces of a grouping that keeps per-window state between steps.

    A window's state goes when the watermark passes its GC time, and a key's with its last
    window. Until then a window whose panes all fired still keeps its pane indices, which
    later panes continue (Beam's pane info); nothing else of it is left. With
    ``keep_pane_indices=False`` (a grouping whose output panes nobody sees, as Reshuffle's)
    such a spent window is forgotten at once, so a key whose windows all fired leaves no
    state: a regrouping in the global window, which never expires, would otherwise keep
    one entry per key for ever.
    """

    def __init__(
        self,
        windowing: Windowing,
        trigger: TriggerFn,
        holds: HoldPolicy,
        combine_fn: CombineFn | None,
        *,
        keep_pane_indices: bool = True,
    ) -> None:
        super().__init__(windowing, trigger, holds, combine_fn)
        # A spent window of a merging WindowFn still shapes later merges, so it stays.
        self._forget_spent_windows = not keep_pane_indices and not windowing.windowfn.is_merging()

    # ------------------------------------------------------------------ the interface

    def fire_timers(
        self,
        state: KeyState,
        key: Any,
        *,
        input_watermark: int,
        now: int,
        stats: GroupingStats,
        output_watermark: int | None = None,
    ) -> list[WindowedValue]:
        fired: list[WindowedValue] = []
        self._fire_due(state, key, input_watermark, now, fired, stats)
        self._collect_garbage(state, key, input_watermark, output_watermark, fired, stats)
        if self._forget_spent_windows:
            self._forget_spent(state)
        return fired

    def earliest_hold(self, state: KeyState) -> tuple[int, BoundedWindow] | None:
        """Holds are the timestamp-combiner holds of pending panes and, for windows with
        late data pending, the GC hold at their GC time. Pending end-of-window timers need
        no hold: they fire when the input watermark reaches the window's end, and until
        then the output watermark is before the ``max_timestamp()`` their pane may carry.
        """
        best: int | None = None
        best_window: BoundedWindow | None = None
        window_hold = self.holds.window_hold
        for window, window_state in state.windows.items():
            hold = window_hold(window, window_state.hold, window_state.gc_hold)
            if hold is not None and (best is None or hold < best):
                best, best_window = hold, window
        if best is None or best_window is None:
            return None
        return best, best_window

    def next_timers(self, state: KeyState) -> tuple[int | None, int | None]:
        event: int | None = None
        processing: int | None = None
        gc_time = self.holds.gc_time
        window_timers = self._window_timers
        for window, window_state in state.windows.items():
            due = gc_time(window) + 1
            window_event, window_processing = window_timers(window, window_state)
            if window_event is not None and window_event < due:
                due = window_event
            if window_processing is not None and (processing is None or window_processing < processing):
                processing = window_processing
            if event is None or due < event:
                event = due
        return event, processing

    def add_partials(
        self,
        state: KeyState,
        key: Any,
        partials: Iterable[Partial],
        *,
        input_watermark: int,
        output_watermark: int,
        now: int,
        stats: GroupingStats,
    ) -> list[WindowedValue]:
        by_window = self._bucket_partials(partials, input_watermark, stats)
        if not by_window:
            return []
        by_window = self._merge_partial_windows(state, by_window, now, stats)
        fired: list[WindowedValue] = []
        for window, arrival in by_window.items():
            window_state = self._admit_partial(state, window, arrival, output_watermark, stats)
            if window_state is not None:
                self._arrived(state, key, window, window_state, arrival.count, input_watermark, now, fired, stats)
        return fired

    # ------------------------------------------------------------------ what strategies add

    @abc.abstractmethod
    def _arrived(
        self,
        state: KeyState,
        key: Any,
        window: BoundedWindow,
        window_state: WindowState,
        count: int,
        input_watermark: int,
        now: int,
        fired: list[WindowedValue],
        stats: GroupingStats,
    ) -> None:
        """``count`` elements of one bundle are in ``window``: fire what they call for."""

    def _merge_partial_windows(
        self, state: KeyState, by_window: dict[BoundedWindow, Arrival], now: int, stats: GroupingStats
    ) -> dict[BoundedWindow, Arrival]:
        """Lifted partials per window after merging windows (only a merging strategy merges)."""
        return by_window

    @abc.abstractmethod
    def _fire_due(
        self,
        state: KeyState,
        key: Any,
        input_watermark: int,
        now: int,
        fired: list[WindowedValue],
        stats: GroupingStats,
    ) -> None:
        """Fire the panes the input watermark and the clock call for (before GC)."""

    @abc.abstractmethod
    def _window_timers(self, window: BoundedWindow, window_state: WindowState) -> tuple[int | None, int | None]:
        """The window's earliest pending event-time and processing-time timers."""

    # ------------------------------------------------------------------ adding elements

    def _bucket(
        self, elements: Iterable[WindowedValue], input_watermark: int, stats: GroupingStats
    ) -> Buckets:
        """Values (and, when the combiner needs them, timestamps) per window, first-seen
        order, without the windows already behind their GC time (dropped as late)."""
        # Interval windows are bucketed by their (start, end) integers: hashing and
        # comparing the window objects costs Python-level calls per element.
        buckets: dict[Any, tuple[list[Any], list[int] | None, BoundedWindow]] = {}
        need_timestamps = not self.holds.depends_only_on_window
        gc_time = self.holds.gc_time
        expired = 0
        interval_window = IntervalWindow
        for value, timestamp, windows, _pane_info in elements:
            for window in windows:
                if type(window) is interval_window:
                    bucket_key: Any = (window.start.micros, window.end.micros)
                else:
                    bucket_key = window
                bucket = buckets.get(bucket_key)
                if bucket is None:
                    if gc_time(window) < input_watermark:
                        bucket = _EXPIRED
                    else:
                        bucket = ([], [] if need_timestamps else None, window)
                    buckets[bucket_key] = bucket
                if bucket is _EXPIRED:
                    expired += 1
                    continue
                bucket[0].append(value)
                if need_timestamps:
                    bucket[1].append(timestamp)  # type: ignore[union-attr]
        stats.discard(DropReason.LATE, expired)
        return {
            bucket[2]: (bucket[0], bucket[1]) for bucket in buckets.values() if bucket is not _EXPIRED
        }

    def _bucket_partials(
        self, partials: Iterable[Partial], input_watermark: int, stats: GroupingStats
    ) -> dict[BoundedWindow, Arrival]:
        """Partials per window, first-seen order, without the windows already behind
        their GC time (their elements dropped as late, by count)."""
        arrivals: dict[BoundedWindow, Arrival] = {}
        gc_time = self.holds.gc_time
        combine = self.holds.combine
        expired = 0
        for partial in partials:
            window = partial.window
            arrival = arrivals.get(window)
            if arrival is None:
                if gc_time(window) < input_watermark:
                    expired += partial.count
                    continue
                arrivals[window] = Arrival([partial.accumulator], partial.count, partial.hold, partial.unheld)
                continue
            arrival.accumulators.append(partial.accumulator)
            arrival.count += partial.count
            arrival.hold = combine(arrival.hold, partial.hold)
            arrival.unheld = arrival.unheld or partial.unheld
        stats.discard(DropReason.LATE, expired)
        return arrivals

    def _admit_partial(
        self, state: KeyState, window: BoundedWindow, arrival: Arrival, output_watermark: int, stats: GroupingStats
    ) -> WindowState | None:
        """``_admit`` for lifted partials: their hold was judged before the shuffle, except
        under END_OF_WINDOW, where it is the (maybe merged) window's end and judged here."""
        windows = state.windows
        window_state = windows.get(window)
        if window_state is None:
            window_state = windows[window] = WindowState()
        elif window_state.closed:
            stats.discard(DropReason.CLOSED_WINDOW, arrival.count)
            return None
        holds = self.holds
        if holds.depends_only_on_window:
            hold, unheld = holds.element_hold(window, (), output_watermark)
        else:
            hold, unheld = arrival.hold, arrival.unheld
        if hold is not None:
            window_state.hold = holds.combine(window_state.hold, hold)
        if unheld:
            window_state.gc_hold = True
        self._add_accumulators(window_state, arrival.accumulators)
        window_state.pending += arrival.count
        return window_state

    def _admit(
        self,
        state: KeyState,
        window: BoundedWindow,
        values: list[Any],
        timestamps: list[int] | None,
        output_watermark: int,
        stats: GroupingStats,
    ) -> WindowState | None:
        """Add a bundle's values for ``window`` with their hold; ``None`` (the values
        dropped and counted) when the window's trigger has finished."""
        windows = state.windows
        window_state = windows.get(window)
        if window_state is None:
            window_state = windows[window] = WindowState()
        elif window_state.closed:
            stats.discard(DropReason.CLOSED_WINDOW, len(values))
            return None
        holds = self.holds
        hold, unheld = holds.element_hold(window, timestamps or (), output_watermark)
        if hold is not None:
            window_state.hold = holds.combine(window_state.hold, hold)
        if unheld:
            window_state.gc_hold = True
        self._add_contents(window_state, values)
        window_state.pending += len(values)
        return window_state

    # ------------------------------------------------------------------ firing

    def _emit(
        self,
        key: Any,
        window: BoundedWindow,
        window_state: WindowState,
        finished: bool,
        watermark: int,
        maybe_on_time: bool,
        stats: GroupingStats,
    ) -> WindowedValue:
        """One pane of ``window`` (Beam Python's ``_output``) and the state after it."""
        max_timestamp = last_instant(window)
        index = window_state.index
        window_state.index = index + 1
        nonspeculative = window_state.nonspeculative_index
        if watermark <= max_timestamp:
            timing = _EARLY
            if nonspeculative:
                # A merge moved the window's end past a watermark that had passed the old
                # end: the count of non-speculative panes goes on (as Beam).
                window_state.nonspeculative_index = nonspeculative + 1
            else:
                nonspeculative = -1
        else:
            window_state.nonspeculative_index = nonspeculative + 1
            timing = _ON_TIME if maybe_on_time and nonspeculative == 0 else _LATE
        pane = _pane(index == 0, finished, timing, index, nonspeculative)

        keep = not (finished or self._discarding)
        payload = self._payload(window_state.contents, keep)
        if not keep:
            window_state.contents = None

        holds = self.holds
        hold = window_state.hold
        timestamp = holds.pane_timestamp(max_timestamp, hold)
        window_state.hold = holds.hold_after_pane(hold, window, watermark, finished)
        if finished:
            window_state.closed = True
            window_state.trigger_state = None
            window_state.timers = None
        window_state.pending = 0
        window_state.gc_hold = False
        stats.panes_fired += 1
        return WindowedValue((user_key(key), payload), timestamp, (window,), pane)

    def _collect_garbage(
        self,
        state: KeyState,
        key: Any,
        input_watermark: int,
        output_watermark: int | None,
        fired: list[WindowedValue],
        stats: GroupingStats,
    ) -> None:
        windows = state.windows
        gc_time = self.holds.gc_time
        expired = [window for window in windows if gc_time(window) < input_watermark]
        if not expired:
            return
        expired.sort(key=window_sort_key)  # a user's BoundedWindow may have no start
        for window in expired:
            window_state = windows.pop(window)
            if window_state.pending and window_state.closed:
                # A closed window buffers nothing (its elements are dropped as they come),
                # so this is a guard: whatever is deleted unemitted is counted.
                stats.discard(DropReason.EXPIRED_STATE, window_state.pending)
            elif window_state.pending:
                stamp = self.holds.pane_timestamp(last_instant(window), window_state.hold)
                # Beam Java's rule: a pane the output watermark has already passed is LATE.
                behind = output_watermark is not None and output_watermark > stamp
                fired.append(self._emit(key, window, window_state, True, input_watermark, not behind, stats))

    def _forget_spent(self, state: KeyState) -> None:
        """Drop the windows that hold nothing but pane indices: no buffered contents, no
        hold, no timers, a trigger in its initial state, not closed. A new element for one
        starts it afresh, which differs only in the pane indices nobody reads."""
        spent = [
            window
            for window, window_state in state.windows.items()
            if window_state.contents is None
            and not window_state.pending
            and window_state.hold is None
            and not window_state.gc_hold
            and not window_state.timers
            and not window_state.trigger_state
            and not window_state.closed
        ]
        for window in spent:
            del state.windows[window]
