"""Keyed state between steps as chunks: a few opaque records per partition, not one per key.

A keyed stage's result RDD holds its state, its fired panes and its summary, and Spark
reads it more than once a step: the job that collects the summaries and panes, and the
next step's grouping through the state it keeps. PySpark pickles every record it hands
from one Python function to the next, with cloudpickle, whose per-object reducer and
``ChainMap`` dispatch table cost Python-level calls for every window and accumulator of
every key (measured for #11: about 4 µs per window to pickle, 3 µs to unpickle). Carried
as ``StateChunk`` records, pickled bytes of up to ``CHUNK_RECORDS`` keys, the state is
unpickled once a step, by the grouping that uses it, and pickled once, when that grouping
hands on the new state; every other reader passes over a bytes object.

Inside a chunk the records are pickled with cloudpickle's own pickler (so a user's class
defined in ``__main__`` or a notebook goes by value, as PySpark would send it), with a
plain dict for its dispatch table, whose look-ups stay in C.
"""

from __future__ import annotations

import copyreg
import functools
import io
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark import cloudpickle

from sparkbeam.runners.core.grouping.records import KeyedState, StateBucket, StateChunk, StateIndex
from sparkbeam.runners.core.state.keyed_buckets import BucketedPartition
from sparkbeam.runners.spark import old_paths

__all__ = ["CHUNK_BYTES", "CHUNK_RECORDS", "bucketed_partition", "pack_bucket", "pack_state", "unpack_bucket", "unpack_state"]

#: a chunk closes after this many keys or this many bytes, whichever comes first, so that
#: a partition with large state (GroupByKey buffers) is still read a piece at a time
CHUNK_RECORDS = 2048
CHUNK_BYTES = 8 << 20


class _ChunkPickler(cloudpickle.Pickler):
    """cloudpickle's pickler, with its dispatch table as one dict, merged when the pickler
    is made (so that ``copyreg`` registrations made since still count)."""

    def __init__(self, file: io.BytesIO) -> None:
        # Read by the C pickler when it is initialised.
        table: dict[Any, Any] = {**copyreg.dispatch_table, **cloudpickle.Pickler._dispatch_table}
        self.dispatch_table = table  # type: ignore[assignment]
        super().__init__(file, pickle.HIGHEST_PROTOCOL)


def _close(buffer: io.BytesIO) -> StateChunk:
    return StateChunk(buffer.getvalue())


def pack_state(records: Iterable[tuple[Any, Any]]) -> Iterator[tuple[None, Any]]:
    """``(key, KeyedState)`` records as ``(None, StateChunk)`` records; any other record
    passes through unchanged (after the chunk being filled, which closes first)."""
    buffer: io.BytesIO | None = None
    pickler: _ChunkPickler | None = None
    count = 0
    for record in records:
        if type(record[1]) is not KeyedState:
            if buffer is not None:
                yield None, _close(buffer)
                buffer = pickler = None
            yield record
            continue
        if buffer is None or pickler is None:
            buffer = io.BytesIO()
            pickler = _ChunkPickler(buffer)
            count = 0
        # One pickler per chunk: objects shared between keys (windows) are written once.
        pickler.dump((record[0], record[1].state))
        count += 1
        if count >= CHUNK_RECORDS or buffer.tell() >= CHUNK_BYTES:
            yield None, _close(buffer)
            buffer = pickler = None
    if buffer is not None:
        yield None, _close(buffer)


def pack_bucket(entries: list[tuple[Any, Any, tuple]]) -> bytes:
    """A bucket's ``(key, state, report)`` entries as one pickle (``keyed_buckets.py``):
    one call, objects shared between keys (windows) written once."""
    buffer = io.BytesIO()
    _ChunkPickler(buffer).dump(entries)
    return buffer.getvalue()


def unpack_bucket(payload: bytes) -> list[tuple[Any, Any, tuple]]:
    """The reverse of ``pack_bucket``."""
    entries: list[tuple[Any, Any, tuple]] = old_paths.loads(payload)
    return entries


#: ``StateStore.HASH_BUCKETS`` on Spark: a partition's state for one step, its buckets
#: pickled with this module's pickler (what a task builds: ``worker.grouping_partition``)
bucketed_partition = functools.partial(BucketedPartition, pack_bucket, unpack_bucket)


def unpack_state(records: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """The reverse of ``pack_state``: each chunk's ``(key, KeyedState)`` records in order,
    every other record unchanged (state saved per key by earlier versions included)."""
    for record in records:
        chunk = record[1]
        if type(chunk) is StateBucket:
            if chunk.payload:
                for key, state, _ in unpack_bucket(chunk.payload):
                    yield key, KeyedState(state)
            continue
        if type(chunk) is StateIndex:  # the buckets' order: derived again where they go
            continue
        if type(chunk) is not StateChunk:
            yield record
            continue
        source = io.BytesIO(chunk.payload)
        unpickler = old_paths.Unpickler(source)
        end = len(chunk.payload)
        while source.tell() < end:
            key, state = unpickler.load()
            yield key, KeyedState(state)


def is_state(record: Any) -> bool:
    """Whether a record carries keyed state (a bucket or its partition's index, a chunk, or
    one key's state)."""
    kind = type(record)
    return kind is StateBucket or kind is StateIndex or kind is StateChunk or kind is KeyedState
