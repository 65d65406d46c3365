"""A real source's Structured Streaming query, written micro-batch by micro-batch to a write-ahead log.

Each source runs one Spark streaming query whose ``foreachBatch`` function, for batch *b*:

1. turns each row into the pipeline's element and its event time on the executors, with
   records the source cannot parse or stamp kept as ``BadRecord`` dead letters (text, CSV
   and JSON files are read whole and parsed line by line, so that a dead letter carries its
   file, line number and raw line), and
   records behind the source's watermark by more than its allowed delay dropped;
2. writes what it kept under ``wal/<b>`` (pickled, through Hadoop's output committer),
   then a small ``<b>.json`` beside it with the batch's per-partition statistics — the
   batch is complete only once that file exists;
3. returns, and only then does Spark mark batch *b* committed in its own checkpoint.

So every batch Spark considers done is durable here; a batch replayed by Spark after a
crash finds its log entry complete and is not written twice. The step loop takes complete
batches from ``ready`` and journals which ones each step took, so a step replayed after a
restart reads exactly what it read before.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import re
import threading
import time
import uuid
import zoneinfo
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from sparkbeam.io import commits
from sparkbeam.io.filebased import BadRecord, schema_row_type
from sparkbeam.io.streaming import StreamReadSpec
from sparkbeam.runners.core.errors import TransformError
from sparkbeam.runners.core.ops import StreamReadOp
from sparkbeam.runners.core.stream_sources import PartitionStats, WalBatch
from sparkbeam.runners.spark.counters import read_and_release
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp, to_micros
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow

__all__ = ["StreamIntake", "event_micros", "session_time_zone", "wal_records"]

_LOG = logging.getLogger(__name__)

PARTITION = "__sparkbeam_partition"
EVENT_MICROS = "__sparkbeam_event_micros"
ORIGIN = "__sparkbeam_origin"
LINE = "__sparkbeam_line"
RAW = "__sparkbeam_raw"
HIDDEN = (PARTITION, EVENT_MICROS, ORIGIN, LINE, RAW)

#: formats read line by line: each file is read whole and split into numbered lines, so that
#: a dead letter names its file and line (Spark's own readers know neither)
LINE_FORMATS = ("text", "csv", "json")

_GLOBAL = (GlobalWindow(),)

#: Spark's per-trigger limits: a source with one of them set takes one micro-batch per step
PER_TRIGGER_LIMITS = frozenset(
    {"maxFilesPerTrigger", "maxBytesPerTrigger", "maxOffsetsPerTrigger", "maxRecordsPerTrigger"}
)


# -- on the executors ------------------------------------------------------------------


#: Spark's zone offsets: '+05', '+05:30', '+05:30:00', also prefixed by UTC, GMT or UT
_ZONE_OFFSET = re.compile(r"^(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?$")


@functools.lru_cache(maxsize=16)
def session_time_zone(name: str) -> datetime.tzinfo:
    """Spark's ``spark.sql.session.timeZone`` as a Python time zone: a region
    (``'Europe/Paris'``), ``'UTC'``/``'Z'``, or an offset (``'+05:30'``, ``'GMT+8'``).

    >>> session_time_zone("+05:30")
    datetime.timezone(datetime.timedelta(seconds=19800))
    """
    text = name.strip()
    if text in ("Z", "UTC", "GMT", "UT"):
        return datetime.timezone.utc
    match = _ZONE_OFFSET.match(text)
    if match:
        sign, hours, minutes, seconds = match.groups()
        offset = datetime.timedelta(hours=int(hours), minutes=int(minutes or 0), seconds=int(seconds or 0))
        return datetime.timezone(-offset if sign == "-" else offset)
    try:
        return zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        msg = (
            f"spark.sql.session.timeZone is {name!r}, a zone Python's zoneinfo does not know on this "
            "machine; set it to a region such as 'Europe/Paris' or an offset such as '+01:00' "
            "(or install the tzdata package)"
        )
        raise ValueError(msg) from None


def event_micros(value: Any, zone: datetime.tzinfo = datetime.timezone.utc) -> int:
    """An event time read from a record: a Timestamp, seconds, a datetime or RFC 3339 text.

    A datetime without a zone, or text without an offset, is wall-clock time in ``zone``
    (the session's time zone, as Spark reads such values).
    """
    if isinstance(value, str):
        text = value.strip()
        try:
            return Timestamp.from_rfc3339(text).micros
        except ValueError:
            parsed = datetime.datetime.fromisoformat(text)
            return Timestamp.from_utc_datetime(parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)).micros
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    if value is None:
        msg = "the timestamp is missing (null)"
        raise ValueError(msg)
    return to_micros(value)


def _element(spec: StreamReadSpec, fields: tuple[str, ...], values: list) -> Any:
    kind = spec.element
    if kind == "line":
        return values[0]
    if kind == "value":
        return values[fields.index("value")]
    if kind == "dict":
        return dict(zip(fields, values))
    if kind == "row":
        return schema_row_type(fields)(*values)
    if kind == "kafka":
        key, value = values[fields.index("key")], values[fields.index("value")]
        return (bytes(key) if key is not None else None, bytes(value) if value is not None else None)
    if kind == "kafka_metadata":
        record = dict(zip(fields, values))
        for name in ("key", "value"):
            if record.get(name) is not None:
                record[name] = bytes(record[name])
        return schema_row_type(tuple(record))(*record.values())
    msg = f"unknown element kind {kind!r}"
    raise ValueError(msg)


def _raw(spec: StreamReadSpec, element: Any, corrupt: str | None, raw: str | None) -> str:
    if raw is not None:
        return raw
    if corrupt is not None:
        return corrupt
    if isinstance(element, str):
        return element
    return repr(element)


def _local_path(origin: str) -> str:
    """A local file's path as users wrote it (Spark gives ``file:/...`` or ``file:///...``
    URLs); any other URL (``hdfs://...``) or description unchanged."""
    if origin.startswith("file:"):
        from urllib.parse import unquote

        return unquote("/" + origin[len("file:") :].lstrip("/"))
    return origin


def wal_records(
    spec: StreamReadSpec,
    ingest_micros: int,
    drop_before: int | None,
    time_zone: str,
    stats: Any,
    rows: Iterable[Any],
) -> Iterator[WindowedValue]:
    """The write-ahead log's records of one partition of a micro-batch (see module docs).

    ``time_zone`` is the session time zone the batch's query ran with, read on the driver:
    naive datetimes are wall-clock times in it (the executor process's zone plays no part).
    """
    zone = session_time_zone(time_zone)
    per_partition: dict[str, list[int]] = {}
    dropped = bad = 0
    names: tuple[str, ...] | None = None
    fields: tuple[str, ...] = ()
    low, high = MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros
    for row in rows:
        if names is None:
            names = tuple(row.__fields__)
            fields = tuple(n for n in names if n not in HIDDEN and n != spec.corrupt_column)
        record = dict(zip(names, row))
        partition = record.get(PARTITION)
        origin = record.get(ORIGIN) or spec.describe()
        corrupt = record.get(spec.corrupt_column) if spec.corrupt_column else None
        element = _element(spec, fields, [record[n] for n in fields])
        try:
            if corrupt is not None:
                msg = "the record does not parse with the source's schema"
                raise ValueError(msg)
            if EVENT_MICROS in record and record[EVENT_MICROS] is not None:
                timestamp = record[EVENT_MICROS]
            elif spec.timestamp is None:
                timestamp = ingest_micros
            elif callable(spec.timestamp):
                timestamp = event_micros(spec.timestamp(element), zone)
            else:
                timestamp = event_micros(record[spec.timestamp], zone)
            if not low <= timestamp < high:
                msg = f"timestamp {timestamp} µs is outside [MIN_TIMESTAMP, MAX_TIMESTAMP)"
                raise ValueError(msg)
            if callable(spec.partition_by):
                partition = spec.partition_by(element)
            elif isinstance(spec.partition_by, str):
                partition = record[spec.partition_by]
        except Exception as error:  # the user's parse or timestamp code, or bad data
            bad += 1
            failure = BadRecord(
                _local_path(str(origin)),
                record.get(LINE),
                _raw(spec, element, corrupt, record.get(RAW)),
                f"{type(error).__name__}: {error}",
            )
            yield WindowedValue(failure, ingest_micros, _GLOBAL, PANE_INFO_UNKNOWN)
            continue
        if drop_before is not None and timestamp < drop_before:
            dropped += 1
            continue
        key = "0" if partition is None else str(partition)
        entry = per_partition.get(key)
        if entry is None:
            per_partition[key] = [1, timestamp, timestamp]
        else:
            entry[0] += 1
            entry[1] = min(entry[1], timestamp)
            entry[2] = max(entry[2], timestamp)
        yield WindowedValue(element, timestamp, _GLOBAL, PANE_INFO_UNKNOWN)
    stats.add({"partitions": per_partition, "dropped": dropped, "bad": bad})


def _naive_local(data_type: Any) -> Any:
    """``data_type`` with every TIMESTAMP (nested ones too) made TIMESTAMP_NTZ, or None if it
    has none. Spark casts a TIMESTAMP to TIMESTAMP_NTZ in the session time zone, and PySpark
    turns TIMESTAMP_NTZ into a naive datetime without the Python process's zone, whereas it
    turns TIMESTAMP into the executor process's local time."""
    from pyspark.sql.types import (
        ArrayType,
        MapType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    if isinstance(data_type, TimestampType):
        return TimestampNTZType()
    if isinstance(data_type, ArrayType):
        element = _naive_local(data_type.elementType)
        return None if element is None else ArrayType(element, data_type.containsNull)
    if isinstance(data_type, MapType):
        key, value = _naive_local(data_type.keyType), _naive_local(data_type.valueType)
        if key is None and value is None:
            return None
        return MapType(key or data_type.keyType, value or data_type.valueType, data_type.valueContainsNull)
    if isinstance(data_type, StructType):
        fields = [_naive_local(field.dataType) for field in data_type.fields]
        if all(field is None for field in fields):
            return None
        return StructType(
            [
                StructField(field.name, new or field.dataType, field.nullable, field.metadata)
                for field, new in zip(data_type.fields, fields)
            ]
        )
    return None


def _session_local_columns(frame: Any) -> list[Any]:
    """The frame's columns, with timestamps as naive wall-clock times of the session's zone."""
    from pyspark.sql import functions as F

    columns = []
    for field in frame.schema.fields:
        column = F.col("`" + field.name.replace("`", "``") + "`")
        local = _naive_local(field.dataType)
        columns.append(column if local is None else column.cast(local).alias(field.name))
    return columns


def _merge_stats(total: dict, part: dict) -> dict:
    for key, (count, low, high) in part.get("partitions", {}).items():
        entry = total["partitions"].get(key)
        if entry is None:
            total["partitions"][key] = [count, low, high]
        else:
            total["partitions"][key] = [entry[0] + count, min(entry[1], low), max(entry[2], high)]
    total["dropped"] += part.get("dropped", 0)
    total["bad"] += part.get("bad", 0)
    return total


@functools.cache
def _stats_param() -> Any:
    """One AccumulatorParam for every batch (a class made per batch would stay in memory)."""
    from pyspark.accumulators import AccumulatorParam

    class _Stats(AccumulatorParam):
        def zero(self, value: dict) -> dict:
            return {"partitions": {}, "dropped": 0, "bad": 0}

        def addInPlace(self, total: dict, part: dict) -> dict:
            return _merge_stats(total, part)

    return _Stats()


# -- on the driver ---------------------------------------------------------------------


class StreamIntake:
    """One real source: its Structured Streaming query and its write-ahead log."""

    def __init__(
        self,
        spark: Any,
        op: StreamReadOp,
        directory: str,
        *,
        trigger_seconds: float,
        available_now: bool,
        drop_before: Any,
    ) -> None:
        self.spark = spark
        self.op = op
        self.spec = op.spec
        self.wal_dir = commits.join(directory, "wal")
        self.spark_checkpoint = commits.join(directory, "spark")
        self.trigger_seconds = trigger_seconds
        self.available_now = available_now
        self.drop_before = drop_before
        self.query: Any = None
        self._ready: dict[int, WalBatch] = {}
        self._lock = threading.Lock()
        self._idle = threading.Event()  # set while no batch is being written
        self._idle.set()
        commits.makedirs(self.wal_dir)
        self._recover()

    @property
    def limited(self) -> bool:
        """The source has a per-trigger limit (``max_files_per_trigger``...): Spark cuts its
        micro-batches to it, and a step takes at most one of them, so that the limit holds
        per step even when batches piled up in the log (after a restart, or behind slow steps)."""
        return any(key in PER_TRIGGER_LIMITS for key, _ in self.spec.options)

    @property
    def where(self) -> str:
        return f"'{self.op.label}' (applied at {self.op.location})"

    def _recover(self) -> None:
        """Batches made durable before a restart. A batch without its ``.json`` was cut short:
        Spark did not commit it and will run it again, so its partial log is removed."""
        names = set(commits.list_names(self.wal_dir))
        for name in names:
            if name.endswith(".json") and not commits.is_temporary(name):
                batch = WalBatch.from_plain(json.loads(commits.read_bytes(commits.join(self.wal_dir, name))))
                if batch.path is not None:  # the directory may have moved since
                    batch = attrs.evolve(batch, path=commits.join(self.wal_dir, f"{batch.batch_id:010d}"))
                self._ready[batch.batch_id] = batch
        for name in names:
            path = commits.join(self.wal_dir, name)
            cut_short = not name.endswith(".json") and f"{name}.json" not in names
            if commits.is_temporary(name) or cut_short:
                commits.remove(path)

    # -- the query -----------------------------------------------------------------------
    def start(self) -> None:
        self.check_time_zone()
        frame = self._frame()
        writer = (
            frame.writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", self.spark_checkpoint)
            .queryName(f"sparkbeam-{self.op.label}-{uuid.uuid4().hex[:8]}".replace("/", "_").replace(" ", "_"))
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{max(1, round(self.trigger_seconds * 1000))} milliseconds")
        self.query = writer.start()

    def wait_until_running(self, timeout: float = 120.0) -> None:
        """Block until the query has initialised its source (steps before that see nothing)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            status = self.query.status if self.query is not None else {}
            if not self.query.isActive or not str(status.get("message", "")).startswith("Initializing"):
                return
            time.sleep(0.05)
        _LOG.warning("%s: the source's query is still initialising after %.0fs", self.op.label, timeout)

    def _frame(self) -> Any:
        from pyspark.sql import functions as F
        from pyspark.sql.types import (
            StringType,
            StructField,
            StructType,
            TimestampNTZType,
            TimestampType,
        )

        spec = self.spec
        schema: Any = None
        reader = self.spark.readStream.format("text" if self.by_lines else spec.format)
        for key, value in spec.options:
            reader = reader.option(key, value)
        if spec.format in ("csv", "json", "parquet"):
            schema = StructType.fromDDL(spec.schema) if spec.schema else self._infer_schema()
            if spec.corrupt_column:
                if spec.corrupt_column not in schema.fieldNames():
                    schema = schema.add(StructField(spec.corrupt_column, StringType(), True))
                if not self.by_lines:
                    reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", spec.corrupt_column)
            if not self.by_lines:
                reader = reader.schema(schema)
        try:
            if self.by_lines:
                frame = self._numbered_lines(reader, schema if spec.format != "text" else None)
            else:
                frame = reader.load(spec.path) if spec.path is not None else reader.load()
        except Exception as error:
            text = str(error)
            if spec.format == "kafka" and "kafka" in text.lower():
                msg = (
                    f"{self.where}: Spark's Kafka connector is not on the classpath; start with "
                    "--spark_conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:"
                    f"{self.spark.version} ({text.splitlines()[0]})"
                )
            else:
                msg = f"{self.where}: cannot open the {spec.describe()}: {text.splitlines()[0]}"
            raise TransformError(msg) from None
        columns = frame.columns
        for setting in ("timestamp", "partition_by"):
            value = getattr(spec, setting)
            if isinstance(value, str) and value not in columns:
                msg = f"{self.where}: the {setting} field {value!r} is not in the source's records (fields: {', '.join(columns)})"
                raise TransformError(msg)
        extra = []
        time_column = spec.timestamp if isinstance(spec.timestamp, str) else spec.source_time_column
        if time_column is not None:
            time_type = frame.schema[time_column].dataType
            if isinstance(time_type, TimestampType):
                extra.append(F.unix_micros(F.col(time_column)).alias(EVENT_MICROS))
            elif isinstance(time_type, TimestampNTZType):  # wall-clock time: Spark's cast reads it in the session zone
                extra.append(F.unix_micros(F.col(time_column).cast("timestamp")).alias(EVENT_MICROS))
        if spec.partition_by is None:
            if spec.format == "kafka":
                extra.append(F.concat_ws("-", F.col("topic"), F.col("partition").cast("string")).alias(PARTITION))
            elif spec.format == "rate":
                extra.append(F.spark_partition_id().cast("string").alias(PARTITION))
        if spec.format == "parquet" or (spec.format in LINE_FORMATS and ORIGIN not in columns):
            extra.append(F.input_file_name().alias(ORIGIN))
        elif spec.format == "kafka":
            extra.append(
                F.format_string("kafka %s-%s offset %s", F.col("topic"), F.col("partition"), F.col("offset")).alias(ORIGIN)
            )
        return frame.select(*_session_local_columns(frame), *extra)

    @property
    def by_lines(self) -> bool:
        """Read as numbered lines (see ``LINE_FORMATS``), unless a record may span lines."""
        options = {key.lower(): value.lower() for key, value in self.spec.options}
        return self.spec.format in LINE_FORMATS and options.get("multiline", "false") != "true"

    def _numbered_lines(self, reader: Any, schema: Any) -> Any:
        """The source's records parsed from each file's numbered lines: Spark reads each new
        file whole (``wholetext``), splits it into lines numbered from 1 and parses each
        with ``from_json``/``from_csv`` and the source's options, as its own reader would.
        The file's path, the line's number and its text go along in hidden columns. A line
        number is a fact of the file, so a batch Spark runs again yields the same log."""
        from pyspark.sql import functions as F

        spec = self.spec
        options = dict(spec.options)
        if spec.corrupt_column:
            options.update(mode="PERMISSIVE", columnNameOfCorruptRecord=spec.corrupt_column)
        whole = reader.option("wholetext", "true").load(spec.path)
        # the last line's terminator ends it; it does not start an empty line
        text = F.regexp_replace(F.col("value"), r"\r?\n\z", "")
        lines = whole.select(
            F.col("_metadata.file_path").alias(ORIGIN), F.posexplode(F.split(text, r"\r?\n")).alias(LINE, RAW)
        ).withColumn(LINE, F.col(LINE) + 1)
        if spec.format == "text":
            return lines.select(F.col(RAW).alias("value"), ORIGIN, LINE, RAW)
        lines = lines.where(F.trim(F.col(RAW)) != "")  # Spark's readers skip blank lines
        if spec.format == "csv" and options.get("header", "false").lower() == "true":
            lines = lines.where(F.col(LINE) > 1)
        parse = F.from_json if spec.format == "json" else F.from_csv
        shape = schema.simpleString() if spec.format == "csv" else schema  # from_csv takes text
        parsed = lines.select(parse(F.col(RAW), shape, options).alias("__sparkbeam_parsed"), ORIGIN, LINE, RAW)
        return parsed.select(
            *[F.col("__sparkbeam_parsed").getField(name).alias(name) for name in schema.fieldNames()], ORIGIN, LINE, RAW
        )

    def check_time_zone(self) -> str:
        """The session time zone this source's query will read naive times in; refused before
        any data is read if Python cannot use it."""
        name = self.spark.conf.get("spark.sql.session.timeZone")
        try:
            session_time_zone(name)
        except ValueError as error:
            msg = f"{self.where}: {error}"
            raise TransformError(msg) from None
        return name

    def _infer_schema(self) -> Any:
        spec = self.spec
        try:
            reader = self.spark.read.format(spec.format)
            for key, value in spec.options:
                if key != "maxFilesPerTrigger":
                    reader = reader.option(key, value)
            return reader.load(spec.path).schema
        except Exception as error:
            msg = (
                f"{self.where}: cannot infer the schema of {spec.path!r} ({str(error).splitlines()[0]}); "
                "pass schema='field TYPE, ...' to read a directory that may start empty"
            )
            raise TransformError(msg) from None

    def _on_batch(self, frame: Any, batch_id: int) -> None:
        with self._lock:
            if batch_id in self._ready:
                return  # made durable before a restart; Spark is replaying it
        self._idle.clear()
        try:
            self._write_batch(frame, batch_id)
        finally:
            self._idle.set()

    def _write_batch(self, frame: Any, batch_id: int) -> None:
        started = time.perf_counter()
        sc = self.spark.sparkContext
        stats = sc.accumulator({"partitions": {}, "dropped": 0, "bad": 0}, _stats_param())
        ingest = Timestamp.now().micros
        # The zone Spark used for this batch's casts: the query's own copy of the session conf.
        time_zone = frame.sparkSession.conf.get("spark.sql.session.timeZone")
        records = frame.rdd.mapPartitions(
            functools.partial(wal_records, self.spec, ingest, self.drop_before(), time_zone, stats)
        )
        final = commits.join(self.wal_dir, f"{batch_id:010d}")
        temp = commits.temporary_beside(final)
        records.saveAsPickleFile(temp)
        (total,) = read_and_release(stats)
        kept = sum(entry[0] for entry in total["partitions"].values())
        if kept or total["bad"]:
            commits.commit_directory(temp, final)  # replacing an attempt cut short
            path: str | None = final
        else:
            commits.remove(temp)
            path = None
        batch = WalBatch(
            batch_id=batch_id,
            path=path,
            partitions=tuple(
                PartitionStats(key, count, low, high) for key, (count, low, high) in sorted(total["partitions"].items())
            ),
            records=kept,
            dropped=total["dropped"],
            bad=total["bad"],
            offsets=self._spark_offsets(batch_id),
        )
        commits.write_bytes(final + ".json", json.dumps(batch.to_plain()).encode("utf-8"))
        with self._lock:
            self._ready[batch_id] = batch
        _LOG.debug("%s: batch %d durable (%d records) in %.3fs", self.op.label, batch_id, kept, time.perf_counter() - started)

    def _spark_offsets(self, batch_id: int) -> str | None:
        path = commits.join(self.spark_checkpoint, "offsets", str(batch_id))
        try:
            return commits.read_bytes(path).decode("utf-8").splitlines()[-1]
        except (OSError, IndexError):
            return None

    # -- for the step loop ----------------------------------------------------------------
    def take(self, after: int) -> tuple[list[WalBatch], bool]:
        """The complete batches after batch ``after`` that one step takes, in order, and
        whether complete batches are left after them. A ``limited`` source's step takes one
        batch with records (and the empty ones before it)."""
        with self._lock:
            ready = [self._ready[b] for b in sorted(self._ready) if b > after]
        if self.limited:  # empty batches (Spark's first, a rate source's) do not count
            full = next((i for i, b in enumerate(ready) if b.records or b.bad or b.dropped), len(ready) - 1)
            ready, left = ready[: full + 1], len(ready) > full + 1
            return ready, left
        return ready, False

    def batch(self, batch_id: int) -> WalBatch | None:
        with self._lock:
            return self._ready.get(batch_id)

    def batches(self, ids: list[int]) -> list[WalBatch]:
        """The batches a journaled step took (replaying it after a restart)."""
        with self._lock:
            missing = [b for b in ids if b not in self._ready]
            if missing:
                msg = (
                    f"{self.where}: the step journal names write-ahead-log batches {missing} that are "
                    f"not in {self.wal_dir}; the checkpoint directory is damaged"
                )
                raise RuntimeError(msg)
            return [self._ready[b] for b in ids]

    def finished(self) -> bool:
        """The query ended by itself (an available-now run caught up); raises if it failed."""
        self.check()
        return self.query is not None and not self.query.isActive

    def check(self) -> None:
        if self.query is None:
            return
        failure = self.query.exception()
        if failure is not None:
            msg = f"{self.where}: the source's Structured Streaming query failed: {failure.desc.splitlines()[0] if hasattr(failure, 'desc') else failure}"
            raise RuntimeError(msg)

    def forget_through(self, batch_id: int) -> None:
        """Delete the log of batches up to ``batch_id`` (a checkpoint no longer needs them)."""
        with self._lock:
            for b in [b for b in self._ready if b <= batch_id]:
                batch = self._ready.pop(b)
                if batch.path is not None:
                    commits.remove(batch.path)
                commits.remove(commits.join(self.wal_dir, f"{b:010d}.json"))

    def stop(self) -> None:
        # Let a batch being written finish (it is durable either way, but interrupting its
        # Spark job fills the log with the interruption's stack traces).
        self._idle.wait(timeout=30)
        if self.query is not None and self.query.isActive:
            try:
                self.query.stop()
            except Exception:  # stopping after a failure: the failure is what matters
                _LOG.debug("stopping %s failed", self.op.label, exc_info=True)
