"""Windows and window functions: how elements are grouped in event time.

``GlobalWindows``, ``FixedWindows(size, offset)``, ``SlidingWindows(size, period, offset)``
and ``Sessions(gap_size)`` have Beam's names, arguments (seconds or ``Duration``) and
behaviour; user window functions subclass ``WindowFn`` or ``NonMergingWindowFn``.

>>> FixedWindows(60).assign(WindowFn.AssignContext(125))
[IntervalWindow(Timestamp(120), Timestamp(180))]
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

import attrs

from sparkbeam.utils.timestamp import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Duration,
    DurationLike,
    Timestamp,
    TimestampLike,
    seconds_text,
)

__all__ = [
    "BoundedWindow",
    "FixedWindows",
    "GlobalWindow",
    "GlobalWindows",
    "IntervalWindow",
    "NonMergingWindowFn",
    "Sessions",
    "SlidingWindows",
    "TimestampCombiner",
    "TimestampedValue",
    "WindowFn",
]

# Beam's global window ends one day before the largest timestamp, so that
# end-of-window timers and holds still fit in range.
_GLOBAL_WINDOW_END = Timestamp.from_micros(9_223_371_950_454_775_000)


class TimestampCombiner(enum.Enum):
    """How a grouping stamps its output panes, and so how it holds its watermark back."""

    OUTPUT_AT_EOW = "END_OF_WINDOW"
    OUTPUT_AT_EARLIEST = "EARLIEST_IN_PANE"
    OUTPUT_AT_LATEST = "LATEST_IN_PANE"
    OUTPUT_AT_EARLIEST_TRANSFORMED = "EARLIEST_TRANSFORMED"

    def __repr__(self) -> str:
        return f"TimestampCombiner.{self.name}"


class BoundedWindow(abc.ABC):
    """A window: a span of event time ending at ``end`` (exclusive)."""

    @property
    @abc.abstractmethod
    def start(self) -> Timestamp: ...

    @property
    @abc.abstractmethod
    def end(self) -> Timestamp: ...

    def max_timestamp(self) -> Timestamp:
        """The last instant in the window: ``end`` minus one microsecond."""
        return self.end.predecessor()


@attrs.frozen(repr=False, order=False, cache_hash=True)
class IntervalWindow(BoundedWindow):
    """The window [start, end). ``IntervalWindow(0, 60)`` is the first minute."""

    start: Timestamp = attrs.field(converter=Timestamp.of)  # type: ignore[misc]  # mypy's attrs plugin cannot read classmethod converters
    end: Timestamp = attrs.field(converter=Timestamp.of)  # type: ignore[misc]  # mypy's attrs plugin cannot read classmethod converters

    def __attrs_post_init__(self) -> None:
        if self.end.micros <= self.start.micros:
            msg = f"IntervalWindow end {self.end!r} must be after its start {self.start!r}"
            raise ValueError(msg)

    def intersects(self, other: IntervalWindow) -> bool:
        return other.start.micros < self.end.micros and self.start.micros < other.end.micros

    def union(self, other: IntervalWindow) -> IntervalWindow:
        return IntervalWindow(min(self.start, other.start), max(self.end, other.end))

    def contains(self, timestamp: TimestampLike) -> bool:
        micros = Timestamp.of(timestamp).micros
        return self.start.micros <= micros < self.end.micros

    # Ordered by end, then start, as Beam orders windows.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BoundedWindow):
            return NotImplemented
        return (self.end.micros, self.start.micros) < (other.end.micros, other.start.micros)

    def __repr__(self) -> str:
        return f"IntervalWindow({self.start!r}, {self.end!r})"

    def __str__(self) -> str:
        return f"[{seconds_text(self.start.micros)}, {seconds_text(self.end.micros)})"


class GlobalWindow(BoundedWindow):
    """The single window that covers all of event time (there is one instance)."""

    _instance: GlobalWindow | None = None

    def __new__(cls) -> GlobalWindow:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self):
        return (GlobalWindow, ())

    @property
    def start(self) -> Timestamp:
        return MIN_TIMESTAMP

    @property
    def end(self) -> Timestamp:
        return _GLOBAL_WINDOW_END

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalWindow)

    def __hash__(self) -> int:
        # A constant: the default (identity-based) hash would differ between the
        # executor processes that shuffle by it.
        return 0x9E3779B9

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BoundedWindow):
            return NotImplemented
        return self.end.micros < other.end.micros

    def __repr__(self) -> str:
        return "GlobalWindow"


V = TypeVar("V")


@attrs.frozen(init=False)
class TimestampedValue(Generic[V]):
    """A value with an event timestamp; yield it from a DoFn to set an element's time.

    As in Beam's Python SDK, the output is then windowed again by the DoFn's input window
    fn from the new timestamp (once per input window), with an unknown pane: after
    ``FixedWindows`` it lands in the window of its new time, after ``Sessions`` in a new
    session starting there.
    """

    value: Any
    timestamp: Timestamp

    def __init__(self, value: V, timestamp: TimestampLike) -> None:
        self.__attrs_init__(value, Timestamp.of(timestamp))


class WindowFn(abc.ABC):
    """Assigns windows to elements and, for merging window functions, merges them."""

    class AssignContext:
        """What ``assign`` sees: the element's timestamp, the element, its current window."""

        __slots__ = ("element", "timestamp", "window")

        def __init__(
            self,
            timestamp: TimestampLike,
            element: Any = None,
            window: BoundedWindow | None = None,
        ) -> None:
            self.timestamp = Timestamp.of(timestamp)
            self.element = element
            self.window = window

    class MergeContext:
        """What ``merge`` sees: the windows to consider; call ``merge`` for each merge."""

        def __init__(self, windows: Iterable[BoundedWindow]) -> None:
            self.windows = list(windows)

        def merge(self, to_be_merged: Iterable[BoundedWindow], merge_result: BoundedWindow) -> None:
            raise NotImplementedError

    @abc.abstractmethod
    def assign(self, assign_context: WindowFn.AssignContext) -> Iterable[BoundedWindow]:
        """The windows an element belongs to."""

    @abc.abstractmethod
    def merge(self, merge_context: WindowFn.MergeContext) -> None:
        """Merge windows by calling ``merge_context.merge``; a no-op for non-merging fns."""

    def is_merging(self) -> bool:
        return True

    def get_window_coder(self) -> None:
        """Beam API surface; sparkbeam pickles windows, so no coder is needed."""
        return None

    def get_transformed_output_time(
        self, window: BoundedWindow, input_timestamp: Timestamp
    ) -> Timestamp:
        """The output time an element contributes under OUTPUT_AT_EARLIEST_TRANSFORMED."""
        return input_timestamp

    def overlap_output_floor(self, window: BoundedWindow) -> Timestamp | None:
        """The earliest output time a pane of ``window`` may take when windows overlap.

        The overlapping-window rule: a pane of window N+1 is never stamped before the end
        of window N, so a downstream watermark is not held back by later overlapping
        windows. ``None`` (the default) means the window fn's windows do not overlap.
        """
        return None


class NonMergingWindowFn(WindowFn):
    """A window function whose windows never merge."""

    def is_merging(self) -> bool:
        return False

    def merge(self, merge_context: WindowFn.MergeContext) -> None:
        return None


@attrs.frozen
class GlobalWindows(NonMergingWindowFn):
    """Every element in the one ``GlobalWindow`` (the default)."""

    def assign(self, assign_context: WindowFn.AssignContext) -> list[BoundedWindow]:
        return [GlobalWindow()]


def _positive_duration(owner: str, name: str, value: DurationLike) -> Duration:
    duration = Duration.of(value)
    if duration.micros <= 0:
        msg = f"{owner}: {name} must be a positive duration, got {value!r}"
        raise ValueError(msg)
    return duration


@attrs.frozen(init=False)
class FixedWindows(NonMergingWindowFn):
    """Windows of ``size`` that tile time: [N*size + offset, (N+1)*size + offset)."""

    size: Duration
    offset: Timestamp

    def __init__(self, size: DurationLike, offset: TimestampLike = 0) -> None:
        size_d = _positive_duration("FixedWindows", "size", size)
        offset_ts = Timestamp.from_micros(Timestamp.of(offset).micros % size_d.micros)
        self.__attrs_init__(size_d, offset_ts)

    def assign(self, assign_context: WindowFn.AssignContext) -> list[BoundedWindow]:
        micros = assign_context.timestamp.micros
        size = self.size.micros
        start = micros - (micros - self.offset.micros) % size
        return [IntervalWindow(Timestamp.from_micros(start), Timestamp.from_micros(start + size))]


@attrs.frozen(init=False)
class SlidingWindows(NonMergingWindowFn):
    """Windows of ``size`` starting every ``period``: [N*period + offset, ... + size)."""

    size: Duration
    period: Duration
    offset: Timestamp

    def __init__(
        self, size: DurationLike, period: DurationLike, offset: TimestampLike = 0
    ) -> None:
        size_d = _positive_duration("SlidingWindows", "size", size)
        period_d = _positive_duration("SlidingWindows", "period", period)
        offset_ts = Timestamp.from_micros(Timestamp.of(offset).micros % period_d.micros)
        self.__attrs_init__(size_d, period_d, offset_ts)

    def assign(self, assign_context: WindowFn.AssignContext) -> list[BoundedWindow]:
        micros = assign_context.timestamp.micros
        period, size = self.period.micros, self.size.micros
        last_start = micros - (micros - self.offset.micros) % period
        return [
            IntervalWindow(Timestamp.from_micros(start), Timestamp.from_micros(start + size))
            for start in range(last_start, micros - size, -period)
        ]

    def overlap_output_floor(self, window: BoundedWindow) -> Timestamp | None:
        if self.size.micros <= self.period.micros:
            return None  # windows do not overlap (hopping with gaps, or tumbling)
        # The previous window ends one period before this one.
        return Timestamp.from_micros(window.end.micros - self.period.micros)


@attrs.frozen(init=False)
class Sessions(WindowFn):
    """Per-key sessions: an element opens [t, t + gap); overlapping windows merge.

    Windows that only touch (one ends exactly where the next starts) do not merge.
    """

    gap_size: Duration

    def __init__(self, gap_size: DurationLike) -> None:
        self.__attrs_init__(_positive_duration("Sessions", "gap_size", gap_size))

    def assign(self, assign_context: WindowFn.AssignContext) -> list[BoundedWindow]:
        start = assign_context.timestamp
        return [IntervalWindow(start, Timestamp.from_micros(start.micros + self.gap_size.micros))]

    def merge(self, merge_context: WindowFn.MergeContext) -> None:
        run: list[BoundedWindow] = []
        run_end = MIN_TIMESTAMP.micros
        for window in sorted(merge_context.windows, key=lambda w: (w.start.micros, w.end.micros)):
            if run and window.start.micros < run_end:
                run.append(window)
                run_end = max(run_end, window.end.micros)
                continue
            if len(run) > 1:
                merge_context.merge(run, IntervalWindow(run[0].start, Timestamp.from_micros(run_end)))
            run = [window]
            run_end = window.end.micros
        if len(run) > 1:
            merge_context.merge(run, IntervalWindow(run[0].start, Timestamp.from_micros(run_end)))


__all__ += ["MAX_TIMESTAMP", "MIN_TIMESTAMP", "Duration", "Timestamp"]
