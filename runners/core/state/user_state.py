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

Both front ends use these cells and timers; a ``CellForm`` says what differs. sparkbeam's
own DoFns (``PLAIN``) store the objects they add and see sparkbeam's ``Timestamp``; the
apache_beam front end stores what each spec's coder encodes (a read gives Beam's decoded
copy, as a Beam runner does) and converts times with Beam's ``Timestamp``
(``runners/beam/stateful.py``). A front end's own spec classes are cells of the engine's
kinds once registered (``register_state_spec``).

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
from collections.abc import Callable, Iterable, Iterator
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

__all__ = [
    "PLAIN",
    "CellForm",
    "KeyStore",
    "PendingTimer",
    "RuntimeTimer",
    "WindowCells",
    "register_state_spec",
    "runtime_state",
    "to_micros",
]


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


def _sparkbeam_micros(timestamp: Any, what: str) -> int:
    return to_micros(timestamp, what)


@attrs.frozen
class CellForm:
    """How a front end's cells keep values and read times (see the module docs)."""

    #: store each value as its spec's coder encodes it, and decode it on every read
    encoded: bool = False
    #: (timestamp as the DoFn gives it, what is asking) -> micros, or a TypeError
    micros_of: Callable[[Any, str], int] = _sparkbeam_micros
    #: micros -> the timestamp the DoFn is given (an ordered list's entries)
    timestamp_of: Callable[[int], Any] = Timestamp.from_micros


#: sparkbeam's own DoFns: values stored as they are (pickled with the key's state)
PLAIN = CellForm()


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
    __slots__ = ("_cells", "_decode", "_encode", "_form", "_name")

    def __init__(self, spec: StateSpec, cells: WindowCells, form: CellForm) -> None:
        self._cells = cells.cells
        self._name = spec.name
        self._form = form
        # None for plain values: a branch on None costs less than calling an identity
        self._encode: Callable[[Any], Any] | None
        self._decode: Callable[[Any], Any] | None
        if form.encoded:
            coder = spec.coder
            self._encode, self._decode = coder.encode, coder.decode
        else:
            self._encode = self._decode = None

    def clear(self) -> None:
        self._cells.pop(self._name, None)


class _Bag(_Cell, BagRuntimeState):
    __slots__ = ()

    def read(self) -> Iterable[Any]:
        stored = self._cells.get(self._name, ())
        decode = self._decode
        # A copy: the DoFn may add while it iterates what it read.
        return list(stored) if decode is None else [decode(encoded) for encoded in stored]

    def add(self, value: Any) -> None:
        encode = self._encode
        self._cells.setdefault(self._name, []).append(value if encode is None else encode(value))


class _Set(_Cell, SetRuntimeState):
    __slots__ = ()

    def read(self) -> set:
        stored = self._cells.get(self._name, ())
        decode = self._decode
        return set(stored) if decode is None else {decode(encoded) for encoded in stored}

    def add(self, value: Any) -> None:
        encode = self._encode
        # Encoded, a set keeps distinct encodings, as Beam's runners do.
        self._cells.setdefault(self._name, set()).add(value if encode is None else encode(value))


class _Value(_Cell, ReadModifyWriteRuntimeState):
    __slots__ = ()

    def read(self) -> Any:
        stored = self._cells.get(self._name)
        return stored if stored is None or self._decode is None else self._decode(stored)

    def write(self, value: Any) -> None:
        self._cells[self._name] = value if self._encode is None else self._encode(value)


class _Combining(_Cell, CombiningValueRuntimeState):
    __slots__ = ("_combine_fn",)

    def __init__(self, spec: CombiningValueStateSpec, cells: WindowCells, form: CellForm) -> None:
        super().__init__(spec, cells, form)
        self._combine_fn = spec.combine_fn

    def _accumulator(self) -> Any:
        # Encoded, the spec's coder is the accumulator's (CombiningValueStateSpec.coder).
        stored = self._cells.get(self._name)
        if stored is None:
            return self._combine_fn.create_accumulator()
        return stored if self._decode is None else self._decode(stored)

    def read(self) -> Any:
        return self._combine_fn.extract_output(self._accumulator())

    def add(self, value: Any) -> None:
        combine_fn = self._combine_fn
        # Kept, and encoded or pickled with the key's state: compacted first, as Beam's
        # runners compact a combining state's accumulator before they write it.
        accumulator = combine_fn.compact(combine_fn.add_input(self._accumulator(), value))
        self._cells[self._name] = accumulator if self._encode is None else self._encode(accumulator)


class _OrderedList(_Cell, OrderedListRuntimeState):
    __slots__ = ()

    def _entries(self) -> list[tuple[int, Any]]:
        return self._cells.get(self._name, [])

    def _read(self, entries: list[tuple[int, Any]]) -> list[tuple[Any, Any]]:
        timestamp_of, decode = self._form.timestamp_of, self._decode
        if decode is None:
            return [(timestamp_of(micros), value) for micros, value in entries]
        return [(timestamp_of(micros), decode(encoded)) for micros, encoded in entries]

    def read(self) -> Iterable[tuple[Any, Any]]:
        return self._read(self._entries())

    def add(self, value: tuple[Any, Any]) -> None:
        try:
            timestamp, item = value
        except (TypeError, ValueError):
            msg = f"OrderedListState {self._name!r}: add takes a (timestamp, value) pair, not {value!r}"
            raise TypeError(msg) from None
        micros = self._form.micros_of(timestamp, "OrderedListState.add")
        entries = self._cells.setdefault(self._name, [])
        # After every entry at the same time: insertion order among equal times.
        at = bisect.bisect_right(entries, micros, key=_entry_time)
        entries.insert(at, (micros, item if self._encode is None else self._encode(item)))

    def read_range(self, min_timestamp: Any, limit_timestamp: Any) -> Iterable[tuple[Any, Any]]:
        low, high = self._bounds(min_timestamp, limit_timestamp, "read_range")
        return self._read(self._entries()[low:high])

    def clear_range(self, min_timestamp: Any, limit_timestamp: Any) -> None:
        low, high = self._bounds(min_timestamp, limit_timestamp, "clear_range")
        entries = self._entries()
        del entries[low:high]
        if not entries:
            self.clear()

    def _bounds(self, min_timestamp: Any, limit_timestamp: Any, what: str) -> tuple[int, int]:
        """Indices of the entries in [min, limit)."""
        entries = self._entries()
        low = self._form.micros_of(min_timestamp, f"OrderedListState.{what}")
        high = self._form.micros_of(limit_timestamp, f"OrderedListState.{what}")
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


def register_state_spec(spec_type: type, like: type, runtime_bases: tuple[type, ...] = ()) -> None:
    """Cells of a front end's ``spec_type`` (and its subclasses) are the engine's cells of
    ``like`` (``BagStateSpec``, ...), also instances of ``runtime_bases`` (the front end's own
    runtime-state classes, for a DoFn that checks what it was given)."""
    cell = _RUNTIME_STATES.at(like)
    if runtime_bases:
        cell = type(f"{spec_type.__name__}Cell", (cell, *runtime_bases), {"__slots__": ()})
    _RUNTIME_STATES.add(spec_type, cell, subclasses=True)


def runtime_state(spec: Any, cells: WindowCells, form: CellForm = PLAIN) -> RuntimeState:
    """The cell ``spec`` declares, in ``cells``, as the DoFn sees it."""
    return _RUNTIME_STATES.lookup(spec)(spec, cells, form)


# --------------------------------------------------------------------------------- timers


class RuntimeTimer(BaseTimer):
    """A timer of one (key, window), as the DoFn sees it. ``set`` replaces an earlier
    setting of the same timer and tag; ``clear`` removes it."""

    __slots__ = ("_cells", "_domain", "_hold_for", "_micros_of", "_name")

    def __init__(self, spec: Any, cells: WindowCells, hold_for: Any, form: CellForm = PLAIN) -> None:
        # ``spec``: a TimerSpec of either front end (a name with its "ts-" prefix, a domain)
        self._cells = cells
        self._name = spec.name
        self._domain = spec.time_domain
        #: (domain, fire micros) -> hold micros, or raises if the timer may not be set there
        self._hold_for = hold_for
        self._micros_of = form.micros_of

    def set(self, timestamp: Any, dynamic_timer_tag: str = "") -> None:
        micros = self._micros_of(timestamp, f"timer {self._name[len(TimerSpec.prefix):]!r}.set")
        hold = self._hold_for(self._domain, micros)
        self._cells.timers[(self._name, dynamic_timer_tag)] = PendingTimer(self._domain, micros, hold)

    def clear(self, dynamic_timer_tag: str = "") -> None:
        self._cells.timers.pop((self._name, dynamic_timer_tag), None)


def is_event_time(domain: str) -> bool:
    return domain == TimeDomain.WATERMARK
