"""Beam's source and sink API (``sparkbeam.io.iobase``): ``BoundedSource`` read with ``Read``,
``Sink`` written with ``Write``.

>>> class Numbers(BoundedSource):
...     def __init__(self, count): self.count = count
...     def estimate_size(self): return self.count
...     def get_range_tracker(self, start, stop):
...         from sparkbeam.io.range_trackers import OffsetRangeTracker
...         return OffsetRangeTracker(start or 0, self.count if stop is None else stop)
...     def split(self, desired_bundle_size, start=None, stop=None):
...         start, stop = start or 0, self.count if stop is None else stop
...         for low in range(start, stop, desired_bundle_size):
...             yield SourceBundle(1, self, low, min(stop, low + desired_bundle_size))
...     def read(self, tracker):
...         position = tracker.start_position()
...         while tracker.try_claim(position):
...             yield position
...             position += 1
>>> numbers = p | Read(Numbers(1000))                                   # doctest: +SKIP

**How a read runs.** When the run starts, the driver asks the source for its size
(``estimate_size``) and splits it (``split``) into bundles of about ``size / parallelism``
(the Spark session's default parallelism; 64 MiB bundles when the size is unknown). Each
bundle becomes one Spark partition, read on an executor with
``source.read(source.get_range_tracker(start, stop))``. The elements are in the global
window at the minimum timestamp, unless ``read`` yields ``TimestampedValue``. Sources
must pickle (they travel to the executors). No dynamic splitting happens while a bundle
is read. A source whose ``read`` never yields a ``TimestampedValue`` may say so
(``yields_plain_values``, sparkbeam's own): its records are then handed to the stage
that reads them as values, with no element built per record where that stage takes them
so (a text file's lines); a ``TimestampedValue`` it yields all the same fails the read.

**Writing.** ``pcoll | Write(sink)`` runs Beam's protocol for a bounded PCollection:
``sink.initialize_write()`` once, a ``Writer`` per bundle (or per shard, when the sink has
``num_shards``), ``pre_finalize`` and ``finalize_write`` once with every writer's result.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterator
from itertools import chain, islice, repeat
from typing import Any

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.coders import registry
from sparkbeam.core import Create, DoFn, FlatMap, GroupByKey, Map, ParDo, WindowInto
from sparkbeam.ptransform import PTransform
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import GlobalWindow, GlobalWindows, TimestampedValue

__all__ = [
    "BoundedSource",
    "RangeTracker",
    "Read",
    "Sink",
    "SourceBase",
    "SourceBundle",
    "Write",
    "Writer",
]

#: A part of a source from ``BoundedSource.split``: its relative ``weight``, the ``source``
#: to read it with, and the position range ``[start_position, stop_position)``.
SourceBundle = collections.namedtuple("SourceBundle", "weight source start_position stop_position")


class SourceBase:
    """What ``Read`` reads: a bounded or unbounded source."""

    def default_output_coder(self) -> Any:
        raise NotImplementedError

    def is_bounded(self) -> bool:
        raise NotImplementedError

    def display_data(self) -> dict[str, Any]:
        return {}


class BoundedSource(SourceBase):
    """A finite source. Implement ``estimate_size``, ``split``, ``get_range_tracker`` and
    ``read`` (see the module's documentation for how sparkbeam calls them)."""

    def estimate_size(self) -> int | None:
        """The source's size in bytes (before decompression), or None if unknown."""
        raise NotImplementedError

    def split(self, desired_bundle_size: int, start_position: Any = None, stop_position: Any = None) -> Iterator[SourceBundle]:
        """``SourceBundle``s of about ``desired_bundle_size`` bytes covering the range."""
        raise NotImplementedError

    def get_range_tracker(self, start_position: Any, stop_position: Any) -> RangeTracker:
        """A ``RangeTracker`` for the range (None: the source's own start or stop)."""
        raise NotImplementedError

    def read(self, range_tracker: RangeTracker) -> Iterator[Any]:
        """The records whose split points the tracker lets the read claim."""
        raise NotImplementedError

    #: sparkbeam's own (Beam's sources have no such thing): ``read`` yields plain values
    #: only, never a ``TimestampedValue``, so a runner may read them as values
    #: (``read_bundle_values``) rather than as elements (see the module docs)
    yields_plain_values: bool = False

    def default_output_coder(self) -> Any:
        return registry.get_coder(object)

    def is_bounded(self) -> bool:
        return True


class RangeTracker:
    """Tracks which positions of a bundle a read has claimed (Beam's position-based sources).

    A read calls ``try_claim(position)`` for every record at a split point and stops at
    the first ``False``; ``set_current_position`` for records that are not split points.
    See ``sparkbeam.io.range_trackers`` for the trackers Beam ships.
    """

    SPLIT_POINTS_UNKNOWN = object()

    def start_position(self) -> Any:
        raise NotImplementedError(type(self))

    def stop_position(self) -> Any:
        raise NotImplementedError(type(self))

    def try_claim(self, position: Any) -> bool:
        raise NotImplementedError

    def set_current_position(self, position: Any) -> None:
        raise NotImplementedError

    def position_at_fraction(self, fraction: float) -> Any:
        raise NotImplementedError

    def try_split(self, position: Any) -> tuple[Any, float] | None:
        raise NotImplementedError

    def fraction_consumed(self) -> float:
        raise NotImplementedError

    def split_points(self) -> tuple[Any, Any]:
        return RangeTracker.SPLIT_POINTS_UNKNOWN, RangeTracker.SPLIT_POINTS_UNKNOWN

    def set_split_points_unclaimed_callback(self, callback: Any) -> None:
        raise NotImplementedError


# -- reading --------------------------------------------------------------------------------

#: bundle size for a source that cannot estimate its size (Beam's default)
DEFAULT_BUNDLE_BYTES = 64 << 20


def desired_bundle_size(source: BoundedSource, parallelism: int) -> int:
    """Bytes per bundle so that the source is read in about ``parallelism`` bundles."""
    try:
        estimate = source.estimate_size()
    except NotImplementedError:
        estimate = None
    if not estimate:
        return DEFAULT_BUNDLE_BYTES
    return max(1, -(-int(estimate) // max(1, parallelism)))


def split_source(source: BoundedSource, parallelism: int, where: str) -> list[SourceBundle]:
    """The source's bundles for ``parallelism`` readers; ``where`` names the transform in errors."""
    try:
        size = desired_bundle_size(source, parallelism)
    except Exception as error:
        msg = f"{where}: {type(source).__name__}.estimate_size() failed: {type(error).__name__}: {error}"
        raise ValueError(msg) from error
    try:
        bundles = list(source.split(size))
    except NotImplementedError:
        bundles = [SourceBundle(1, source, None, None)]  # a source that does not split is one bundle
    except Exception as error:
        msg = f"{where}: {type(source).__name__}.split({size}) failed: {type(error).__name__}: {error}"
        raise ValueError(msg) from error
    for bundle in bundles:
        if not isinstance(bundle, SourceBundle):
            msg = f"{where}: {type(source).__name__}.split() must yield SourceBundle(weight, source, start, stop), got {bundle!r}"
            raise TypeError(msg)
    return bundles


_GLOBAL = (GlobalWindow(),)

#: records read before they are handed on together (``read_bundle``, ``read_bundle_values``)
_RECORD_CHUNK = 256


def _record_chunks(bundle: SourceBundle) -> Iterator[list[Any]]:
    tracker = bundle.source.get_range_tracker(bundle.start_position, bundle.stop_position)
    records = iter(bundle.source.read(tracker))
    while True:
        chunk = list(islice(records, _RECORD_CHUNK))
        if chunk:
            yield chunk
        if len(chunk) < _RECORD_CHUNK:
            return


def read_bundle(bundle: SourceBundle) -> Iterator[WindowedValue]:
    """The elements of one bundle, in the global window (a ``TimestampedValue`` keeps its
    time; one from a source that ``yields_plain_values`` fails the read)."""
    if getattr(bundle.source, "yields_plain_values", False) is True:
        return chain.from_iterable(map(_global_elements, map(_plain_values, _record_chunks(bundle), repeat(bundle.source))))
    return chain.from_iterable(map(_as_elements, _record_chunks(bundle)))


def _global_elements(values: list[Any]) -> list[WindowedValue]:
    # Built in C, with no Python frame per value.
    return list(map(new_windowed_value, zip(values, repeat(MIN_TIMESTAMP.micros), repeat(_GLOBAL), repeat(PANE_INFO_UNKNOWN))))


def _as_elements(records: list[Any]) -> list[WindowedValue]:
    if not any(map(isinstance, records, repeat(TimestampedValue))):
        return _global_elements(records)  # plain values: the common chunk
    start = MIN_TIMESTAMP.micros
    return [
        WindowedValue(record.value, record.timestamp_micros, _GLOBAL, PANE_INFO_UNKNOWN)
        if isinstance(record, TimestampedValue)
        else WindowedValue(record, start, _GLOBAL, PANE_INFO_UNKNOWN)
        for record in records
    ]


def read_bundle_values(bundle: SourceBundle) -> Iterator[Any]:
    """The records of one bundle of a source that ``yields_plain_values``: the values of
    the elements ``read_bundle`` gives, each in the global window at the minimum
    timestamp with an unknown pane, which the reader builds only if it needs them. A
    ``TimestampedValue`` among them fails the read: as a value it would lose its time."""
    return chain.from_iterable(map(_plain_values, _record_chunks(bundle), repeat(bundle.source)))


def _plain_values(records: list[Any], source: BoundedSource) -> list[Any]:
    if any(map(isinstance, records, repeat(TimestampedValue))):
        stamped = next(record for record in records if isinstance(record, TimestampedValue))
        msg = (
            f"{type(source).__name__} says it yields plain values (yields_plain_values), but its "
            f"read() yielded {stamped!r}; set yields_plain_values = False to keep its timestamps"
        )
        raise TypeError(msg)
    return records


class ReadBoundedSource(PTransform):
    """The primitive under ``Read(bounded_source)``: the runner splits and reads the source."""

    is_primitive = True

    def __init__(self, source: BoundedSource) -> None:
        super().__init__()
        self.source = source

    def default_label(self) -> str:
        return f"Read({type(self.source).__name__})"

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        return pvalue.PCollection(pbegin.pipeline)


class Read(PTransform):
    """Reads a ``BoundedSource`` (split into bundles read in parallel), or applies a
    ``PTransform`` given in its place, as Beam's ``Read`` does.

    >>> records = p | "ReadRecords" >> Read(MySource())                  # doctest: +SKIP
    """

    def __init__(self, source: Any) -> None:
        super().__init__()
        if isinstance(source, (BoundedSource, PTransform)):
            self.source = source
            return
        is_bounded = getattr(source, "is_bounded", None)
        if callable(is_bounded) and not is_bounded():
            msg = (
                f"Read({type(source).__name__}): reading an unbounded source (Beam's UnboundedSource) "
                "is not supported by sparkbeam; use sparkbeam's stream reads (ReadFromKafka, "
                "ReadFromTextStream, ...) or TestStream"
            )
            raise NotImplementedError(msg)
        msg = f"Read takes a BoundedSource (sparkbeam.io.iobase.BoundedSource) or a PTransform, got {source!r}"
        raise TypeError(msg)

    def default_label(self) -> str:
        return "Read"

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = f"Read is a root transform: apply it to the pipeline (p | Read(...)), not to {pbegin!r}"
            raise TypeError(msg)
        if isinstance(self.source, PTransform):
            return pbegin.pipeline | self.source
        return pbegin | ReadBoundedSource(self.source)


# -- writing --------------------------------------------------------------------------------


class Sink:
    """Beam's custom sink protocol, for ``Write``: ``initialize_write`` once,
    ``open_writer(init_result, uid)`` per bundle or shard, ``pre_finalize`` and
    ``finalize_write`` once. ``num_shards`` (an attribute, 0 by default) fixes the shard count."""

    def initialize_write(self) -> Any:
        raise NotImplementedError

    def open_writer(self, init_result: Any, uid: str) -> Writer:
        raise NotImplementedError

    def pre_finalize(self, init_result: Any, writer_results: Any) -> Any:
        raise NotImplementedError

    def finalize_write(self, init_result: Any, writer_results: Any, pre_finalize_result: Any) -> Any:
        raise NotImplementedError

    def display_data(self) -> dict[str, Any]:
        return {}


class Writer:
    """Writes one bundle's or shard's elements for a ``Sink``; ``close()`` returns its result."""

    def write(self, value: Any) -> None:
        raise NotImplementedError

    def close(self) -> Any:
        raise NotImplementedError

    def at_capacity(self) -> bool:
        return False


def _new_uid() -> str:
    import uuid

    return uuid.uuid4().hex


class _WriteBundles(DoFn):
    """Opens a writer at a bundle's first element; closes it and emits its result at the end."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def start_bundle(self) -> None:
        self.writer: Writer | None = None

    def process(self, element: Any, init_result: Any) -> None:
        if self.writer is None:
            self.writer = self.sink.open_writer(init_result, _new_uid())
        self.writer.write(element)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self.writer is not None:
            result = self.writer.close()
            self.writer = None
            window = GlobalWindow()
            yield WindowedValue(result, window.max_timestamp().micros, (window,))


class _WriteShard(DoFn):
    """Writes one grouped shard ``(key, elements)`` with its own writer."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def process(self, keyed: tuple[Any, Any], init_result: Any) -> Iterator[Any]:
        writer = self.sink.open_writer(init_result, _new_uid())
        for element in keyed[1]:
            writer.write(element)
        yield writer.close()


class _RoundRobinShard(DoFn):
    def __init__(self, count: int) -> None:
        self.count = count

    def start_bundle(self) -> None:
        self.counter = random.randrange(self.count)

    def process(self, element: Any) -> Iterator[tuple[int, Any]]:
        self.counter = (self.counter + 1) % self.count
        yield self.counter, element


def _under_none(element: Any) -> tuple[None, Any]:
    return None, element


def _values(keyed: tuple[Any, Any]) -> Any:
    return keyed[1]


def _initialize(unused: Any, sink: Sink) -> Any:
    return sink.initialize_write()


def _pre_finalize(unused: Any, sink: Sink, init_result: Any, write_results: Any) -> Any:
    # As Beam: pre_finalize returns an iterable, whose one element finalize_write receives.
    return sink.pre_finalize(init_result, write_results)


def _finalize(unused: Any, sink: Sink, init_result: Any, write_results: Any, min_shards: int, pre_finalize_result: Any) -> Any:
    write_results = list(write_results)
    # Empty shards up to min_shards, as Beam's WriteImpl writes them (unless skip_if_empty).
    if write_results or not getattr(sink, "skip_if_empty", False):
        for _ in range(min_shards - len(write_results)):
            write_results.append(sink.open_writer(init_result, _new_uid()).close())
    outputs = sink.finalize_write(init_result, write_results, pre_finalize_result)
    # Beam stamps them MAX_TIMESTAMP, which sparkbeam keeps for the end of time: the last
    # moment of the global window is as late as an element can be.
    end = GlobalWindow().max_timestamp()
    return [TimestampedValue(value, end) for value in outputs or ()]


class Write(PTransform):
    """Writes a bounded PCollection to a ``Sink`` (or applies a ``PTransform`` given in its place).

    >>> pcoll | Write(MySink())                                          # doctest: +SKIP
    """

    def __init__(self, sink: Any) -> None:
        super().__init__()
        if not isinstance(sink, (Sink, PTransform)):
            msg = f"Write takes a sink (sparkbeam.io.iobase.Sink) or a PTransform, got {sink!r}"
            raise TypeError(msg)
        self.sink = sink

    def default_label(self) -> str:
        return "Write"

    def expand(self, pcoll: pvalue.PCollection) -> Any:
        if isinstance(self.sink, PTransform):
            return pcoll | self.sink
        if not pcoll.is_bounded:
            msg = (
                f"Write({type(self.sink).__name__}): writing an unbounded PCollection to an iobase.Sink is not "
                "supported by sparkbeam; use fileio.WriteToFiles or WriteToText, which write streams"
            )
            raise NotImplementedError(msg)
        sink = self.sink
        num_shards = getattr(sink, "num_shards", 0) or 0
        do_once = pcoll.pipeline | "DoOnce" >> Create([None])
        init_result = do_once | "InitializeWrite" >> Map(_initialize, sink)
        in_global = pcoll | "InGlobalWindow" >> WindowInto(GlobalWindows())
        if num_shards >= 1:
            keyed = in_global | "AssignShards" >> (ParDo(_RoundRobinShard(num_shards)) if num_shards > 1 else Map(_under_none))
            write_results = (
                keyed
                | "GroupShards" >> GroupByKey()
                | "WriteBundles" >> ParDo(_WriteShard(sink), pvalue.AsSingleton(init_result))
            )
        else:
            num_shards = 1
            write_results = (
                in_global
                | "WriteBundles" >> ParDo(_WriteBundles(sink), pvalue.AsSingleton(init_result))
                | "Pair" >> Map(_under_none)
                | "GroupResults" >> GroupByKey()
                | "Extract" >> FlatMap(_values)
            )
        pre_finalized = do_once | "PreFinalize" >> FlatMap(
            _pre_finalize, sink, pvalue.AsSingleton(init_result), pvalue.AsIter(write_results)
        )
        return do_once | "FinalizeWrite" >> FlatMap(
            _finalize,
            sink,
            pvalue.AsSingleton(init_result),
            pvalue.AsIter(write_results),
            num_shards,
            pvalue.AsSingleton(pre_finalized),
        )


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.iobase")
