"""Event time as integer microseconds: ``Timestamp`` (a point) and ``Duration`` (a span).

Beam's Python SDK counts time in microseconds and accepts seconds (int or float) wherever
a time is expected; so do we. Both classes compare with plain numbers of seconds, as Beam's
do, because user pipelines rely on writing ``if ts > 10:``.

>>> Timestamp(10) + Duration(5) == 15
True
"""

from __future__ import annotations

import datetime
import functools
import time
from typing import Union

from sparkbeam.beam_surface import module_getattr

__all__ = [
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "TIME_GRANULARITY",
    "Duration",
    "DurationTypes",
    "Timestamp",
    "TimestampTypes",
    "seconds_text",
    "to_micros",
]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

# Beam's bounds: the smallest and largest 64-bit values that are multiples of 1000 µs.
_MIN_MICROS = -9_223_372_036_854_775_000
_MAX_MICROS = 9_223_372_036_854_775_000


def _seconds_to_micros(seconds: int | float) -> int:
    if isinstance(seconds, int):
        return seconds * 1_000_000
    # round() rather than int(): 0.1 seconds must be exactly 100_000 µs.
    return round(seconds * 1_000_000)


def seconds_text(micros: int) -> str:
    """Exact seconds for a count of microseconds: ``90``, ``1.5``, ``-0.000001``, ``1793520000``."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}" if not frac else f"{sign}{whole}.{frac:06d}".rstrip("0")


def beam_seconds_text(micros: int) -> str:
    """Seconds as Beam's ``Timestamp`` and ``Duration`` write them: whole, or with all six
    digits of microseconds (``90``, ``1.500000``, ``-0.000001``)."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}" if not frac else f"{sign}{whole}.{frac:06d}"


def to_micros(value: TimestampLike | DurationLike) -> int:
    """Microseconds for a ``Timestamp``, a ``Duration`` or a number of seconds."""
    if isinstance(value, (Timestamp, Duration)):
        return value.micros
    if isinstance(value, bool):
        msg = f"a time must be a number of seconds, a Timestamp or a Duration, not {value!r}"
        raise TypeError(msg)
    if isinstance(value, (int, float)):
        return _seconds_to_micros(value)
    if isinstance(value, datetime.datetime):
        return Timestamp.from_utc_datetime(value).micros
    msg = f"a time must be a number of seconds, a Timestamp or a Duration, not {value!r}"
    raise TypeError(msg)


@functools.total_ordering
class Timestamp:
    """A point in event time, with microsecond precision.

    ``Timestamp(seconds=0, micros=0)``; ``Timestamp.of(x)`` accepts a Timestamp or seconds.
    Comparisons, hashing and equality are on the microsecond count (equality with a number
    of seconds holds as in Beam).
    """

    __slots__ = ("micros",)
    micros: int

    def __init__(self, seconds: int | float = 0, micros: int = 0) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            msg = f"Timestamp seconds must be a number, not {seconds!r}"
            raise TypeError(msg)
        object.__setattr__(self, "micros", _seconds_to_micros(seconds) + int(micros))

    def __setattr__(self, name: str, value: object) -> None:
        msg = "Timestamp is immutable"
        raise AttributeError(msg)

    def __reduce__(self):  # pickles as the microsecond count alone
        return (_timestamp_from_micros, (self.micros,))

    @classmethod
    def of(cls, value: TimestampLike) -> Timestamp:
        """A Timestamp from a Timestamp (returned as is) or a number of seconds."""
        if type(value) is Timestamp:
            return value
        if isinstance(value, Duration):
            msg = f"expected a Timestamp or seconds, got the Duration {value!r}"
            raise TypeError(msg)
        return _timestamp_from_micros(to_micros(value))

    @classmethod
    def from_micros(cls, micros: int) -> Timestamp:
        return _timestamp_from_micros(int(micros))

    @classmethod
    def now(cls) -> Timestamp:
        return _timestamp_from_micros(time.time_ns() // 1000)

    @classmethod
    def from_utc_datetime(cls, dt: datetime.datetime) -> Timestamp:
        if dt.tzinfo is None:
            msg = (
                f"naive datetime {dt!r} has no time zone; attach one "
                "(datetime.timezone.utc) so the instant is unambiguous"
            )
            raise ValueError(msg)
        delta = dt - _EPOCH
        return _timestamp_from_micros(
            (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
        )

    @classmethod
    def from_rfc3339(cls, text: str) -> Timestamp:
        normalized = text.strip().replace("Z", "+00:00").replace("z", "+00:00")
        try:
            dt = datetime.datetime.fromisoformat(normalized)
        except ValueError as error:
            msg = f"{text!r} is not an RFC 3339 timestamp"
            raise ValueError(msg) from error
        return cls.from_utc_datetime(dt)

    def to_utc_datetime(self, has_tz: bool = False) -> datetime.datetime:
        dt = _EPOCH + datetime.timedelta(microseconds=self.micros)
        return dt if has_tz else dt.replace(tzinfo=None)

    def to_rfc3339(self) -> str:
        """RFC 3339 text in UTC, as Beam writes it: no fraction on whole seconds, else six
        digits (``2026-01-01T00:00:00Z``, ``2026-01-01T00:00:00.500000Z``)."""
        return self.to_utc_datetime().isoformat() + "Z"

    def seconds(self) -> float:
        return self.micros / 1_000_000

    def predecessor(self) -> Timestamp:
        return _timestamp_from_micros(self.micros - 1)

    def successor(self) -> Timestamp:
        return _timestamp_from_micros(self.micros + 1)

    def __float__(self) -> float:
        return self.micros / 1_000_000

    def __int__(self) -> int:
        # Rounds down (toward -inf), as Beam's does.
        return self.micros // 1_000_000

    def __repr__(self) -> str:
        # Beam's text (users format timestamps into their output): MIN and MAX as numbers.
        return f"Timestamp({beam_seconds_text(self.micros)})"

    def __str__(self) -> str:
        return repr(self)

    # Beam compares timestamps with numbers of seconds; we keep that surface.
    def __eq__(self, other: object) -> bool:
        if type(other) is Timestamp:  # the common case, first
            return self.micros == other.micros
        if isinstance(other, Duration):
            return NotImplemented
        try:
            return self.micros == to_micros(other)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented

    def __lt__(self, other: object) -> bool:
        if type(other) is Timestamp:
            return self.micros < other.micros
        if isinstance(other, Duration):
            return NotImplemented
        try:
            return self.micros < to_micros(other)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented

    def __hash__(self) -> int:
        return hash(self.micros)

    def __add__(self, other: DurationLike) -> Timestamp:
        if isinstance(other, Timestamp):
            msg = "cannot add two Timestamps; add a Duration or seconds"
            raise TypeError(msg)
        return _timestamp_from_micros(self.micros + to_micros(other))

    __radd__ = __add__

    def __sub__(self, other):  # Timestamp - Timestamp = Duration; Timestamp - Duration = Timestamp
        if isinstance(other, Timestamp):
            return Duration(micros=self.micros - other.micros)
        return _timestamp_from_micros(self.micros - to_micros(other))

    def __mod__(self, other: DurationLike) -> Duration:
        return Duration(micros=self.micros % to_micros(other))


def _timestamp_from_micros(micros: int) -> Timestamp:
    ts = object.__new__(Timestamp)
    object.__setattr__(ts, "micros", micros)
    return ts


@functools.total_ordering
class Duration:
    """A span of event or processing time, with microsecond precision."""

    __slots__ = ("micros",)
    micros: int

    def __init__(self, seconds: int | float = 0, micros: int = 0) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            msg = f"Duration seconds must be a number, not {seconds!r}"
            raise TypeError(msg)
        object.__setattr__(self, "micros", _seconds_to_micros(seconds) + int(micros))

    def __setattr__(self, name: str, value: object) -> None:
        msg = "Duration is immutable"
        raise AttributeError(msg)

    def __reduce__(self):
        return (Duration, (0, self.micros))

    @classmethod
    def of(cls, value: DurationLike) -> Duration:
        if type(value) is Duration:
            return value
        if isinstance(value, Timestamp):
            msg = f"expected a Duration or seconds, got the Timestamp {value!r}"
            raise TypeError(msg)
        return Duration(micros=to_micros(value))

    @classmethod
    def from_micros(cls, micros: int) -> Duration:
        return Duration(micros=int(micros))

    def __float__(self) -> float:
        return self.micros / 1_000_000

    def __int__(self) -> int:
        return int(self.micros / 1_000_000)

    def __repr__(self) -> str:
        return f"Duration({beam_seconds_text(self.micros)})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Timestamp):
            return NotImplemented
        try:
            return self.micros == to_micros(other)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Timestamp):
            return NotImplemented
        try:
            return self.micros < to_micros(other)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented

    def __hash__(self) -> int:
        return hash(self.micros)

    def __neg__(self) -> Duration:
        return Duration(micros=-self.micros)

    def __add__(self, other):
        if isinstance(other, Timestamp):
            return other + self
        return Duration(micros=self.micros + to_micros(other))

    __radd__ = __add__

    def __sub__(self, other: DurationLike) -> Duration:
        return Duration(micros=self.micros - to_micros(other))

    def __mul__(self, factor: int | float) -> Duration:
        return Duration(micros=round(self.micros * factor))

    __rmul__ = __mul__

    def __mod__(self, other: DurationLike) -> Duration:
        return Duration(micros=self.micros % to_micros(other))


TimestampLike = Union[Timestamp, int, float]  # noqa: UP007 (a runtime alias on Python 3.10)
DurationLike = Union[Duration, int, float]  # noqa: UP007
# Beam's names for the same aliases (apache_beam.utils.timestamp).
TimestampTypes = TimestampLike
DurationTypes = DurationLike

MIN_TIMESTAMP = _timestamp_from_micros(_MIN_MICROS)
MAX_TIMESTAMP = _timestamp_from_micros(_MAX_MICROS)
TIME_GRANULARITY = Duration(micros=1)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.utils.timestamp")
