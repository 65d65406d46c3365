"""A stateful DoFn's state and timers for one key: cells and pending timers per window.

``KeyStore`` is what the runner keeps per key between steps (in memory, or in a partition
of the stage's keyed-state RDD on Spark, pickled into checkpoints): for each window with
anything in it, the stored value of each state cell and the pending timers. The
``Runtime*`` classes are what the user's DoFn is handed for one (key, window) while it
runs: they read and write the store directly, so what one call writes the next one reads,
and a timer a callback sets can fire in the same step.

Stored forms: bag a list, set a set, read-modify-write the value (absent when cleared),
combining the CombineFn's accumulator, ordered list a list of (micros, value) sorted by time
(stable: equal times keep their insertion order).

>>> from sparkbeam.coders import PickleCoder
>>> from sparkbeam.userstate import BagStateSpec
>>> cells = WindowCells()
>>> bag = runtime_state(BagStateSpec("seen", PickleCoder()), cells)
>>> bag.add("a"); bag.add("b")
>>> list(bag.read())
['a', 'b']
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.userstate import (
    BagRuntimeState,
    BagStateSpec,
    BaseTimer,
    CombiningValueRuntimeState,
    CombiningValueStateSpec,
    OrderedListRuntimeState,
    OrderedListStateSpec,
    ReadModifyWriteRuntimeState,
    ReadModifyWriteStateSpec,
    RuntimeState,
    SetRuntimeState,
    SetStateSpec,
    StateSpec,
    TimeDomain,
    TimerSpec,
)
from sparkbeam.utils.timestamp import Duration, Timestamp

__all__ = ["KeyStore", "PendingTimer", "RuntimeTimer", "WindowCells", "runtime_state", "to_micros"]


def to_micros(timestamp: Any, what: str) -> int:
    """A Timestamp (ours or any object with ``micros``) or a number of seconds, in microseconds."""
    if isinstance(timestamp, Timestamp):
        return timestamp.micros
    if isinstance(timestamp, (Duration, bool)):
        msg = f"{what} takes a Timestamp or seconds, not {timestamp!r}"
        raise TypeError(msg)
    micros = getattr(timestamp, "micros", None)
    if isinstance(micros, int):
        return micros
    if isinstance(timestamp, (int, float)):
        return Timestamp.of(timestamp).micros
    msg = f"{what} takes a Timestamp or seconds, not {timestamp!r}"
    raise TypeError(msg)


@attrs.frozen(slots=True)
class PendingTimer:
    """A set timer: when it fires (in its domain's time), and the output-watermark hold it
    keeps until then (holds.timer_hold)."""

    domain: str
    fire_micros: int
    hold_micros: int


@attrs.define(slots=True)
class WindowCells:
    """One (key, window)'s state: stored cell values by state name, pending timers by
    (timer name, dynamic tag)."""

    cells: dict[str, Any] = attrs.field(factory=dict)
    timers: dict[tuple[str, str], PendingTimer] = attrs.field(factory=dict)

    def is_empty(self) -> bool:
        return not self.cells and not self.timers


@attrs.define(slots=True)
class KeyStore:
    """One key's state and timers, per window."""

    windows: dict[Any, WindowCells] = attrs.field(factory=dict)

    def cells_for(self, window: Any) -> WindowCells:
        cells = self.windows.get(window)
        if cells is None:
            cells = self.windows[window] = WindowCells()
        return cells

    def forget_empty(self) -> None:
        for window in [w for w, cells in self.windows.items() if cells.is_empty()]:
            del self.windows[window]

    def is_empty(self) -> bool:
        return all(cells.is_empty() for cells in self.windows.values())

    def pending_timers(self) -> Iterator[tuple[Any, tuple[str, str], PendingTimer]]:
        for window, cells in self.windows.items():
            for name, timer in cells.timers.items():
                yield window, name, timer


# -------------------------------------------------------------------------------- state cells


class _Cell:
    __slots__ = ("_cells", "_name")

    def __init__(self, spec: StateSpec, cells: WindowCells) -> None:
        self._cells = cells.cells
        self._name = spec.name

    def clear(self) -> None:
        self._cells.pop(self._name, None)


class _Bag(_Cell, BagRuntimeState):
    __slots__ = ()

    def read(self) -> Iterable[Any]:
        # A copy: the DoFn may add while it iterates what it read.
        return list(self._cells.get(self._name, ()))

    def add(self, value: Any) -> None:
        self._cells.setdefault(self._name, []).append(value)


class _Set(_Cell, SetRuntimeState):
    __slots__ = ()

    def read(self) -> set:
        return set(self._cells.get(self._name, ()))

    def add(self, value: Any) -> None:
        self._cells.setdefault(self._name, set()).add(value)


class _Value(_Cell, ReadModifyWriteRuntimeState):
    __slots__ = ()

    def read(self) -> Any:
        return self._cells.get(self._name)

    def write(self, value: Any) -> None:
        self._cells[self._name] = value


class _Combining(_Cell, CombiningValueRuntimeState):
    __slots__ = ("_combine_fn",)

    def __init__(self, spec: CombiningValueStateSpec, cells: WindowCells) -> None:
        super().__init__(spec, cells)
        self._combine_fn = spec.combine_fn

    def read(self) -> Any:
        accumulator = self._cells.get(self._name)
        if accumulator is None:
            accumulator = self._combine_fn.create_accumulator()
        return self._combine_fn.extract_output(accumulator)

    def add(self, value: Any) -> None:
        accumulator = self._cells.get(self._name)
        if accumulator is None:
            accumulator = self._combine_fn.create_accumulator()
        self._cells[self._name] = self._combine_fn.add_input(accumulator, value)


class _OrderedList(_Cell, OrderedListRuntimeState):
    __slots__ = ()

    def _entries(self) -> list[tuple[int, Any]]:
        return self._cells.get(self._name, [])

    def read(self) -> Iterable[tuple[Timestamp, Any]]:
        return [(Timestamp.from_micros(micros), value) for micros, value in self._entries()]

    def add(self, value: tuple[Any, Any]) -> None:
        try:
            timestamp, item = value
        except (TypeError, ValueError):
            msg = f"OrderedListState.add takes a (timestamp, value) pair, not {value!r}"
            raise TypeError(msg) from None
        micros = to_micros(timestamp, "OrderedListState.add")
        entries = self._cells.setdefault(self._name, [])
        # After every entry at the same time: insertion order among equal times.
        at = bisect.bisect_right(entries, micros, key=_entry_time)
        entries.insert(at, (micros, item))

    def read_range(self, min_timestamp: Any, limit_timestamp: Any) -> Iterable[tuple[Timestamp, Any]]:
        low, high = self._bounds(min_timestamp, limit_timestamp, "read_range")
        entries = self._entries()
        return [(Timestamp.from_micros(m), v) for m, v in entries[low:high]]

    def clear_range(self, min_timestamp: Any, limit_timestamp: Any) -> None:
        low, high = self._bounds(min_timestamp, limit_timestamp, "clear_range")
        entries = self._entries()
        del entries[low:high]
        if not entries:
            self.clear()

    def _bounds(self, min_timestamp: Any, limit_timestamp: Any, what: str) -> tuple[int, int]:
        """Indices of the entries in [min, limit)."""
        entries = self._entries()
        low = to_micros(min_timestamp, f"OrderedListState.{what}")
        high = to_micros(limit_timestamp, f"OrderedListState.{what}")
        return bisect.bisect_left(entries, low, key=_entry_time), bisect.bisect_left(entries, high, key=_entry_time)


def _entry_time(entry: tuple[int, Any]) -> int:
    return entry[0]


def _no_runtime_state(spec: Any, known: list[str]) -> NotImplementedError:
    msg = f"{spec!r}: {type(spec).__name__} is not supported by sparkbeam (no runtime state for it)"
    return NotImplementedError(msg)


# A subclass of a spec (a front end's own spec class) is a cell of its base's kind.
_RUNTIME_STATES: Registry[type] = Registry("runtime state cells", refuse=_no_runtime_state)
for _spec_type, _runtime in (
    (BagStateSpec, _Bag),
    (SetStateSpec, _Set),
    (ReadModifyWriteStateSpec, _Value),
    (CombiningValueStateSpec, _Combining),
    (OrderedListStateSpec, _OrderedList),
):
    _RUNTIME_STATES.add(_spec_type, _runtime, subclasses=True)


def runtime_state(spec: StateSpec, cells: WindowCells) -> RuntimeState:
    """The cell ``spec`` declares, in ``cells``, as the DoFn sees it."""
    return _RUNTIME_STATES.lookup(spec)(spec, cells)


# --------------------------------------------------------------------------------- timers


class RuntimeTimer(BaseTimer):
    """A timer of one (key, window), as the DoFn sees it. ``set`` replaces an earlier
    setting of the same timer and tag; ``clear`` removes it."""

    __slots__ = ("_cells", "_domain", "_hold_for", "_name")

    def __init__(self, spec: TimerSpec, cells: WindowCells, hold_for: Any) -> None:
        self._cells = cells
        self._name = spec.name
        self._domain = spec.time_domain
        #: (domain, fire micros) -> hold micros, or raises if the timer may not be set there
        self._hold_for = hold_for

    def set(self, timestamp: Any, dynamic_timer_tag: str = "") -> None:
        micros = to_micros(timestamp, f"timer {self._name[len(TimerSpec.prefix):]!r}.set")
        hold = self._hold_for(self._domain, micros)
        self._cells.timers[(self._name, dynamic_timer_tag)] = PendingTimer(self._domain, micros, hold)

    def clear(self, dynamic_timer_tag: str = "") -> None:
        self._cells.timers.pop((self._name, dynamic_timer_tag), None)


def is_event_time(domain: str) -> bool:
    return domain == TimeDomain.WATERMARK
