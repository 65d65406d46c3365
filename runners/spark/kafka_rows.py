"""A Kafka micro-batch's records turned into write-ahead-log pieces column by column, through Arrow.

``stream_rows.wal_records`` turns every source's rows into elements one ``Row`` at a time:
Spark pickles each row to the Python worker, PySpark rebuilds it (a datetime for the Kafka
timestamp, a tuple with its field names), and each becomes a dict, an element and a pickled
``WindowedValue``: about 15 µs of Python per record, written and read back (a third of
that here; benchmarks/README.md, "Kafka"). Here the batch reaches Python as Arrow record
batches (``mapInArrow``) of the columns that matter (key, value, event time, topic-partition,
and topic, partition and offset for dead letters), and each slice of ``PIECE_RECORDS``
records becomes one *columns piece*: the elements and their timestamps as two lists, pickled
together (built and unpickled in C, with no per-element Python call); the step's read
(``wal_elements``) makes them ``WindowedValue`` s in the global window again.

What each record becomes is what ``wal_records`` makes of it, checked by the tests on both
paths: the deserializers run on every key and value (the UTF-8 ``StringDeserializer`` of a
value as one Arrow cast, falling back to Python's decoding for a slice Arrow refuses); a
record that fails to deserialise or whose timestamp is out of range is a ``BadRecord`` naming
``kafka <topic>-<partition> offset <offset>``, pickled after the slice's columns piece; a
record behind the source's watermark by more than its allowed delay is dropped and counted;
the batch's per-partition statistics (count, event-time range) go to the same accumulator.
A ``ReadFromKafka`` with ``with_metadata``, a ``timestamp`` or a ``partition_by`` function,
or a driver without pyarrow and pandas (PySpark's Arrow functions need both), goes through
``wal_records``.
"""

from __future__ import annotations

import base64
import functools
import io
import itertools
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io.filebased import BadRecord
from sparkbeam.io.kafka import KafkaDecode
from sparkbeam.io.streaming import StreamReadSpec
from sparkbeam.runners.spark.metrics import task_container
from sparkbeam.runners.spark.sealed_files import PIECE_RECORDS
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.stream_rows import EVENT_MICROS, PARTITION
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import GlobalWindow

__all__ = ["COLUMNS_TAG", "applies", "arrow_ready", "kafka_wal_lines", "wal_elements"]

#: the first item of a columns piece: ``(COLUMNS_TAG, elements, timestamps)`` (a log's other
#: records are WindowedValues, never a plain tuple)
COLUMNS_TAG = "sparkbeam-wal-columns/1"
_GLOBAL = (GlobalWindow(),)
_LINE = "line"


def applies(spec: StreamReadSpec) -> bool:
    """Whether a source's batches take this path: ``ReadFromKafka``'s ``(key, value)``
    elements stamped by Kafka's time or on ingestion, partitioned by topic-partition."""
    return spec.format == "kafka" and spec.element == "kafka" and spec.timestamp is None and spec.partition_by is None


@functools.cache
def arrow_ready() -> bool:
    """Whether PySpark's Arrow functions run here (they need pyarrow and pandas, which
    sparkbeam does not require; without them Kafka's batches take the row path)."""
    try:
        from pyspark.sql.pandas.utils import (
            require_minimum_pandas_version,
            require_minimum_pyarrow_version,
        )

        require_minimum_pandas_version()
        require_minimum_pyarrow_version()
    except Exception:  # not installed, or too old: the row path needs neither
        return False
    return True


def columns(frame: Any) -> Any:
    """The batch's columns this path reads (``intake._frame`` made them)."""
    names = ["key", "value", "topic", "partition", "offset", PARTITION]
    if EVENT_MICROS in frame.columns:
        names.append(EVENT_MICROS)
    return frame.select(*names)


def kafka_wal_lines(frame: Any, spec: StreamReadSpec, ingest_micros: int, drop_before: int | None, sealer: Sealer, stats: Any) -> Any:
    """The batch's write-ahead log as a frame of sealed, base64 text lines (one per piece)."""
    write = functools.partial(_pieces, spec, ingest_micros, drop_before, sealer, stats)
    return columns(frame).mapInArrow(write, f"{_LINE} string")


# -- on the executors ------------------------------------------------------------------
def _origin(topic: Any, partition: Any, offset: Any) -> str:
    return f"kafka {topic}-{partition} offset {offset}"


def _decoded(decode: KafkaDecode | None, keys: list, values: list) -> list | None:
    """The elements of a slice, or None if a record fails (the slice then goes record by record)."""
    if decode is None:
        return list(zip(keys, values))
    try:
        return decode.many(keys, values)
    except Exception:  # the user's deserializer or bad bytes: found again record by record
        return None


def _one_by_one(
    decode: KafkaDecode | None, keys: list, values: list, times: list, origins: list[str], ingest_micros: int
) -> tuple[list, list[bool], list[WindowedValue]]:
    """A slice that failed as a whole, record by record as ``wal_records`` goes: each
    record's element (None for a dead letter), whether it is good, and the dead letters."""
    elements: list = []
    good: list[bool] = []
    bad: list[WindowedValue] = []
    low, high = MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros
    for index, (key, value, timestamp) in enumerate(zip(keys, values, times)):
        element = (key, value)
        try:
            if decode is not None:
                element = decode(key, value)
            if not low <= timestamp < high:
                msg = f"timestamp {timestamp} µs is outside [MIN_TIMESTAMP, MAX_TIMESTAMP)"
                raise ValueError(msg)
        except Exception as error:  # the user's deserializer, or bad data
            failure = BadRecord(origins[index], None, repr(element), f"{type(error).__name__}: {error}")
            bad.append(WindowedValue(failure, ingest_micros, _GLOBAL, PANE_INFO_UNKNOWN))
            elements.append(None)
            good.append(False)
            continue
        elements.append(element)
        good.append(True)
    return elements, good, bad


def _add_stats(per_partition: dict[str, list[int]], partitions: Any, times: Any) -> None:
    """Each partition's count and event-time range in this slice, merged into the task's."""
    import pyarrow as pa

    grouped = pa.table({"p": partitions, "t": times}).group_by("p").aggregate([("t", "count"), ("t", "min"), ("t", "max")])
    for key, count, first, last in zip(*(grouped.column(n).to_pylist() for n in ("p", "t_count", "t_min", "t_max"))):
        name = "0" if key is None else str(key)
        entry = per_partition.get(name)
        if entry is None:
            per_partition[name] = [count, first, last]
        else:
            entry[0] += count
            entry[1] = min(entry[1], first)
            entry[2] = max(entry[2], last)


def _pieces(
    spec: StreamReadSpec,
    ingest_micros: int,
    drop_before: int | None,
    sealer: Sealer,
    stats: Any,
    batches: Iterable[Any],
) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    task_container()  # the task's start, where a reused worker's long-lived objects are frozen (worker_gc)
    per_partition: dict[str, list[int]] = {}
    dropped = bad_count = 0
    low, high = MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros
    for whole in batches:
        for start in range(0, whole.num_rows, PIECE_RECORDS):
            part = whole.slice(start, PIECE_RECORDS)
            if EVENT_MICROS in part.schema.names:
                times_column = pc.fill_null(part.column(EVENT_MICROS), ingest_micros)
            else:
                times_column = pa.array([ingest_micros] * part.num_rows, pa.int64())
            keys = part.column("key").to_pylist()
            values = part.column("value").to_pylist()
            times = times_column.to_pylist()
            in_range = pc.all(pc.and_(pc.greater_equal(times_column, low), pc.less(times_column, high))).as_py()
            elements = _decoded(spec.decode, keys, values) if in_range else None
            bad: list[WindowedValue] = []
            keep = None  # every record kept
            if elements is None:
                origins = list(map(_origin, *(part.column(name).to_pylist() for name in ("topic", "partition", "offset"))))
                elements, good, bad = _one_by_one(spec.decode, keys, values, times, origins, ingest_micros)
                bad_count += len(bad)
                keep = pa.array(good, pa.bool_())
            if drop_before is not None:
                # a dead letter is one even behind the watermark, as in wal_records
                recent = pc.greater_equal(times_column, drop_before)
                behind = pc.invert(recent) if keep is None else pc.and_(keep, pc.invert(recent))
                dropped += pc.sum(pc.cast(behind, pa.int64())).as_py() or 0
                keep = recent if keep is None else pc.and_(keep, recent)
            partitions = part.column(PARTITION)
            if keep is not None:
                mask = keep.to_pylist()
                elements, times = list(itertools.compress(elements, mask)), list(itertools.compress(times, mask))
                partitions, times_column = partitions.filter(keep), times_column.filter(keep)
            if elements:
                _add_stats(per_partition, partitions, times_column)
            buffer = io.BytesIO()
            pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
            if elements:
                pickler.dump((COLUMNS_TAG, elements, times))
            for wv in bad:
                pickler.dump(wv)
            if buffer.tell():
                line = base64.b64encode(sealer.seal("wal", buffer.getvalue())).decode("ascii")
                yield pa.RecordBatch.from_arrays([pa.array([line], pa.string())], [_LINE])
    stats.add({"partitions": per_partition, "dropped": dropped, "bad": bad_count})


def _expanded(record: Any) -> Iterable[WindowedValue]:
    if type(record) is tuple and record and record[0] == COLUMNS_TAG:
        _, elements, times = record
        return map(new_windowed_value, zip(elements, times, itertools.repeat(_GLOBAL), itertools.repeat(PANE_INFO_UNKNOWN)))
    return (record,)


def wal_elements(records: Iterable[Any]) -> Iterator[WindowedValue]:
    """A write-ahead log's records as elements: a columns piece's in the global window
    (built in C), any other record (a ``WindowedValue``) as it is."""
    return itertools.chain.from_iterable(map(_expanded, records))
