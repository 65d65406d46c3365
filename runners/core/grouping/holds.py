"""Holds and output timestamps: the one place that decides them (DESIGN §3 and §4).

A grouping stamps each pane with its window's *hold*: the combination, by the timestamp
combiner, of the output times of the elements that arrived on time for the stage (not
behind its output watermark). The same hold keeps the stage's output watermark back until
the pane is out, so a pane is never late downstream because of the grouping itself. A
window with no hold stamps its pane at its last instant (``window.max_timestamp()``).
Late data pending in a window holds the watermark at the window's GC time (the GC hold).

Everything that needs one of these rules asks this module: the streaming engine
(``grouping.py``), the merger (``merging.py``), the batch combine (``runners/spark/
batch_grouping.py``), the combine lifted before a streaming shuffle (``lifting.py``) and the step loop's output watermark (``steps.py``).

The overlapping-window rule (DESIGN §3): under ``OUTPUT_AT_EARLIEST`` and
``OUTPUT_AT_EARLIEST_TRANSFORMED``, when the window fn reports an overlap floor for a
window (``SlidingWindows`` reports the end of the previous window), an element's output
time is never before that floor. ``overlapping_window_rule=False`` gives Beam's current
behaviour.

>>> from sparkbeam.windowing import Windowing
>>> from sparkbeam.window import SlidingWindows, IntervalWindow, TimestampCombiner
>>> policy = HoldPolicy(Windowing(SlidingWindows(10, 5),
...                               timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST))
>>> policy.output_time(IntervalWindow(5, 15), 7_000_000)  # floor: [0, 10) ends at 10
10000000
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sparkbeam.trigger import AfterCount, Always, TriggerFn
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from sparkbeam.window import (
    BoundedWindow,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    TimestampCombiner,
    WindowFn,
)
from sparkbeam.windowing import Windowing

__all__ = [
    "LAST_GC_TIME",
    "HoldPolicy",
    "last_instant",
    "output_time_ignores_window",
    "output_watermark",
    "single_pane_timestamp",
    "timer_hold",
]

_EOW = TimestampCombiner.OUTPUT_AT_EOW
_LATEST = TimestampCombiner.OUTPUT_AT_LATEST
_TRANSFORMED = TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
_EARLIEST_KINDS = (TimestampCombiner.OUTPUT_AT_EARLIEST, _TRANSFORMED)

#: GC times are clamped below the largest watermark, so the final watermark collects all.
LAST_GC_TIME = MAX_TIMESTAMP.micros - 1

OutputTime = Callable[[BoundedWindow, int], int]
_BUILT_IN_WINDOWS = frozenset({IntervalWindow, GlobalWindow})


def last_instant(window: BoundedWindow) -> int:
    """``window.max_timestamp()`` in microseconds. For the built-in windows that is
    ``end`` - 1µs, read without building a ``Timestamp`` (it is asked once per element);
    a window class of the user's is asked, in case it says otherwise."""
    if type(window) in _BUILT_IN_WINDOWS:
        return window.end.micros - 1
    return window.max_timestamp().micros


def _earlier(hold: int | None, other: int | None) -> int | None:
    if hold is None:
        return other
    if other is None:
        return hold
    return hold if hold <= other else other


def _later(hold: int | None, other: int | None) -> int | None:
    if hold is None:
        return other
    if other is None:
        return hold
    return hold if hold >= other else other


def _at_end_of_window(window: BoundedWindow, timestamp: int) -> int:
    return last_instant(window)


def _as_is(window: BoundedWindow, timestamp: int) -> int:
    return timestamp


class HoldPolicy:
    """The hold and timestamp rules of one windowing strategy, in integer microseconds.

    ``trigger`` is the trigger the grouping really runs (a batch grouping runs ``Never``
    as ``Always``); it decides whether a hold waits for an on-time pane.

    ``output_time`` and ``combine`` are chosen once for the timestamp combiner, since the
    batch path calls them once per element.
    """

    __slots__ = (
        "allowed_lateness",
        "combine",
        "combiner",
        "depends_only_on_window",
        "floored",
        "keeps_hold_for_on_time_pane",
        "output_time",
        "overlapping_window_rule",
        "trigger",
        "window_fn",
        "windowing",
    )

    def __init__(
        self,
        windowing: Windowing,
        *,
        overlapping_window_rule: bool = True,
        trigger: TriggerFn | None = None,
    ) -> None:
        self.combiner = windowing.timestamp_combiner
        if not isinstance(self.combiner, TimestampCombiner):
            msg = f"unknown timestamp combiner {self.combiner!r}; use a TimestampCombiner member"
            raise TypeError(msg)
        self.windowing = windowing
        self.window_fn = windowing.windowfn
        self.overlapping_window_rule = overlapping_window_rule
        self.allowed_lateness = windowing.allowed_lateness.micros
        self.trigger = windowing.triggerfn if trigger is None else trigger
        self.keeps_hold_for_on_time_pane = bool(self.trigger.has_ontime_pane())
        # END_OF_WINDOW ignores element timestamps, which lets the engine skip them.
        self.depends_only_on_window = self.combiner is _EOW
        #: whether the overlapping-window rule may floor output times at all
        self.floored = (
            overlapping_window_rule
            and self.combiner in _EARLIEST_KINDS
            # A window fn that keeps the base hook has windows that never overlap.
            and type(self.window_fn).overlap_output_floor is not WindowFn.overlap_output_floor
        )
        #: The output time an element at ``timestamp`` (µs) contributes to ``window``.
        self.output_time: OutputTime = self._choose_output_time()
        #: Two holds of the same window as one (None: no hold).
        self.combine: Callable[[int | None, int | None], int | None] = (
            _earlier if self.combiner in _EARLIEST_KINDS else _later
        )

    def __reduce__(self) -> Any:  # rebuilt where it is unpickled: the chosen functions stay private
        return (_rebuild, (self.windowing, self.overlapping_window_rule, self.trigger))

    def __repr__(self) -> str:
        return (
            f"HoldPolicy({self.combiner!r}, overlapping_window_rule="
            f"{self.overlapping_window_rule})"
        )

    # ------------------------------------------------------------------ output times

    def _floor(self, window: BoundedWindow) -> int | None:
        """The earliest output time the overlapping-window rule allows in ``window``."""
        if not self.floored:
            return None
        floor = self.window_fn.overlap_output_floor(window)
        return None if floor is None else floor.micros

    def _choose_output_time(self) -> OutputTime:
        combiner = self.combiner
        if combiner is _EOW:
            return _at_end_of_window
        transformed = combiner is _TRANSFORMED
        if not transformed and not self.floored:
            return _as_is  # LATEST, or EARLIEST with no floor
        transform = self.window_fn.get_transformed_output_time
        floor_of = self._floor

        def earliest_kind(window: BoundedWindow, timestamp: int) -> int:
            if transformed:
                timestamp = transform(window, Timestamp.from_micros(timestamp)).micros
            floor = floor_of(window)
            return timestamp if floor is None or timestamp >= floor else floor

        return earliest_kind

    def output_times(self, window: BoundedWindow, timestamps: Iterable[int]) -> list[int]:
        """``output_time`` of each of ``timestamps`` in ``window``, the floor found once."""
        combiner = self.combiner
        if combiner is _EOW:
            end = last_instant(window)
            return [end for _ in timestamps]
        if combiner is _TRANSFORMED:
            to_output = self.window_fn.get_transformed_output_time
            times = [to_output(window, Timestamp.from_micros(ts)).micros for ts in timestamps]
        else:
            times = list(timestamps)
        floor = self._floor(window)
        if floor is not None:
            times = [ts if ts >= floor else floor for ts in times]
        return times

    # ------------------------------------------------------------------ holds of a window

    def element_hold(
        self,
        window: BoundedWindow,
        timestamps: Iterable[int],
        output_watermark: int,
    ) -> tuple[int | None, bool]:
        """The hold that elements at ``timestamps`` add to ``window``, and whether any of
        them added none (its output time was behind ``output_watermark``: late data,
        which the GC hold covers instead)."""
        if self.depends_only_on_window:  # no timestamps needed: every element holds at the end
            end = last_instant(window)
            if end >= output_watermark:
                return end, False
            return None, True
        times = self.output_times(window, timestamps)
        held = [ts for ts in times if ts >= output_watermark]
        if not held:
            return None, bool(times)
        hold = max(held) if self.combiner is _LATEST else min(held)
        return hold, len(held) != len(times)

    def held_output_time(self, window: BoundedWindow, timestamp: int, output_watermark: int) -> int | None:
        """The hold one element at ``timestamp`` adds to ``window``: its output time, or
        None when that is behind ``output_watermark`` (late data, which the GC hold covers).
        ``element_hold`` of a bundle is these combined by ``combine``, which is what a
        lifted combine relies on to pre-combine holds before the shuffle."""
        output_time = self.output_time(window, timestamp)
        return output_time if output_time >= output_watermark else None

    def merge(self, merged_window: BoundedWindow, holds: Iterable[int | None]) -> int | None:
        """The hold of a window merged from parts with ``holds`` (None: no hold).

        EARLIEST takes the minimum, LATEST the maximum, END_OF_WINDOW the merged window's
        ``max_timestamp()``.
        """
        present = [hold for hold in holds if hold is not None]
        if not present:
            return None
        if self.combiner is _EOW:
            return last_instant(merged_window)
        if self.combiner is _LATEST:
            return max(present)
        return min(present)

    def hold_after_pane(self, hold: int | None, window: BoundedWindow, watermark: int, finished: bool) -> int | None:
        """What is left of a window's hold once a pane fired at input ``watermark``.

        A finished trigger releases it (Beam keeps it, and the stage stalls); an on-time
        pane still to come keeps it (Beam Python's FIRE_ALWAYS: that pane may be empty);
        otherwise the pane took it.
        """
        if finished or hold is None:
            return None
        if watermark < window.end.micros and self.keeps_hold_for_on_time_pane:
            return hold
        return None

    @staticmethod
    def pane_timestamp(max_timestamp: int, hold: int | None) -> int:
        """A pane's timestamp: its window's hold, or the window's last instant without one."""
        return max_timestamp if hold is None else hold

    # ------------------------------------------------------------------ garbage collection

    def gc_time(self, window: BoundedWindow) -> int:
        """When ``window``'s state goes: its last instant plus the allowed lateness (an
        element for it is late once the input watermark is past this)."""
        gc_time = last_instant(window) + self.allowed_lateness
        return gc_time if gc_time < LAST_GC_TIME else LAST_GC_TIME

    def window_hold(self, window: BoundedWindow, hold: int | None, gc_hold: bool) -> int | None:
        """The hold ``window`` puts on the stage's output watermark: its timestamp-combiner
        hold, or its GC time while late data is pending there (the GC hold), the earlier."""
        if gc_hold:
            gc_time = self.gc_time(window)
            if hold is None or gc_time < hold:
                return gc_time
        return hold


def _rebuild(windowing: Windowing, overlapping_window_rule: bool, trigger: TriggerFn) -> HoldPolicy:
    return HoldPolicy(windowing, overlapping_window_rule=overlapping_window_rule, trigger=trigger)


def output_time_ignores_window(windowing: Windowing) -> bool:
    """Whether an element's output time is the same in every window (its timestamp), or
    the window's end (END_OF_WINDOW, which needs no timestamps): what lets a hold taken in
    a proto-session stand for the session it merges into. Not so for
    OUTPUT_AT_EARLIEST_TRANSFORMED, nor where the overlapping-window rule may floor it."""
    combiner = windowing.timestamp_combiner
    if combiner in (_EOW, _LATEST):
        return True
    floors = type(windowing.windowfn).overlap_output_floor is not WindowFn.overlap_output_floor
    return combiner is TimestampCombiner.OUTPUT_AT_EARLIEST and not floors


def single_pane_timestamp(windowing: Windowing, trigger: TriggerFn) -> int | None:
    """Beam's batch shortcuts, where a key's elements all go to one pane: its timestamp.

    Default windowing: the end of the global window; the global window with a trigger
    that fires per element (``AfterCount(1)``, ``Always``): the start of time. ``None``
    for any other windowing, which follows the timestamp combiner.
    """
    if windowing.is_default():
        return GlobalWindow().max_timestamp().micros
    if windowing.windowfn == GlobalWindows() and trigger in (AfterCount(1), Always()):
        return MIN_TIMESTAMP.micros
    return None


def timer_hold(event_time: bool, fire_micros: int, setter_micros: int) -> int:
    """The hold a pending timer of a stateful DoFn keeps on its stage's output watermark
    (DESIGN §3b), as Beam's Python SDK sets it (a timer there has no output timestamp of its
    own): an event-time timer holds at its firing time, which is also the timestamp of what
    its callback outputs; a processing-time timer holds at the timestamp of the element (or
    firing timer) that set it, since its firing time is not an event time."""
    return fire_micros if event_time else setter_micros


def output_watermark(previous: int, input_watermark: int, earliest_hold: int | None) -> int:
    """A stage's output watermark: min(input watermark, earliest hold), never moving
    backwards from ``previous`` (DESIGN §4)."""
    target = input_watermark if earliest_hold is None or input_watermark <= earliest_hold else earliest_hold
    return previous if previous >= target else target
