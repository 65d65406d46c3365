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

from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import (
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    SlidingWindows,
    WindowFn,
)

__all__ = ["GLOBAL_WINDOWS", "cached_assignment", "fixed_window_parts", "restamp_assigner", "window_assigner"]


#: The one tuple of the global window that assignment hands out, so that an element whose
#: windows did not change is recognised by identity (``window_assigner``).
GLOBAL_WINDOWS = (GlobalWindow(),)

# A window fn's cache of windows by start, per process: every assigner of equal window fns
# (a WindowInto, a DoFn's re-stamped outputs, in any bundle) hands out the same tuples.
# Cleared when it grows past this many entries, so a long stream does not keep every window.
MAX_CACHED_WINDOWS = 100_000
_ASSIGNMENTS: dict[WindowFn, Callable[[int], tuple]] = {}
#: a FixedWindows assignment's (size, offset, its cache's ``get``), by the assignment
_FIXED_PARTS: dict[Callable[[int], tuple], tuple[int, int, Callable[[int], tuple | None]]] = {}


def cached_assignment(windowfn: WindowFn) -> Callable[[int], tuple] | None:
    """For the built-in window fns (exactly, not subclasses that may override ``assign``):
    the windows of a timestamp in microseconds, each distinct tuple of windows built once
    per process, since nearly every element shares its windows with many others."""
    kind = type(windowfn)
    if kind is not GlobalWindows and kind is not FixedWindows and kind is not SlidingWindows:
        return None
    assignment = _ASSIGNMENTS.get(windowfn)
    if assignment is None:
        assignment = _ASSIGNMENTS[windowfn] = _assignment(windowfn)
    return assignment


def _assignment(windowfn: WindowFn) -> Callable[[int], tuple]:
    if isinstance(windowfn, GlobalWindows):
        return lambda micros: GLOBAL_WINDOWS
    if isinstance(windowfn, FixedWindows):
        size, offset = windowfn.size.micros, windowfn.offset.micros
        fixed_cache: dict[int, tuple] = {}

        def fixed(micros: int) -> tuple:
            start = micros - (micros - offset) % size
            windows = fixed_cache.get(start)
            if windows is None:
                if len(fixed_cache) >= MAX_CACHED_WINDOWS:
                    fixed_cache.clear()
                windows = fixed_cache[start] = (
                    IntervalWindow(Timestamp.from_micros(start), Timestamp.from_micros(start + size)),
                )
            return windows

        _FIXED_PARTS[fixed] = (size, offset, fixed_cache.get)
        return fixed
    assert isinstance(windowfn, SlidingWindows)  # cached_assignment admits these three
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
            if len(sliding_cache) >= MAX_CACHED_WINDOWS:
                sliding_cache.clear()
            windows = sliding_cache[(last_start, count)] = tuple(
                IntervalWindow(Timestamp.from_micros(last_start - k * period), Timestamp.from_micros(last_start - k * period + size))
                for k in range(count)
            )
        return windows

    return sliding


def fixed_window_parts(assign: Callable[[int], tuple]) -> tuple[int, int, Callable[[int], tuple | None]] | None:
    """For a ``FixedWindows`` assignment (``cached_assignment``): its size and offset in
    microseconds and its cache's ``get``, by window start, so that a caller running once
    per element looks the windows up inline, ``get(micros - (micros - offset) % size)``,
    calling ``assign`` only when that is None. None for any other assignment."""
    return _FIXED_PARTS.get(assign)


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


def window_assigner(
    windowfn: WindowFn, label: str, location: str, send: Callable[[WindowedValue], None]
) -> Callable[[WindowedValue], None]:
    """WindowInto: a receiver that sends on the element once per window it was in,
    re-windowed by the window fn.

    As in Beam, the pane becomes unknown and an element in several windows is assigned
    once per window (so it can be duplicated). An element whose windows and pane would not
    change (a built-in window fn applied again, ``GlobalWindows`` over globally windowed
    elements) is sent on as it is, not copied. A failing user window fn is reported
    naming the transform (``label``, applied at ``location``).
    """
    assign = windowfn.assign
    AssignContext = WindowFn.AssignContext
    cached = cached_assignment(windowfn)
    unknown = PANE_INFO_UNKNOWN
    if cached is not None:

        def reassign_cached(wv: WindowedValue) -> None:
            before = wv[2]
            if not before:
                return  # in no window (a gap between sliding windows): nothing to assign
            micros = wv[1]
            windows = cached(micros)
            if windows is before and wv[3] is unknown:
                copy = wv  # the cached assignment returned the very tuple it has: no change
            else:
                copy = new_windowed_value((wv[0], micros, windows, unknown))
            # The built-in fns depend on the timestamp alone: the same output per input window.
            send(copy)
            for _ in range(len(before) - 1):
                send(copy)

        return reassign_cached

    def reassign(wv: WindowedValue) -> None:
        value, micros = wv.value, wv.timestamp_micros
        timestamp = Timestamp.from_micros(micros)
        out = []
        try:
            for window in wv.windows:
                windows = tuple(assign(AssignContext(timestamp, value, window)))
                out.append(WindowedValue(value, micros, windows, unknown))
        except Exception as error:
            raise UserCodeError(label, location, error, value) from error
        for copy in out:
            send(copy)

    return reassign
