"""Processing-time clocks, injected wherever the engine needs "now".

The engine itself takes ``now`` as an argument; a runner (or a test harness) reads it
from a ``Clock``. ``WallClock`` reads the system clock, ``ManualClock`` only moves when
told to, so tests of processing-time triggers are exact.

>>> clock = ManualClock(start_micros=0)
>>> clock.advance(5_000_000)
>>> clock.now_micros()
5000000
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "WallClock"]


@runtime_checkable
class Clock(Protocol):
    """Anything that tells the current processing time in integer microseconds."""

    def now_micros(self) -> int: ...


class WallClock:
    """The system clock (microseconds since the Unix epoch)."""

    def now_micros(self) -> int:
        return time.time_ns() // 1000

    def __repr__(self) -> str:
        return "WallClock()"


class ManualClock:
    """A clock that stands still until ``advance`` or ``set`` moves it (never backwards)."""

    __slots__ = ("_now",)

    def __init__(self, start_micros: int = 0) -> None:
        self._now = _as_micros("start_micros", start_micros)

    def now_micros(self) -> int:
        return self._now

    def advance(self, micros: int) -> None:
        """Move the clock forward by ``micros`` microseconds."""
        micros = _as_micros("advance", micros)
        if micros < 0:
            msg = f"ManualClock.advance({micros}): processing time cannot move backwards"
            raise ValueError(msg)
        self._now += micros

    def set(self, micros: int) -> None:
        """Move the clock to ``micros``; it must not be before the current time."""
        micros = _as_micros("set", micros)
        if micros < self._now:
            msg = (
                f"ManualClock.set({micros}): the clock is already at {self._now}; "
                "processing time cannot move backwards"
            )
            raise ValueError(msg)
        self._now = micros

    def __repr__(self) -> str:
        return f"ManualClock(now_micros={self._now})"


def _as_micros(what: str, value: int) -> int:
    # Seconds (floats) or Timestamps here would be off by a factor of a million.
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"ManualClock {what} takes integer microseconds, not {value!r}"
        raise TypeError(msg)
    return value
