"""What crosses a shuffle or goes from a partition to the driver, and how to tell each apart.

A stage's records are pairs ``(where, record)``, since Spark's ``partitionBy`` hashes the
first item of a pair; the in-memory backend passes the same pairs. The record's type says
what it is, and ``where`` depends on it:

========================  ==========================  ======================================
record                    where                       what it is
========================  ==========================  ======================================
``WindowedValue``         the grouping key            an element entering a keyed stage
                                                      (its key taken off the value)
``Partial``               the grouping key            a combine lifted before the shuffle:
                                                      one (key, window)'s accumulator
``WindowedValue``         the PCollection id          an element leaving its stage
``KeyedState``            the grouping key            a key's state, kept to the next step
``StateChunk``            ``None``                    many keys' state, pickled together
                                                      (Spark's result RDDs, ``state_chunks.py``)
``StateBucket``           ``None``                    the keys of one hash bucket, pickled
                                                      together, with their holds and timers
                                                      (``keyed_buckets.py``)
``StateIndex``            ``None``                    a partition's buckets' holds and timers
                                                      in order (``timer_index.py``)
``Pane``                  ``None``                    a pane fired, before the fused body
``Parked``                the partition number        an element waiting for side inputs
``Summary``               ``None``                    a partition's report of the step
``ReleaseAt``             ``None``                    when anything parked can go
========================  ==========================  ======================================

An RDD never holds elements of both kinds: a keyed stage's input holds new elements and
state, its result outputs, state and summaries. Dispatch is ``type(record) is``.

Elements travel bare because a wrapper costs per element: measured for #11 on 1,024-record
batches as PySpark pickles them, a ``NamedTuple`` wrapper added about 0.4 µs to build,
1.1 µs to pickle and 0.2 µs to unpickle each record (``NamedTuple`` pickles through
Python-level ``__getnewargs__``), against a ~8 µs budget per element. The wrappers below are
per key, per pane or per partition; they are attrs classes that pickle as their class and
fields in order (no field names per record), which measured as small as a ``NamedTuple``
and faster to pickle.
"""

from __future__ import annotations

import operator
from array import array
from typing import Any, TypeVar

import attrs

from sparkbeam.runners.core.lowering.step_values import StageSummary
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import IntervalWindow

__all__ = [
    "KeyedState",
    "Pane",
    "Parked",
    "Partial",
    "ReleaseAt",
    "StateBucket",
    "StateChunk",
    "StateIndex",
    "Summary",
    "WindowedValue",
    "group_key",
    "window_of_group_key",
]

_R = TypeVar("_R")


def _compact(cls: type[_R]) -> type[_R]:
    """An attrs frozen slots class pickled as ``cls(*fields)``: no field names per record."""
    # A class already made by attrs (so that mypy's attrs plugin sees its fields) is kept.
    frozen: Any = cls if attrs.has(cls) else attrs.frozen(slots=True)(cls)
    names = tuple(field.name for field in attrs.fields(frozen))
    fields_of = operator.attrgetter(*names)
    if len(names) == 1:

        def __reduce__(self: Any) -> tuple:
            return (frozen, (fields_of(self),))

    else:

        def __reduce__(self: Any) -> tuple:
            return (frozen, fields_of(self))

    frozen.__reduce__ = __reduce__
    return frozen


@_compact
class KeyedState:
    """One key's state, kept in its partition from one step to the next."""

    state: Any


@_compact
@attrs.frozen(slots=True)
class Partial:
    """A key's elements of one window in one partition, combined before the shuffle
    (``lifting.py``): the accumulator, how many elements it holds (element-count triggers
    and drop counts need the exact number), the hold they add and whether any of them was
    behind the output watermark (late data, which sets the GC hold instead)."""

    window: Any
    accumulator: Any
    count: int
    hold: int | None
    unheld: bool


@_compact
class StateChunk:
    """Several keys' ``(key, state)`` pickled together: state that readers other than the
    next step's grouping pass over without unpickling it (``runners/spark/state_chunks.py``)."""

    payload: bytes


@_compact
class StateBucket:
    """The keys of one hash bucket of a partition, ``(key, state)`` pairs pickled together
    in ``payload``, and what a step reads instead of them (``keyed_buckets.py``): the
    bucket's hash range (``depth`` low bits equal to ``prefix``), the hash ``probe`` of the
    process that wrote it, and the fold of its keys' reports (earliest hold with its key
    and window, next timers, keys and windows held), and ``version``: the step that wrote it
    (an incremental checkpoint writes the buckets of versions since the last one; buckets of
    checkpoint format 5, pickled without it, read as 0)."""

    depth: int
    prefix: int
    probe: int
    earliest_hold: int | None
    hold_key: str | None
    hold_window: str | None
    next_event_timer: int | None
    next_processing_timer: int | None
    state_keys: int
    state_windows: int
    payload: bytes
    version: int = 0


@_compact
@attrs.frozen(slots=True)
class StateIndex:
    """A partition's buckets' headers in order, carried beside its buckets between steps
    so that a step finds the buckets with a timer due, and the partition's earliest hold and
    next timers, without reading every header (``runners/core/state/timer_index.py``). Never
    checkpointed: derived from the headers when missing (after a restore or a read-back).

    Buckets are named by ``node``: ``(1 << depth) | prefix``. ``nodes``: the node of each
    bucket in the partition's list, in order; ``event_times`` and ``event_nodes``: the next
    event-time timer of every bucket that has one and its node, sorted by (time, node); the
    same for ``processing_*`` (next processing-time timers) and ``hold_*`` (earliest holds);
    ``untimed``: non-empty buckets with no event-time timer (due whenever the watermark
    moves); ``empties``: the empty buckets (merged with an empty sibling); ``depths``: the
    depths in use, ascending; ``state_keys``, ``state_windows``: the sums of the headers'.
    The lists are ``array('q')`` (timestamps in microseconds fit): Spark copies the record
    every step, and an array pickles as its bytes, a list of pairs per pair."""

    nodes: array
    event_times: array
    event_nodes: array
    processing_times: array
    processing_nodes: array
    hold_times: array
    hold_nodes: array
    untimed: frozenset[int]
    empties: frozenset[int]
    depths: tuple[int, ...]
    state_keys: int
    state_windows: int


@_compact
class Pane:
    """A pane the grouping engine fired, before the stage's fused body runs on it."""

    element: WindowedValue


@_compact
class Parked:
    """A main-input element waiting for its side inputs, in the reading stage's state."""

    element: WindowedValue


@_compact
class Summary:
    """One partition's report of the step, summed on the driver."""

    summary: StageSummary


@_compact
class ReleaseAt:
    """(side-input PCollection, watermark) pairs: nothing parked in the partition can go
    before one of those side inputs' watermarks reaches its value."""

    watermarks: tuple[tuple[int, int], ...]


def group_key(key: Any, window: Any) -> tuple:
    """The compact shuffle key of (key, window): an ``IntervalWindow`` (exactly, not a
    subclass, which may carry more) as its bounds in microseconds, ``(key, (start, end))``,
    so that hashing and comparing the key stays in C: a window object's ``__hash__`` is a
    Python call, made several times per element by a dict and by the partitioner. The
    bounds are the window's own tuple, shared by every element of a window the assigner
    cached, so that pickling a batch of keys writes each window's bounds once. Any other
    window is kept as it is, ``(key, window)``."""
    if type(window) is IntervalWindow:
        return (key, window._bounds)
    return (key, window)


def window_of_group_key(compact: tuple, windows: dict[tuple[int, int], Any]) -> Any:
    """The window of a compact key (``group_key``); ``windows`` caches the interval
    windows rebuilt, so that a partition builds each window once."""
    bounds = compact[1]
    if type(bounds) is not tuple:
        return bounds
    window = windows.get(bounds)
    if window is None:
        window = windows[bounds] = IntervalWindow(Timestamp.from_micros(bounds[0]), Timestamp.from_micros(bounds[1]))
    return window
