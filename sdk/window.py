"""Windows and window functions: how elements are grouped in event time.

``GlobalWindows``, ``FixedWindows(size, offset)``, ``SlidingWindows(size, period, offset)``
and ``Sessions(gap_size)`` have Beam's names, arguments (seconds or ``Duration``) and
behaviour; user window functions subclass ``WindowFn`` or ``NonMergingWindowFn``.

>>> FixedWindows(60).assign(WindowFn.AssignContext(125))
[[120.0, 180.0)]
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

import attrs

from sparkbeam.beam_surface import module_getattr
from sparkbeam.utils.timestamp import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Duration,
    DurationLike,
    Timestamp,
    TimestampLike,
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


class BoundedWindow:
    """A window: a span of event time ending at ``end`` (exclusive).

    As in Beam, a window class of your own either subclasses ``IntervalWindow`` (and is
    compared and hashed by its bounds, unless it says otherwise) or subclasses
    ``BoundedWindow``, calls ``super().__init__(end)`` and defines ``__eq__`` and
    ``__hash__`` (the runner groups by window, so windows must compare by value; a hash
    must not depend on the process, so hash numbers or strings, not ``id``).
    """

    # No __slots__ entries: a user subclass gets a __dict__ for its own attributes.
    __slots__ = ()

    def __init__(self, end: TimestampLike) -> None:
        self._end = Timestamp.of(end)  # type: ignore[misc]  # subclasses have a __dict__

    @property
    def start(self) -> Timestamp:
        msg = f"{type(self).__name__} has no start; windows that have one subclass IntervalWindow"
        raise NotImplementedError(msg)

    @property
    def end(self) -> Timestamp:
        return self._end

    def max_timestamp(self) -> Timestamp:
        """The last instant in the window: ``end`` minus one microsecond."""
        return self.end.predecessor()

    def __eq__(self, other: object) -> bool:
        msg = f"{type(self).__name__} must define __eq__ (and __hash__): windows are grouped by value"
        raise NotImplementedError(msg)

    def __hash__(self) -> int:
        msg = f"{type(self).__name__} must define __hash__ (and __eq__): windows are grouped by value"
        raise NotImplementedError(msg)

    # Ordered by end, then arbitrarily but consistently (by hash), as Beam orders windows.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BoundedWindow):
            return NotImplemented
        return window_sort_key(self) < window_sort_key(other)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, BoundedWindow):
            return NotImplemented
        return window_sort_key(self) <= window_sort_key(other)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, BoundedWindow):
            return NotImplemented
        return window_sort_key(self) > window_sort_key(other)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, BoundedWindow):
            return NotImplemented
        return window_sort_key(self) >= window_sort_key(other)

    # Beam's text, which users format into their output (e.g. `str(window)` in a DoFn).
    def __repr__(self) -> str:
        return f"[?, {float(self.end)})"


def window_sort_key(window: BoundedWindow) -> tuple[int, int]:
    """Beam's window order as a sort key: by end, then by start (interval windows) or hash."""
    bounds = getattr(window, "_bounds", None)
    if bounds is not None:  # interval windows: by end, then start
        return bounds[1], bounds[0]
    return window.end.micros, hash(window)


# The attributes that make an IntervalWindow what it is: set once, by __init__.
_INTERVAL_SLOTS = frozenset({"start", "end", "_bounds", "_hash"})


class IntervalWindow(BoundedWindow):
    """The window [start, end). ``IntervalWindow(0, 60)`` is the first minute.

    Compared and hashed by its bounds and its class, as Beam's: a subclass that carries
    data of its own (set in its ``__init__`` after ``super().__init__(start, end)``) is
    equal to another of the same class with the same bounds, unless it defines
    ``__eq__``/``__hash__`` itself.
    """

    # start and end are slots (not properties) so the engine reads them at C speed;
    # _bounds is (start, end) in microseconds, the identity used for equality and hashing.
    __slots__ = ("_bounds", "_hash", "end", "start")
    start: Timestamp  # a slot here, a property on BoundedWindow
    end: Timestamp
    _bounds: tuple[int, int]
    _hash: int

    def __init__(self, start: TimestampLike, end: TimestampLike) -> None:
        if type(start) is not Timestamp:
            start = Timestamp.of(start)
        if type(end) is not Timestamp:
            end = Timestamp.of(end)
        bounds = (start.micros, end.micros)
        if bounds[1] <= bounds[0]:
            msg = f"IntervalWindow end {end!r} must be after its start {start!r}"
            raise ValueError(msg)
        _set_start(self, start)
        _set_end(self, end)
        _set_bounds(self, bounds)
        # hash((start, end)) in microseconds, as Beam's: the same in every process.
        _set_hash(self, hash(bounds))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _INTERVAL_SLOTS:
            msg = f"{type(self).__name__}.{name} cannot be changed: a window's bounds are its identity"
            raise AttributeError(msg)
        object.__setattr__(self, name, value)  # a subclass's own attributes

    def __delattr__(self, name: str) -> None:
        if name in _INTERVAL_SLOTS:
            msg = f"{type(self).__name__}.{name} cannot be deleted: a window's bounds are its identity"
            raise AttributeError(msg)
        object.__delattr__(self, name)

    def __eq__(self, other: object) -> bool:
        # Same class and same bounds, as Beam's IntervalWindow.
        return type(other) is type(self) and self._bounds == other._bounds

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        cls = type(self)
        start, end = self._bounds
        if cls is IntervalWindow:
            return _interval_window, (start, end)
        # A subclass: rebuilt without calling its __init__ (whose signature is its own),
        # then given back the attributes it set.
        return _rebuild_interval_window, (cls, start, end), _subclass_state(self)

    def intersects(self, other: IntervalWindow) -> bool:
        return other.start.micros < self.end.micros and self.start.micros < other.end.micros

    def union(self, other: IntervalWindow) -> IntervalWindow:
        return IntervalWindow(min(self.start, other.start), max(self.end, other.end))

    def contains(self, timestamp: TimestampLike) -> bool:
        micros = Timestamp.of(timestamp).micros
        return self.start.micros <= micros < self.end.micros

    def __repr__(self) -> str:
        return f"[{float(self.start)}, {float(self.end)})"


# The slots' own setters: IntervalWindow.__setattr__ refuses these names to everyone else.
_set_start = IntervalWindow.__dict__["start"].__set__
_set_end = IntervalWindow.__dict__["end"].__set__
_set_bounds = IntervalWindow.__dict__["_bounds"].__set__
_set_hash = IntervalWindow.__dict__["_hash"].__set__


def _init_from_micros(window: IntervalWindow, start_micros: int, end_micros: int) -> IntervalWindow:
    bounds = (start_micros, end_micros)
    _set_start(window, Timestamp.from_micros(start_micros))
    _set_end(window, Timestamp.from_micros(end_micros))
    _set_bounds(window, bounds)
    _set_hash(window, hash(bounds))
    return window


def _interval_window(start_micros: int, end_micros: int) -> IntervalWindow:
    return _init_from_micros(object.__new__(IntervalWindow), start_micros, end_micros)


def _rebuild_interval_window(cls: type[IntervalWindow], start_micros: int, end_micros: int) -> IntervalWindow:
    return _init_from_micros(cls.__new__(cls), start_micros, end_micros)


def _subclass_state(window: IntervalWindow) -> Any:
    own_getstate = getattr(type(window), "__getstate__", None)
    if own_getstate is not None and own_getstate is not getattr(object, "__getstate__", None):
        return own_getstate(window)
    slots = {
        name: getattr(window, name)
        for klass in type(window).__mro__
        for name in klass.__dict__.get("__slots__", ())
        if name not in _INTERVAL_SLOTS and name != "__dict__" and hasattr(window, name)
    }
    attributes = getattr(window, "__dict__", None) or None
    return (attributes, slots or None) if slots else attributes


class GlobalWindow(BoundedWindow):
    """The single window that covers all of event time (there is one instance)."""

    _instance: GlobalWindow | None = None

    def __new__(cls) -> GlobalWindow:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __init__(self) -> None:
        pass  # its end is fixed: nothing to set

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

    def __repr__(self) -> str:
        return "GlobalWindow"


V = TypeVar("V")


@attrs.frozen(init=False, repr=False)
class TimestampedValue(Generic[V]):
    """A value with an event timestamp; yield it from a DoFn to set an element's time.

    As in Beam's Python SDK, the output is then windowed again by the DoFn's input window
    fn from the new timestamp (once per input window), with an unknown pane: after
    ``FixedWindows`` it lands in the window of its new time, after ``Sessions`` in a new
    session starting there.
    """

    value: Any
    #: the timestamp in integer microseconds, which is what the runner reads; ``timestamp``
    #: builds the ``Timestamp`` a user sees only when asked for it
    timestamp_micros: int

    def __init__(self, value: V, timestamp: TimestampLike) -> None:
        # Seconds as int or float are the common case (once per element in a DoFn): they
        # are converted here, as Timestamp.of converts them, without building a Timestamp.
        kind = type(timestamp)
        if kind is float:
            micros = round(timestamp * 1_000_000)
        elif kind is int:
            micros = timestamp * 1_000_000
        else:
            micros = Timestamp.of(timestamp).micros
        _set_stamped_value(self, value)
        _set_stamped_micros(self, micros)

    @property
    def timestamp(self) -> Timestamp:
        return Timestamp.from_micros(self.timestamp_micros)

    def __repr__(self) -> str:
        return f"TimestampedValue(value={self.value!r}, timestamp={self.timestamp!r})"


_set_stamped_value = TimestampedValue.__dict__["value"].__set__
_set_stamped_micros = TimestampedValue.__dict__["timestamp_micros"].__set__


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


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.window")
