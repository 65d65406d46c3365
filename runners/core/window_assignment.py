"""Assigning windows from a timestamp: WindowInto, and outputs a DoFn re-stamps.

Two places assign windows during execution: ``WindowInto`` (``window_assigner``),
and a DoFn that outputs a ``TimestampedValue``, whose output Beam's Python SDK windows
again with the input PCollection's window fn from the new timestamp
(``apache_beam/runners/common.py``, ``_maybe_propagate_windowing_info``). Both use the
cached assignment of the built-in window fns when they can.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkbeam.runners.core.errors import UserCodeError
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import (
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    SlidingWindows,
    WindowFn,
)

__all__ = ["cached_assignment", "restamp_assigner", "window_assigner"]


def cached_assignment(windowfn: WindowFn) -> Callable[[int], tuple] | None:
    """For the built-in window fns (exactly, not subclasses that may override ``assign``):
    the windows of a timestamp in microseconds, each distinct tuple of windows built once,
    since nearly every element shares its windows with many others."""
    kind = type(windowfn)
    if kind is GlobalWindows:
        only = (GlobalWindow(),)
        return lambda micros: only
    if kind is FixedWindows:
        size, offset = windowfn.size.micros, windowfn.offset.micros
        fixed_cache: dict[int, tuple] = {}

        def fixed(micros: int) -> tuple:
            start = micros - (micros - offset) % size
            windows = fixed_cache.get(start)
            if windows is None:
                windows = fixed_cache[start] = (
                    IntervalWindow(Timestamp.from_micros(start), Timestamp.from_micros(start + size)),
                )
            return windows

        return fixed
    if kind is SlidingWindows:
        size, period, offset = windowfn.size.micros, windowfn.period.micros, windowfn.offset.micros
        sliding_cache: dict[tuple[int, int], tuple] = {}

        def sliding(micros: int) -> tuple:
            last_start = micros - (micros - offset) % period
            # Windows start at last_start, last_start - period, ... while they still
            # contain micros; when size is not a multiple of period that count varies.
            span = last_start - (micros - size)
            count = (span - 1) // period + 1 if span > 0 else 0
            windows = sliding_cache.get((last_start, count))
            if windows is None:
                windows = sliding_cache[(last_start, count)] = tuple(
                    IntervalWindow(Timestamp.from_micros(last_start - k * period), Timestamp.from_micros(last_start - k * period + size))
                    for k in range(count)
                )
            return windows

        return sliding
    return None


def restamp_assigner(windowfn: WindowFn) -> Callable[[Any, int], tuple]:
    """The windows of an output re-stamped to ``micros`` (a ``TimestampedValue``), as
    Beam's Python SDK assigns them: ``windowfn.assign`` with the new timestamp and the
    value, and no current window (so sessions start a new session at the new timestamp)."""
    cached = cached_assignment(windowfn)
    if cached is not None:
        return lambda value, micros: cached(micros)
    assign = windowfn.assign
    context = WindowFn.AssignContext

    def assign_restamped(value: Any, micros: int) -> tuple:
        return tuple(assign(context(Timestamp.from_micros(micros), value)))

    return assign_restamped


def window_assigner(windowfn: WindowFn, label: str, location: str) -> Callable[[WindowedValue], list[WindowedValue]]:
    """WindowInto: the element once per window it was in, re-windowed by the window fn.

    As in Beam, the pane becomes unknown and an element in several windows is assigned
    once per window (so it can be duplicated). A failing user window fn is reported
    naming the transform (``label``, applied at ``location``).
    """
    assign = windowfn.assign
    AssignContext = WindowFn.AssignContext
    cached = cached_assignment(windowfn)
    if cached is not None:

        def reassign_cached(wv: WindowedValue) -> list[WindowedValue]:
            micros = wv.timestamp_micros
            windows = cached(micros)
            copy = WindowedValue(wv.value, micros, windows, PANE_INFO_UNKNOWN)
            # The built-in fns depend on the timestamp alone: one copy per input window.
            return [copy] * len(wv.windows)

        return reassign_cached

    def reassign(wv: WindowedValue) -> list[WindowedValue]:
        value, micros = wv.value, wv.timestamp_micros
        timestamp = Timestamp.from_micros(micros)
        out = []
        try:
            for window in wv.windows:
                windows = tuple(assign(AssignContext(timestamp, value, window)))
                out.append(WindowedValue(value, micros, windows, PANE_INFO_UNKNOWN))
        except Exception as error:
            raise UserCodeError(label, location, error, value) from error
        return out

    return reassign
