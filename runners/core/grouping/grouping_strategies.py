"""The three ways a grouping stage fires its panes, one class each (chosen in ``grouping.py``).

- ``EndOfWindowGrouping``: ``DefaultTrigger`` over windows that do not merge, the common
  case, without the trigger machine: the trigger's only state is its end-of-window timer,
  which is pending exactly when the window has unfired data.
- ``TriggeredGrouping``: any trigger, and merging windows (sessions), through the trigger
  state machines of ``triggers.py`` and the merger of ``merging.py``.
- ``SinglePaneGrouping``: Beam's batch shortcuts, where each key's elements go to one pane
  in the global window when the watermark reaches the end of time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkbeam.combine import CombineFn
from sparkbeam.runners.core.grouping.drops import GroupingStats
from sparkbeam.runners.core.grouping.grouping_engine import (
    Arrival,
    GroupingEngine,
    WindowedGrouping,
)
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.grouping.keys import user_key
from sparkbeam.runners.core.grouping.merging import WindowMerger
from sparkbeam.runners.core.grouping.records import Partial
from sparkbeam.runners.core.grouping.triggers import (
    EVENT_TIMER_PREFIX,
    PROCESSING_TIMER_PREFIX,
    TimeDomain,
    TriggerContext,
    build_trigger_machine,
)
from sparkbeam.runners.core.grouping.window_state import KeyState, WindowState
from sparkbeam.trigger import TriggerFn
from sparkbeam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue
from sparkbeam.window import BoundedWindow, GlobalWindow
from sparkbeam.windowing import Windowing

__all__ = ["EndOfWindowGrouping", "SinglePaneGrouping", "TriggeredGrouping"]

_EVENT = TimeDomain.EVENT_TIME
_PROCESSING = TimeDomain.PROCESSING_TIME
_EVENT_PREFIX_CHAR = EVENT_TIMER_PREFIX[0]
_PROCESSING_PREFIX_CHAR = PROCESSING_TIMER_PREFIX[0]
_GLOBAL_WINDOW = GlobalWindow()
_GLOBAL_END = _GLOBAL_WINDOW.end.micros
_SINGLE_PANE = PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0)
# Firings a single fire_timers call may make per window before the state is called corrupt.
_MAX_TIMER_ROUNDS = 1000


def _arrival_size(arrival: Arrival) -> int:
    return arrival.count


class EndOfWindowGrouping(WindowedGrouping):
    """``DefaultTrigger`` over non-merging windows: a pane when the watermark passes a
    window's end, then one per late bundle."""

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
        fired: list[WindowedValue] = []
        for window, (values, timestamps) in self._bucket(elements, input_watermark, stats).items():
            window_state = self._admit(state, window, values, timestamps, output_watermark, stats)
            if window_state is not None:
                self._arrived(state, key, window, window_state, len(values), input_watermark, now, fired, stats)
        return fired

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
        if input_watermark >= window.end.micros:
            # Late data: the end-of-window timer has fired already, so the bundle fires.
            fired.append(self._emit(key, window, window_state, False, input_watermark, False, stats))

    def _fire_due(
        self,
        state: KeyState,
        key: Any,
        input_watermark: int,
        now: int,
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
            fired.append(self._emit(key, window, state.windows[window], False, input_watermark, True, stats))

    def _window_timers(self, window: BoundedWindow, window_state: WindowState) -> tuple[int | None, int | None]:
        return (window.end.micros if window_state.pending else None), None


class TriggeredGrouping(WindowedGrouping):
    """Any trigger, through its state machine; merging window fns merge each bundle's
    windows into the key's open ones first.

    Not thread-safe (it reuses one trigger context); use one per task.
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
        super().__init__(windowing, trigger, holds, combine_fn, keep_pane_indices=keep_pane_indices)
        self.machine = build_trigger_machine(trigger)
        self._ctx = TriggerContext()
        self._merger = (
            WindowMerger(windowing.windowfn, self.machine, holds, combine_fn)
            if windowing.windowfn.is_merging()
            else None
        )

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
        by_window = self._bucket(elements, input_watermark, stats)
        if not by_window:
            return []
        if self._merger is not None:
            by_window = self._merger.merge_bundle(state, by_window, now, stats)
        fired: list[WindowedValue] = []
        for window, (values, timestamps) in by_window.items():
            window_state = self._admit(state, window, values, timestamps, output_watermark, stats)
            if window_state is not None:
                self._arrived(state, key, window, window_state, len(values), input_watermark, now, fired, stats)
        return fired

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
        """The trigger sees the bundle's elements of the window at once (``count``), then is
        asked once whether to fire: the same for raw elements and for lifted partials."""
        machine, ctx = self.machine, self._ctx
        ctx.bind(window_state, window, now)
        machine.on_element(ctx, count)
        if machine.should_fire(ctx, _EVENT, input_watermark):
            finished = machine.on_fire(ctx, _EVENT, input_watermark)
            fired.append(self._emit(key, window, window_state, finished, input_watermark, False, stats))

    def _merge_partial_windows(
        self, state: KeyState, by_window: dict[BoundedWindow, Arrival], now: int, stats: GroupingStats
    ) -> dict[BoundedWindow, Arrival]:
        if self._merger is None:
            return by_window
        combine = self.holds.combine

        def join(arrival: Arrival, other: Arrival) -> None:
            # Two proto-sessions that merged: their holds combine as their elements' would,
            # since lifting.lifts allows sessions only where output times ignore the window.
            arrival.accumulators.extend(other.accumulators)
            arrival.count += other.count
            arrival.hold = combine(arrival.hold, other.hold)
            arrival.unheld = arrival.unheld or other.unheld

        return self._merger.merge_bundle(state, by_window, now, stats, size=_arrival_size, join=join)

    def _window_timers(self, window: BoundedWindow, window_state: WindowState) -> tuple[int | None, int | None]:
        event: int | None = None
        processing: int | None = None
        if window_state.timers:
            for timer_key, micros in window_state.timers.items():
                if timer_key[0] == _EVENT_PREFIX_CHAR:
                    if event is None or micros < event:
                        event = micros
                elif processing is None or micros < processing:
                    processing = micros
        return event, processing

    def _fire_due(
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
                        self._emit(key, window, window_state, finished, input_watermark, domain is _EVENT, stats)
                    )
        msg = (
            f"timers keep coming due after {_MAX_TIMER_ROUNDS} rounds of firing for key "
            f"{key!r}; the trigger {self.trigger!r} sets timers while it fires"
        )
        raise RuntimeError(msg)


class SinglePaneGrouping(GroupingEngine):
    """Beam's batch grouping where every key gets exactly one pane: default windowing
    (stamped at the end of the global window), or the global window with a trigger that
    fires per element (stamped at the start of time); see ``holds.single_pane_timestamp``.
    The runner adds every element at the minimum watermark, then fires at the maximum."""

    def __init__(
        self,
        windowing: Windowing,
        trigger: TriggerFn,
        holds: HoldPolicy,
        combine_fn: CombineFn | None,
        *,
        pane_timestamp: int,
    ) -> None:
        super().__init__(windowing, trigger, holds, combine_fn)
        self.pane_timestamp = pane_timestamp

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
        values = [element[0] for element in elements]
        if not values:
            return []
        window_state = state.windows.get(_GLOBAL_WINDOW)
        if window_state is None:
            window_state = state.windows[_GLOBAL_WINDOW] = WindowState()
        self._add_contents(window_state, values)
        window_state.pending += len(values)
        return []

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
        accumulators = []
        count = 0
        for partial in partials:
            accumulators.append(partial.accumulator)
            count += partial.count
        if not accumulators:
            return []
        window_state = state.windows.get(_GLOBAL_WINDOW)
        if window_state is None:
            window_state = state.windows[_GLOBAL_WINDOW] = WindowState()
        self._add_accumulators(window_state, accumulators)
        window_state.pending += count
        return []

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
        if input_watermark < _GLOBAL_END:
            return []
        window_state = state.windows.pop(_GLOBAL_WINDOW, None)
        if window_state is None:
            return []
        payload = self._payload(window_state.contents, keep=False)
        stats.panes_fired += 1
        return [WindowedValue((user_key(key), payload), self.pane_timestamp, (_GLOBAL_WINDOW,), _SINGLE_PANE)]

    def earliest_hold(self, state: KeyState) -> tuple[int, BoundedWindow] | None:
        """The one pane's timestamp holds the watermark while its key has data."""
        window_state = state.windows.get(_GLOBAL_WINDOW)
        if window_state is not None and window_state.pending:
            return self.pane_timestamp, _GLOBAL_WINDOW
        return None

    def next_timers(self, state: KeyState) -> tuple[int | None, int | None]:
        window_state = state.windows.get(_GLOBAL_WINDOW)
        return (_GLOBAL_END if window_state is not None else None), None
