"""The per-key event-time grouping engine: windows, triggers, holds, lateness, GC.

A runner keeps one ``KeyState`` per key and hands the engine each step's elements
(``add_elements``) and each watermark or clock move (``fire_timers``); the engine returns
the panes that fired, as ``WindowedValue((key, payload), pane_timestamp, (window,), pane)``
where the payload is the list of grouped values, or ``combine_fn.extract_output(acc)``.

The semantics are DESIGN §3: Beam Python's ``GeneralTriggerDriver`` (pane info, holds,
merging, the trigger protocol) plus Beam Java's garbage collection (a final pane for data
still pending when the watermark passes a window's GC time, then all of its state is
deleted) and the GC hold. ``batch=True`` reproduces the groupings of Beam's FnApiRunner in
batch. Where this differs from Beam Python, on purpose:

- a pane fired by elements is judged (EARLY / LATE, keep the hold) against the input
  watermark its trigger was evaluated at; Beam passes the output watermark there, which
  its harness sets equal to the input watermark;
- a window whose trigger finished releases its hold (Beam keeps it and stalls);
- all due timers of a window in one time domain are consumed by one trigger evaluation
  (Beam fires each, which emits empty duplicate panes for nested watermark triggers);
- holds of merging windows are merged, not dropped;
- a window whose trigger finished takes no part in later merges, and a merge whose result
  is such a window leaves it closed (Beam Java's ``ReduceFnRunner``; see ``merging.py``).

Data leaves the engine in a pane or through ``GroupingStats.discard``, which counts it by
reason (``drops.py``): late, closed window, merged into a closed window, expired state.

>>> from sparkbeam.windowing import Windowing
>>> from sparkbeam.window import FixedWindows, IntervalWindow
>>> from sparkbeam.utils.windowed_value import WindowedValue
>>> engine = GroupingEngine(Windowing(FixedWindows(10)))
>>> state, stats = engine.new_key_state(), GroupingStats()
>>> window = (IntervalWindow(0, 10),)
>>> engine.add_elements(state, "k", [WindowedValue("a", 1_000_000, window)],
...                     input_watermark=0, output_watermark=0, now=0, stats=stats)
[]
>>> [pane.value for pane in engine.fire_timers(state, "k", input_watermark=10_000_000,
...                                            now=0, stats=stats)]
[('k', ['a'])]

An engine is not thread-safe (it reuses one trigger context); use one per task.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from sparkbeam.combine import CombineFn, accumulator_from
from sparkbeam.trigger import (
    AccumulationMode,
    AfterCount,
    Always,
    DefaultTrigger,
    Never,
)
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue
from sparkbeam.window import (
    BoundedWindow,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    window_sort_key,
)
from sparkbeam.windowing import Windowing

from .drops import DropReason, GroupingStats
from .holds import HoldPolicy
from .merging import Buckets, WindowMerger
from .triggers import (
    EVENT_TIMER_PREFIX,
    PROCESSING_TIMER_PREFIX,
    TimeDomain,
    TriggerContext,
    build_trigger_machine,
)
from .window_state import KeyState, WindowState

__all__ = ["DropReason", "GroupingEngine", "GroupingStats", "KeyState", "WindowState"]

_EVENT = TimeDomain.EVENT_TIME
_PROCESSING = TimeDomain.PROCESSING_TIME
_EARLY = PaneInfoTiming.EARLY
_ON_TIME = PaneInfoTiming.ON_TIME
_LATE = PaneInfoTiming.LATE
_EVENT_PREFIX_CHAR = EVENT_TIMER_PREFIX[0]
_PROCESSING_PREFIX_CHAR = PROCESSING_TIMER_PREFIX[0]

# GC times are clamped below the largest watermark, so the final watermark collects all.
_LAST_GC_TIME = MAX_TIMESTAMP.micros - 1
_GLOBAL_WINDOW = GlobalWindow()
_GLOBAL_END = _GLOBAL_WINDOW.end.micros
_BATCH_ONLY_PANE = PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0)
# A bucket marker for a window whose elements are all behind its GC time.
_EXPIRED: tuple[list[Any], list[int] | None, Any] = ([], None, None)
# Firings a single fire_timers call may make per window before the state is called corrupt.
_MAX_TIMER_ROUNDS = 1000


@functools.lru_cache(maxsize=4096)
def _pane(is_first: bool, is_last: bool, timing: PaneInfoTiming, index: int, nonspeculative: int) -> PaneInfo:
    return PaneInfo(is_first, is_last, timing, index, nonspeculative)


class GroupingEngine:
    """Groups one key's elements per window and decides when panes fire.

    ``overlapping_window_rule`` switches DESIGN §3's rule for overlapping windows (off:
    Beam's current behaviour). ``batch=True`` reproduces Beam's FnApiRunner batch grouping:
    the runner then calls ``add_elements`` with every element at the minimum watermark and
    ``fire_timers`` at the maximum watermark and clock.

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
        *,
        combine_fn: CombineFn | None = None,
        overlapping_window_rule: bool = True,
        batch: bool = False,
        keep_pane_indices: bool = True,
    ) -> None:
        self.windowing = windowing
        self.combine_fn = combine_fn
        self.batch = batch
        trigger = windowing.triggerfn
        if batch and isinstance(trigger, Never):
            # Beam's batch grouping fires a Never trigger once, as Always.
            trigger = Always()
        self.trigger = trigger
        # Beam's batch shortcuts: one pane per key, stamped at the end of the global window
        # for default windowing, at the start of time for a global window that fires per element.
        self._single_pane_stamp: int | None = None
        if batch and windowing.is_default():
            self._single_pane_stamp = _GLOBAL_WINDOW.max_timestamp().micros
        elif (
            batch
            and windowing.windowfn == GlobalWindows()
            and trigger in (AfterCount(1), Always())
        ):
            self._single_pane_stamp = MIN_TIMESTAMP.micros
        self.machine = build_trigger_machine(trigger)
        self.holds = HoldPolicy(windowing, overlapping_window_rule=overlapping_window_rule)
        self._window_fn = windowing.windowfn
        self._merging = windowing.windowfn.is_merging()
        self._discarding = windowing.accumulation_mode is AccumulationMode.DISCARDING
        self._lateness = windowing.allowed_lateness.micros
        self._has_ontime_pane = bool(trigger.has_ontime_pane())
        # A spent window of a merging WindowFn still shapes later merges, so it stays.
        self._forget_spent_windows = not keep_pane_indices and not self._merging
        # The common case runs without the trigger machine: DefaultTrigger's only state is
        # its end-of-window timer, which is pending exactly when the window has unfired data.
        self._default_fast_path = type(trigger) is DefaultTrigger and not self._merging
        self._ctx = TriggerContext()
        self._merger = WindowMerger(windowing.windowfn, self.machine, self.holds, combine_fn)

    def __repr__(self) -> str:
        return f"GroupingEngine({self.windowing!r}, batch={self.batch})"

    # ------------------------------------------------------------------ public interface

    def new_key_state(self) -> KeyState:
        """Empty state for a key seen for the first time."""
        return KeyState()

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
        if self._single_pane_stamp is not None:
            self._buffer_single_pane(state, elements)
            return []
        by_window = self._bucket(elements, input_watermark, stats)
        if not by_window:
            return []
        if self._merging:
            by_window = self._merger.merge_bundle(state, by_window, now, stats)
        windows = state.windows
        holds = self.holds
        fast = self._default_fast_path
        machine, ctx = self.machine, self._ctx
        fired: list[WindowedValue] = []
        for window, (values, timestamps) in by_window.items():
            window_state = windows.get(window)
            if window_state is None:
                window_state = windows[window] = WindowState()
            elif window_state.closed:
                stats.discard(DropReason.CLOSED_WINDOW, len(values))
                continue
            max_timestamp = window.max_timestamp().micros
            hold, unheld = holds.element_hold(
                window, max_timestamp, timestamps or (), output_watermark
            )
            if hold is not None:
                window_state.hold = holds.combine(window_state.hold, hold)
            if unheld:
                window_state.gc_hold = True
            self._add_contents(window_state, values)
            window_state.pending += len(values)
            if fast:
                if input_watermark >= window.end.micros:
                    fired.append(
                        self._emit(key, window, window_state, max_timestamp, False, input_watermark, False, stats)
                    )
                continue
            ctx.bind(window_state, window, now)
            machine.on_element(ctx, len(values))
            if machine.should_fire(ctx, _EVENT, input_watermark):
                finished = machine.on_fire(ctx, _EVENT, input_watermark)
                fired.append(
                    self._emit(key, window, window_state, max_timestamp, finished, input_watermark, False, stats)
                )
        return fired

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
        if self._single_pane_stamp is not None:
            return self._flush_single_pane(state, key, input_watermark, stats)
        fired: list[WindowedValue] = []
        if self._default_fast_path:
            self._fire_end_of_window(state, key, input_watermark, fired, stats)
        else:
            self._fire_trigger_timers(state, key, input_watermark, now, fired, stats)
        self._collect_garbage(state, key, input_watermark, output_watermark, fired, stats)
        if self._forget_spent_windows:
            self._forget_spent(state)
        return fired

    def earliest_hold(self, state: KeyState) -> tuple[int, BoundedWindow] | None:
        """The earliest watermark hold of this key, with the window that sets it.

        Holds are the timestamp-combiner holds of pending panes and, for windows with late
        data pending, the GC hold at their GC time. Pending end-of-window timers need no
        hold: they fire when the input watermark reaches the window's end, and until then
        the output watermark is before the ``max_timestamp()`` their pane may carry.
        """
        if self._single_pane_stamp is not None:
            window_state = state.windows.get(_GLOBAL_WINDOW)
            if window_state is not None and window_state.pending:
                return self._single_pane_stamp, _GLOBAL_WINDOW
            return None
        best: int | None = None
        best_window: BoundedWindow | None = None
        for window, window_state in state.windows.items():
            hold = window_state.hold
            if window_state.gc_hold:
                gc_time = self._gc_time(window)
                if hold is None or gc_time < hold:
                    hold = gc_time
            if hold is not None and (best is None or hold < best):
                best, best_window = hold, window
        if best is None or best_window is None:
            return None
        return best, best_window

    def next_timers(self, state: KeyState) -> tuple[int | None, int | None]:
        """The earliest pending event-time and processing-time timers of this key.

        An event-time timer at ``t`` is due once the input watermark is ``>= t``; window
        garbage collection counts as one (at GC time + 1µs). A processing-time timer is due
        once the clock is ``>= t``.
        """
        if self._single_pane_stamp is not None:
            window_state = state.windows.get(_GLOBAL_WINDOW)
            return (_GLOBAL_END if window_state is not None else None), None
        event: int | None = None
        processing: int | None = None
        fast = self._default_fast_path
        for window, window_state in state.windows.items():
            due = self._gc_time(window) + 1
            if fast:
                if window_state.pending:
                    due = min(due, window.end.micros)
            elif window_state.timers:
                for timer_key, micros in window_state.timers.items():
                    if timer_key[0] == _EVENT_PREFIX_CHAR:
                        due = min(due, micros)
                    elif processing is None or micros < processing:
                        processing = micros
            if event is None or due < event:
                event = due
        return event, processing

    def is_empty(self, state: KeyState) -> bool:
        """Whether the key holds no window state (the runner may drop it)."""
        return not state.windows

    # ------------------------------------------------------------------ adding elements

    def _gc_time(self, window: BoundedWindow) -> int:
        gc_time = window.max_timestamp().micros + self._lateness
        return gc_time if gc_time < _LAST_GC_TIME else _LAST_GC_TIME

    def _bucket(
        self, elements: Iterable[WindowedValue], input_watermark: int, stats: GroupingStats
    ) -> Buckets:
        """Values (and, when the combiner needs them, timestamps) per window, first-seen
        order, without the windows already behind their GC time."""
        # Interval windows are bucketed by their (start, end) integers: hashing and
        # comparing the window objects costs Python-level calls per element.
        buckets: dict[Any, tuple[list[Any], list[int] | None, BoundedWindow]] = {}
        need_timestamps = not self.holds.depends_only_on_window
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
                    if self._gc_time(window) < input_watermark:
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
        window_state.contents = accumulator_from(combine_fn, "add_inputs", combine_fn.add_inputs(accumulator, values), accumulator)

    # ------------------------------------------------------------------ firing

    def _emit(
        self,
        key: Any,
        window: BoundedWindow,
        window_state: WindowState,
        max_timestamp: int,
        finished: bool,
        watermark: int,
        maybe_on_time: bool,
        stats: GroupingStats,
    ) -> WindowedValue:
        """One pane of ``window`` (Beam Python's ``_output``) and the state after it."""
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

        contents = window_state.contents
        keep = not (finished or self._discarding)
        combine_fn = self.combine_fn
        if combine_fn is None:
            if contents is None:
                payload: Any = []
            else:
                payload = list(contents) if keep else contents
        else:
            accumulator = combine_fn.create_accumulator() if contents is None else contents
            payload = combine_fn.extract_output(accumulator)
        if not keep:
            window_state.contents = None

        hold = window_state.hold
        timestamp = max_timestamp if hold is None else hold
        if finished:
            window_state.closed = True
            window_state.hold = None
            window_state.trigger_state = None
            window_state.timers = None
        elif hold is not None and not (watermark < window.end.micros and self._has_ontime_pane):
            # Beam keeps the hold for an on-time pane still to come (it may be empty).
            window_state.hold = None
        window_state.pending = 0
        window_state.gc_hold = False
        stats.panes_fired += 1
        return WindowedValue((key, payload), timestamp, (window,), pane)

    def _fire_end_of_window(
        self,
        state: KeyState,
        key: Any,
        input_watermark: int,
        fired: list[WindowedValue],
        stats: GroupingStats,
    ) -> None:
        due = [
            (window.end.micros, window)
            for window, window_state in state.windows.items()
            if window_state.pending and window.end.micros <= input_watermark
        ]
        if len(due) > 1:
            due.sort(key=lambda item: item[0])
        for _, window in due:
            window_state = state.windows[window]
            fired.append(
                self._emit(
                    key, window, window_state, window.max_timestamp().micros, False, input_watermark, True, stats
                )
            )

    def _fire_trigger_timers(
        self,
        state: KeyState,
        key: Any,
        input_watermark: int,
        now: int,
        fired: list[WindowedValue],
        stats: GroupingStats,
    ) -> None:
        """Evaluate the trigger of each window with due timers, once per time domain.

        Windows go in order of their earliest due timer, event time before processing
        time. All due timers of a window in a domain are consumed by one evaluation (as
        Java dedupes equal timers): nested watermark triggers each set an end-of-window
        timer, and firing once per timer would emit empty duplicate panes.
        """
        windows = state.windows
        machine, ctx = self.machine, self._ctx
        for _ in range(_MAX_TIMER_ROUNDS):
            due: list[tuple[int, int, int, BoundedWindow]] = []
            for seq, (window, window_state) in enumerate(windows.items()):
                timers = window_state.timers
                if not timers or window_state.closed:
                    continue
                event = processing = None
                for timer_key, micros in timers.items():
                    if timer_key[0] == _EVENT_PREFIX_CHAR:
                        if micros <= input_watermark and (event is None or micros < event):
                            event = micros
                    elif micros <= now and (processing is None or micros < processing):
                        processing = micros
                if event is not None:
                    due.append((0, event, seq, window))
                if processing is not None:
                    due.append((1, processing, seq, window))
            if not due:
                return
            due.sort(key=lambda item: item[:3])
            for rank, _micros, _seq, window in due:
                window_state = windows[window]
                timers = window_state.timers
                # An earlier firing may have closed the window or cleared these timers.
                if window_state.closed or not timers:
                    continue
                if rank == 0:
                    domain, prefix, limit = _EVENT, _EVENT_PREFIX_CHAR, input_watermark
                else:
                    domain, prefix, limit = _PROCESSING, _PROCESSING_PREFIX_CHAR, now
                consumed = [k for k, micros in timers.items() if k[0] == prefix and micros <= limit]
                if not consumed:
                    continue
                for timer_key in consumed:
                    del timers[timer_key]
                if not timers:
                    window_state.timers = None
                ctx.bind(window_state, window, now)
                if machine.should_fire(ctx, domain, input_watermark):
                    finished = machine.on_fire(ctx, domain, input_watermark)
                    fired.append(
                        self._emit(
                            key,
                            window,
                            window_state,
                            window.max_timestamp().micros,
                            finished,
                            input_watermark,
                            domain is _EVENT,
                            stats,
                        )
                    )
        msg = (
            f"timers keep coming due after {_MAX_TIMER_ROUNDS} rounds of firing for key "
            f"{key!r}; the trigger {self.trigger!r} sets timers while it fires"
        )
        raise RuntimeError(msg)

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
        expired = [window for window in windows if self._gc_time(window) < input_watermark]
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
                max_timestamp = window.max_timestamp().micros
                stamp = max_timestamp if window_state.hold is None else window_state.hold
                # Beam Java's rule: a pane the output watermark has already passed is LATE.
                behind = output_watermark is not None and output_watermark > stamp
                fired.append(
                    self._emit(
                        key, window, window_state, max_timestamp, True, input_watermark, not behind, stats
                    )
                )

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

    # ------------------------------------------------------------------ batch shortcuts

    def _buffer_single_pane(self, state: KeyState, elements: Iterable[WindowedValue]) -> None:
        values = [element[0] for element in elements]
        if not values:
            return
        window_state = state.windows.get(_GLOBAL_WINDOW)
        if window_state is None:
            window_state = state.windows[_GLOBAL_WINDOW] = WindowState()
        self._add_contents(window_state, values)
        window_state.pending += len(values)

    def _flush_single_pane(
        self, state: KeyState, key: Any, input_watermark: int, stats: GroupingStats
    ) -> list[WindowedValue]:
        if input_watermark < _GLOBAL_END:
            return []
        window_state = state.windows.pop(_GLOBAL_WINDOW, None)
        if window_state is None:
            return []
        contents = window_state.contents
        if self.combine_fn is None:
            payload: Any = contents if contents is not None else []
        else:
            accumulator = self.combine_fn.create_accumulator() if contents is None else contents
            payload = self.combine_fn.extract_output(accumulator)
        stats.panes_fired += 1
        return [
            WindowedValue((key, payload), self._single_pane_stamp, (_GLOBAL_WINDOW,), _BATCH_ONLY_PANE)
        ]
