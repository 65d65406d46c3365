"""Timestamp combiners: an element's output time, a window's watermark hold, a pane's stamp.

A grouping stamps each pane with its window's *hold*: the combination of the output times
of the elements that arrived on time for the stage (not behind its output watermark). The
same hold keeps the stage's output watermark back until the pane is out, so a pane is
never late downstream because of the grouping itself. A window with no hold stamps its
pane ``window.max_timestamp()``.

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

from collections.abc import Iterable

from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.window import BoundedWindow, TimestampCombiner
from sparkbeam.windowing import Windowing

__all__ = ["HoldPolicy"]

_EARLIEST_KINDS = (
    TimestampCombiner.OUTPUT_AT_EARLIEST,
    TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED,
)


class HoldPolicy:
    """The timestamp-combiner rules of one windowing strategy, in integer microseconds."""

    __slots__ = ("combiner", "depends_only_on_window", "overlapping_window_rule", "window_fn")

    def __init__(self, windowing: Windowing, *, overlapping_window_rule: bool = True) -> None:
        self.combiner = windowing.timestamp_combiner
        if not isinstance(self.combiner, TimestampCombiner):
            msg = f"unknown timestamp combiner {self.combiner!r}; use a TimestampCombiner member"
            raise TypeError(msg)
        self.window_fn = windowing.windowfn
        self.overlapping_window_rule = overlapping_window_rule
        # END_OF_WINDOW ignores element timestamps, which lets the engine skip them.
        self.depends_only_on_window = self.combiner is TimestampCombiner.OUTPUT_AT_EOW

    def _floor(self, window: BoundedWindow) -> int | None:
        if not self.overlapping_window_rule or self.combiner not in _EARLIEST_KINDS:
            return None
        floor = self.window_fn.overlap_output_floor(window)
        return None if floor is None else floor.micros

    def output_time(self, window: BoundedWindow, timestamp: int) -> int:
        """The output time an element at ``timestamp`` contributes to ``window``."""
        combiner = self.combiner
        if combiner is TimestampCombiner.OUTPUT_AT_EOW:
            return window.max_timestamp().micros
        if combiner is TimestampCombiner.OUTPUT_AT_LATEST:
            return timestamp
        if combiner is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED:
            timestamp = self.window_fn.get_transformed_output_time(
                window, Timestamp.from_micros(timestamp)
            ).micros
        floor = self._floor(window)
        return timestamp if floor is None or timestamp >= floor else floor

    def element_hold(
        self,
        window: BoundedWindow,
        max_timestamp: int,
        timestamps: Iterable[int],
        output_watermark: int,
    ) -> tuple[int | None, bool]:
        """The hold that elements at ``timestamps`` add to ``window``, and whether any of
        them added none (its output time was behind ``output_watermark``)."""
        combiner = self.combiner
        if combiner is TimestampCombiner.OUTPUT_AT_EOW:
            if max_timestamp >= output_watermark:
                return max_timestamp, False
            return None, True
        if combiner is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED:
            to_output = self.window_fn.get_transformed_output_time
            times = [to_output(window, Timestamp.from_micros(ts)).micros for ts in timestamps]
        else:
            times = list(timestamps)
        floor = self._floor(window)
        if floor is not None:
            times = [ts if ts >= floor else floor for ts in times]
        held = [ts for ts in times if ts >= output_watermark]
        if not held:
            return None, bool(times)
        hold = max(held) if combiner is TimestampCombiner.OUTPUT_AT_LATEST else min(held)
        return hold, len(held) != len(times)

    def combine(self, hold: int | None, other: int | None) -> int | None:
        """Two holds of the same window as one."""
        if hold is None:
            return other
        if other is None:
            return hold
        if self.combiner is TimestampCombiner.OUTPUT_AT_EARLIEST or (
            self.combiner is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
        ):
            return hold if hold <= other else other
        return hold if hold >= other else other

    def merge(self, merged_window: BoundedWindow, holds: Iterable[int | None]) -> int | None:
        """The hold of a window merged from parts with ``holds`` (None: no hold).

        EARLIEST takes the minimum, LATEST the maximum, END_OF_WINDOW the merged window's
        ``max_timestamp()``.
        """
        present = [hold for hold in holds if hold is not None]
        if not present:
            return None
        if self.combiner is TimestampCombiner.OUTPUT_AT_EOW:
            return merged_window.max_timestamp().micros
        if self.combiner is TimestampCombiner.OUTPUT_AT_LATEST:
            return max(present)
        return min(present)

    @staticmethod
    def pane_timestamp(max_timestamp: int, hold: int | None) -> int:
        """A pane's timestamp: its window's hold, or the window's last instant without one."""
        return max_timestamp if hold is None else hold

    def __repr__(self) -> str:
        return (
            f"HoldPolicy({self.combiner!r}, overlapping_window_rule="
            f"{self.overlapping_window_rule})"
        )
