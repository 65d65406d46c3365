"""Batching across bundles with state and timers: ``GroupIntoBatches`` (and its
``WithShardedKey`` variant) and ``BatchElements(max_batch_duration_secs=...)``.

Built as Beam builds them: one stateful DoFn that buffers each key's values per window in
bag state and counts them, and emits a batch when it is full (stamped with the element that
filled it), when the window ends (an event-time timer at ``window.end``) or when the first
buffered value has waited ``max_buffering_duration_secs`` (a processing-time timer at
``clock() + duration``). Public through ``sparkbeam.transforms.util`` and ``sparkbeam``.
"""

# ruff: noqa: B008 (DoFn.StateParam(SPEC) as a default is Beam's idiom)
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from sparkbeam import pvalue
from sparkbeam.coders import PickleCoder
from sparkbeam.core import DoFn, Map, ParDo
from sparkbeam.ptransform import PTransform
from sparkbeam.transforms._combine_fns import CountCombineFn
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import with_input_types, with_output_types
from sparkbeam.userstate import (
    BagStateSpec,
    CombiningValueStateSpec,
    ReadModifyWriteStateSpec,
    TimeDomain,
    TimerSpec,
    on_timer,
)
from sparkbeam.utils.sharded_key import ShardedKey

__all__ = ["GroupIntoBatches", "StatefulBatchElementsDoFn"]

_K = typehints.TypeVariable("K")
_V = typehints.TypeVariable("V")


def _buffering_duration(transform: str, batch_size: Any, max_buffering_duration_secs: Any) -> float:
    """Beam's checks of GroupIntoBatches' arguments, as errors naming the transform."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        msg = f"{transform}: batch_size must be a positive int, got {batch_size!r}"
        raise ValueError(msg)
    if max_buffering_duration_secs is None:
        return 0
    if isinstance(max_buffering_duration_secs, bool) or not isinstance(max_buffering_duration_secs, (int, float)):
        msg = f"{transform}: max_buffering_duration_secs must be a number of seconds, got {max_buffering_duration_secs!r}"
        raise TypeError(msg)
    if max_buffering_duration_secs < 0:
        msg = f"{transform}: max_buffering_duration_secs must not be negative, got {max_buffering_duration_secs!r}"
        raise ValueError(msg)
    return max_buffering_duration_secs


class _GroupIntoBatchesDoFn(DoFn):
    """Beam's ``_GroupIntoBatchesDoFn``: a key's values per window, flushed when full, at
    the window's end, or ``max_buffering_duration_secs`` after the first of a batch."""

    VALUES = BagStateSpec("values", PickleCoder())
    COUNT = CombiningValueStateSpec("count", PickleCoder(), CountCombineFn())
    WINDOW_END = TimerSpec("window_end", TimeDomain.WATERMARK)
    BUFFERING_END = TimerSpec("buffering_end", TimeDomain.REAL_TIME)

    def __init__(self, batch_size: int, max_buffering_duration_secs: float, clock: Callable[[], float]) -> None:
        self.batch_size = batch_size
        self.max_buffering_duration_secs = max_buffering_duration_secs
        self.clock = clock

    def process(
        self,
        element: Any,
        window: Any = DoFn.WindowParam,
        values: Any = DoFn.StateParam(VALUES),
        count: Any = DoFn.StateParam(COUNT),
        window_end: Any = DoFn.TimerParam(WINDOW_END),
        buffering_end: Any = DoFn.TimerParam(BUFFERING_END),
    ) -> Iterator[tuple[Any, list]]:
        # As Beam: the window's end flushes what is left (allowed lateness is not used).
        window_end.set(window.end)
        values.add(element[1])
        count.add(1)
        buffered = count.read()
        if buffered == 1 and self.max_buffering_duration_secs > 0:
            buffering_end.set(self.clock() + self.max_buffering_duration_secs)
        if buffered >= self.batch_size:
            yield from self._flush(element[0], values, count, buffering_end)

    @on_timer(WINDOW_END)
    def on_window_end(
        self,
        key: Any = DoFn.KeyParam,
        values: Any = DoFn.StateParam(VALUES),
        count: Any = DoFn.StateParam(COUNT),
        buffering_end: Any = DoFn.TimerParam(BUFFERING_END),
    ) -> Iterator[tuple[Any, list]]:
        yield from self._flush(key, values, count, buffering_end)

    @on_timer(BUFFERING_END)
    def on_buffering_end(
        self,
        key: Any = DoFn.KeyParam,
        values: Any = DoFn.StateParam(VALUES),
        count: Any = DoFn.StateParam(COUNT),
        buffering_end: Any = DoFn.TimerParam(BUFFERING_END),
    ) -> Iterator[tuple[Any, list]]:
        yield from self._flush(key, values, count, buffering_end)

    @staticmethod
    def _flush(key: Any, values: Any, count: Any, buffering_end: Any) -> Iterator[tuple[Any, list]]:
        batch = list(values.read())
        if not batch:
            return
        values.clear()
        count.clear()
        buffering_end.clear()
        yield key, batch


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(typehints.Tuple[_K, typehints.Iterable[_V]])
class GroupIntoBatches(PTransform):
    """``(key, [up to batch_size values])`` batches of each key's values, per window.

    A stateful DoFn, as in Beam: a batch leaves as soon as it is full (stamped with the
    timestamp of the value that filled it), when the watermark passes the end of its window
    (stamped with the window's end), or, with ``max_buffering_duration_secs``, when its
    first value has waited that long by ``clock`` (processing time: the wall clock, or a
    TestStream's ``advance_processing_time``). Values are in arrival order.

    >>> p | beam.Create([("k", i) for i in range(5)]) | beam.GroupIntoBatches(2)   # doctest: +SKIP
    ("k", [0, 1]), ("k", [2, 3]), ("k", [4])
    """

    def __init__(
        self, batch_size: int, max_buffering_duration_secs: float | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__()
        self.max_buffering_duration_secs = _buffering_duration("GroupIntoBatches", batch_size, max_buffering_duration_secs)
        self.batch_size = batch_size
        self.clock = clock

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | "Batch" >> ParDo(_GroupIntoBatchesDoFn(self.batch_size, self.max_buffering_duration_secs, self.clock))

    @with_input_types(typehints.Tuple[_K, _V])
    @with_output_types(typehints.Tuple[Any, typehints.Iterable[_V]])
    class WithShardedKey(PTransform):
        """``GroupIntoBatches`` keyed by ``ShardedKey(key, shard_id)``: each worker thread
        batches a key's values under its own shard, so one hot key is batched in parallel;
        ``sharded.key`` is the original key (``sparkbeam.utils.sharded_key``)."""

        def __init__(
            self, batch_size: int, max_buffering_duration_secs: float | None = None, clock: Callable[[], float] = time.time
        ) -> None:
            super().__init__()
            self.max_buffering_duration_secs = _buffering_duration(
                "GroupIntoBatches.WithShardedKey", batch_size, max_buffering_duration_secs
            )
            self.batch_size = batch_size
            self.clock = clock

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return (
                pcoll
                | "ShardKeys" >> Map(_with_sharded_key)
                | GroupIntoBatches(self.batch_size, self.max_buffering_duration_secs, self.clock)
            )


# As Beam: a shard is a process (a random prefix drawn once per process) and a thread in it.
_SHARD_PREFIX = uuid.uuid4().bytes


def _with_sharded_key(element: Any) -> tuple[ShardedKey, Any]:
    key, value = element
    return ShardedKey(key, _SHARD_PREFIX + threading.get_ident().to_bytes(8, "big")), value


class StatefulBatchElementsDoFn(DoFn):
    """Beam's ``_StatefulBatchElementsDoFn``: ``BatchElements(max_batch_duration_secs=...)``.

    Its input is keyed by a per-process key (so state is per worker, as in Beam); a batch
    leaves when it reaches the sizer's target, at the window's end, or ``max_batch_duration_secs``
    after its first element; each batch's downstream time feeds the sizer, kept in state.
    """

    VALUES = BagStateSpec("values", PickleCoder())
    COUNT = CombiningValueStateSpec("count", PickleCoder(), CountCombineFn())
    TARGET = ReadModifyWriteStateSpec("batch_size", PickleCoder())
    SIZER = ReadModifyWriteStateSpec("batch_estimator", PickleCoder())
    WINDOW_END = TimerSpec("window_end", TimeDomain.WATERMARK)
    BUFFERING_END = TimerSpec("buffering_end", TimeDomain.REAL_TIME)

    def __init__(self, sizer: Any, max_batch_duration_secs: float, clock: Callable[[], float]) -> None:
        self.sizer = sizer
        self.max_batch_duration_secs = max_batch_duration_secs
        self.clock = clock

    def process(
        self,
        element: Any,
        window: Any = DoFn.WindowParam,
        values: Any = DoFn.StateParam(VALUES),
        count: Any = DoFn.StateParam(COUNT),
        target: Any = DoFn.StateParam(TARGET),
        sizer: Any = DoFn.StateParam(SIZER),
        window_end: Any = DoFn.TimerParam(WINDOW_END),
        buffering_end: Any = DoFn.TimerParam(BUFFERING_END),
    ) -> Iterator[list]:
        window_end.set(window.end)
        values.add(element[1])  # the per-process key is dropped
        count.add(1)
        buffered = count.read()
        target_size = target.read()
        if target_size is None:  # the key's first element
            target_size = self.sizer.next_size()
            target.write(target_size)
            sizer.write(self.sizer)
        if buffered == 1 and self.max_batch_duration_secs > 0:
            buffering_end.set(self.clock() + self.max_batch_duration_secs)
        if buffered >= target_size:
            yield from self._flush(values, count, target, sizer, buffering_end)

    @on_timer(WINDOW_END)
    def on_window_end(
        self,
        values: Any = DoFn.StateParam(VALUES),
        count: Any = DoFn.StateParam(COUNT),
        target: Any = DoFn.StateParam(TARGET),
        sizer: Any = DoFn.StateParam(SIZER),
        buffering_end: Any = DoFn.TimerParam(BUFFERING_END),
    ) -> Iterator[list]:
        yield from self._flush(values, count, target, sizer, buffering_end)

    @on_timer(BUFFERING_END)
    def on_buffering_end(
        self,
        values: Any = DoFn.StateParam(VALUES),
        count: Any = DoFn.StateParam(COUNT),
        target: Any = DoFn.StateParam(TARGET),
        sizer: Any = DoFn.StateParam(SIZER),
        buffering_end: Any = DoFn.TimerParam(BUFFERING_END),
    ) -> Iterator[list]:
        yield from self._flush(values, count, target, sizer, buffering_end)

    @staticmethod
    def _flush(values: Any, count: Any, target: Any, sizer: Any, buffering_end: Any) -> Iterator[list]:
        batch = list(values.read())
        if not batch:
            return
        values.clear()
        count.clear()
        batch_sizer = sizer.read()
        with batch_sizer.timing(len(batch)):
            yield batch
        target.write(batch_sizer.next_size())
        sizer.write(batch_sizer)
        buffering_end.clear()
