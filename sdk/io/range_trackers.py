"""Beam's range trackers: how a ``BoundedSource.read`` claims positions within its bundle.

- ``OffsetRangeTracker(start, stop)``: integer offsets (records, bytes);
- ``OrderedPositionRangeTracker``: any ordered positions, given a mapping to fractions;
- ``LexicographicKeyRangeTracker``: byte-string or string keys;
- ``UnsplittableRangeTracker``: wraps a tracker and refuses every split.

Reading ``[A, B)`` returns the records whose split points are in ``[A, B)``; a read calls
``try_claim(position)`` for each record starting at a split point and stops at the first
``False``. sparkbeam reads each bundle whole (no dynamic splitting while reading), but the
trackers behave as Beam's, so a source written for Beam reads the same records.

>>> tracker = OffsetRangeTracker(0, 3)
>>> [tracker.try_claim(i) for i in range(4)]
[True, True, True, False]
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.io.iobase import RangeTracker

__all__ = [
    "LexicographicKeyRangeTracker",
    "OffsetRangeTracker",
    "OrderedPositionRangeTracker",
    "UnsplittableRangeTracker",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class OffsetRangeTracker(RangeTracker):
    """Integer offsets in ``[start, end)``; ``end`` may be ``OFFSET_INFINITY`` (not splittable)."""

    OFFSET_INFINITY = float("inf")

    def __init__(self, start: int, end: int | float) -> None:
        if start is None or end is None:
            msg = f"OffsetRangeTracker: start and end offsets must not be None, got [{start!r}, {end!r})"
            raise ValueError(msg)
        if not _is_int(start) or not (_is_int(end) or end == self.OFFSET_INFINITY):
            msg = f"OffsetRangeTracker: offsets must be ints (end may be OFFSET_INFINITY), got [{start!r}, {end!r})"
            raise TypeError(msg)
        if start > end:
            msg = f"OffsetRangeTracker: start {start} is after end {end}"
            raise ValueError(msg)
        self._start_offset = start
        self._stop_offset = end
        self._last_record_start = -1
        self._last_attempted_record_start = -1
        self._offset_of_last_split_point = -1
        self._lock = threading.Lock()
        self._split_points_seen = 0
        self._split_points_unclaimed_callback: Callable[[Any], Any] | None = None

    def start_position(self) -> int:
        return self._start_offset

    def stop_position(self) -> Any:
        return self._stop_offset

    @property
    def last_record_start(self) -> int:
        return self._last_record_start

    @property
    def last_attempted_record_start(self) -> int:
        """The last position ``try_claim`` was called with, whether or not it was claimed."""
        return self._last_attempted_record_start

    def _validate_record_start(self, record_start: int, split_point: bool) -> None:
        if record_start < self._last_record_start:
            msg = (
                f"Trying to return a record [starting at {record_start}] which is before the "
                f"last-returned record [starting at {self._last_record_start}]"
            )
            raise ValueError(msg)
        if split_point and self._offset_of_last_split_point != -1 and record_start == self._offset_of_last_split_point:
            msg = f"Record at a split point has same offset as the previous split point: {record_start}"
            raise ValueError(msg)
        if not split_point and self._last_record_start == -1:
            msg = f"The first record [starting at {record_start}] must be at a split point"
            raise ValueError(msg)

    def try_claim(self, record_start: int) -> bool:
        with self._lock:
            if record_start <= self._last_attempted_record_start:
                msg = (
                    f"Trying to return a record [starting at {record_start}] which is not greater than "
                    f"the last-attempted record [starting at {self._last_attempted_record_start}]"
                )
                raise ValueError(msg)
            self._validate_record_start(record_start, True)
            self._last_attempted_record_start = record_start
            if record_start >= self._stop_offset:
                return False
            self._offset_of_last_split_point = record_start
            self._last_record_start = record_start
            self._split_points_seen += 1
            return True

    def set_current_position(self, record_start: int) -> None:
        with self._lock:
            self._validate_record_start(record_start, False)
            self._last_record_start = record_start

    def try_split(self, split_offset: int) -> tuple[int, float] | None:
        with self._lock:
            if self._stop_offset == self.OFFSET_INFINITY or self._last_record_start == -1:
                return None  # an endless range, or nothing read yet
            if split_offset <= self._last_record_start:
                return None  # already consumed
            if split_offset < self._start_offset or split_offset >= self._stop_offset:
                return None
            fraction = (split_offset - self._start_offset) / (self._stop_offset - self._start_offset)
            self._stop_offset = split_offset
            return split_offset, fraction

    def position_to_fraction(self, pos: float, start: float, stop: float) -> float:
        fraction = (pos - start) / (stop - start) if start != stop else 0.0
        return max(0.0, min(1.0, fraction))

    def fraction_consumed(self) -> float:
        with self._lock:
            return self.position_to_fraction(self._last_record_start, self._start_offset, self._stop_offset)

    def position_at_fraction(self, fraction: float) -> int:
        if self._stop_offset == self.OFFSET_INFINITY:
            msg = "OffsetRangeTracker.position_at_fraction: an endless range has no position at a fraction"
            raise ValueError(msg)
        return math.ceil(self._start_offset + fraction * (self._stop_offset - self._start_offset))

    def split_points(self) -> tuple[Any, Any]:
        with self._lock:
            consumed = 0 if self._split_points_seen == 0 else self._split_points_seen - 1
            unclaimed = (
                self._split_points_unclaimed_callback(self._stop_offset)
                if self._split_points_unclaimed_callback
                else RangeTracker.SPLIT_POINTS_UNKNOWN
            )
            remaining = RangeTracker.SPLIT_POINTS_UNKNOWN if unclaimed is RangeTracker.SPLIT_POINTS_UNKNOWN else unclaimed + 1
            return consumed, remaining

    def set_split_points_unclaimed_callback(self, callback: Callable[[Any], Any]) -> None:
        self._split_points_unclaimed_callback = callback

    def __repr__(self) -> str:
        return f"OffsetRangeTracker([{self._start_offset}, {self._stop_offset}))"


class OrderedPositionRangeTracker(RangeTracker):
    """Positions of any ordered type; subclasses map them to and from fractions
    (``fraction_to_position``, ``position_to_fraction``). None means unbounded."""

    UNSTARTED = object()

    def __init__(self, start_position: Any = None, stop_position: Any = None) -> None:
        self._start_position = start_position
        self._stop_position = stop_position
        self._lock = threading.Lock()
        self._last_claim: Any = self.UNSTARTED

    def start_position(self) -> Any:
        return self._start_position

    def stop_position(self) -> Any:
        with self._lock:
            return self._stop_position

    def try_claim(self, position: Any) -> bool:
        with self._lock:
            if self._last_claim is not self.UNSTARTED and position < self._last_claim:
                msg = f"Positions must be claimed in order: claim {position!r} attempted after claim {self._last_claim!r}"
                raise ValueError(msg)
            if self._start_position is not None and position < self._start_position:
                msg = f"Claim {position!r} is before start {self._start_position!r}"
                raise ValueError(msg)
            if self._stop_position is None or position < self._stop_position:
                self._last_claim = position
                return True
            return False

    def set_current_position(self, position: Any) -> None:
        msg = f"{type(self).__name__}.set_current_position: every record of an ordered-position range is a split point; use try_claim"
        raise NotImplementedError(msg)

    def position_at_fraction(self, fraction: float) -> Any:
        return self.fraction_to_position(fraction, self._start_position, self._stop_position)

    def try_split(self, position: Any) -> tuple[Any, float] | None:
        with self._lock:
            if (self._stop_position is not None and position >= self._stop_position) or (
                self._start_position is not None and position <= self._start_position
            ):
                return None
            if self._last_claim is self.UNSTARTED or self._last_claim < position:
                fraction = self.position_to_fraction(position, self._start_position, self._stop_position)
                self._stop_position = position
                return position, fraction
            return None

    def fraction_consumed(self) -> float:
        if self._last_claim is self.UNSTARTED:
            return 0
        return self.position_to_fraction(self._last_claim, self._start_position, self._stop_position)

    def fraction_to_position(self, fraction: float, start: Any, end: Any) -> Any:
        raise NotImplementedError

    def position_to_fraction(self, position: Any, start: Any, end: Any) -> float:
        raise NotImplementedError


class UnsplittableRangeTracker(RangeTracker):
    """Delegates to ``range_tracker`` and refuses every ``try_split`` (one split point)."""

    def __init__(self, range_tracker: RangeTracker) -> None:
        if not isinstance(range_tracker, RangeTracker):
            msg = f"UnsplittableRangeTracker wraps a RangeTracker, got {range_tracker!r}"
            raise TypeError(msg)
        self._range_tracker = range_tracker

    def start_position(self) -> Any:
        return self._range_tracker.start_position()

    def stop_position(self) -> Any:
        return self._range_tracker.stop_position()

    def position_at_fraction(self, fraction: float) -> Any:
        return self._range_tracker.position_at_fraction(fraction)

    def try_claim(self, position: Any) -> bool:
        return self._range_tracker.try_claim(position)

    def try_split(self, position: Any) -> None:
        return None

    def set_current_position(self, position: Any) -> None:
        self._range_tracker.set_current_position(position)

    def fraction_consumed(self) -> float:
        return self._range_tracker.fraction_consumed()

    def split_points(self) -> tuple[int, int]:
        return 0, 1

    def set_split_points_unclaimed_callback(self, callback: Callable[[Any], Any]) -> None:
        self._range_tracker.set_split_points_unclaimed_callback(callback)


class LexicographicKeyRangeTracker(OrderedPositionRangeTracker):
    """Keys (bytes or str) in lexicographic order; fractions read a key as the base-256
    number ``0.k0 k1 k2...``, as Beam does."""

    @classmethod
    def fraction_to_position(cls, fraction: float, start: Any = None, end: Any = None) -> Any:
        if not 0 <= fraction <= 1:
            msg = f"fraction must be in [0, 1], got {fraction!r}"
            raise ValueError(msg)
        if start is None:
            start = b""
        if fraction == 0:
            return start
        if fraction == 1:
            return end
        start_bytes = start.encode() if isinstance(start, str) else start
        end_bytes = end.encode() if isinstance(end, str) else end
        if not end_bytes:
            common = len(start_bytes) - len(start_bytes.lstrip(b"\xff"))
        else:
            common = next((i for i, (s, e) in enumerate(zip(start_bytes, end_bytes)) if s != e), min(len(start_bytes), len(end_bytes)))
        # ~53 bits of relative precision in a float, made absolute for keys this long
        precision = common + int(-math.log(fraction, 256)) + 7
        low = cls._bytestring_to_int(start_bytes, precision)
        high = cls._bytestring_to_int(end_bytes, precision) if end_bytes else 1 << (precision * 8)
        key = low + int((high - low) * fraction)
        if key == low:  # rounding: never the start or the end unless the fraction says so
            key += 1
        elif key == high:
            key -= 1
        position = cls._bytestring_from_int(key, precision).rstrip(b"\0")
        if isinstance(start, bytes):
            return position
        return position.decode(encoding="unicode_escape", errors="replace")

    @classmethod
    def position_to_fraction(cls, key: Any = None, start: Any = None, end: Any = None) -> float:
        if not key:
            return 0
        if start is None:
            start = "" if isinstance(key, str) else b""
        precision = len(start) + 7
        if key.startswith(start):
            trailing = "\0" if isinstance(key, str) else b"\0"
            precision = max(precision, len(key) - len(key[len(start):].strip(trailing)) + 7)
        low = cls._bytestring_to_int(start, precision)
        position = cls._bytestring_to_int(key, precision)
        high = cls._bytestring_to_int(end, precision) if end else 1 << (precision * 8)
        return (position - low) / (high - low)

    @staticmethod
    def _bytestring_to_int(value: Any, precision: int) -> int:
        if not value:
            return 0
        if isinstance(value, str):
            value = value.encode()
        value = value[:precision].ljust(precision, b"\0")
        return int.from_bytes(value, "big")

    @staticmethod
    def _bytestring_from_int(value: int, precision: int) -> bytes:
        return value.to_bytes(precision, "big")


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.range_trackers")
