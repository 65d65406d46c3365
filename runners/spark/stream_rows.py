"""A real source's rows turned into the pipeline's elements, on the executors, for the
write-ahead log (``intake.py`` runs the query and writes the log on the driver's side).

Each row becomes the element the source declares and its event time (in
``spark.sql.session.timeZone`` for naive timestamps); a row the source cannot parse or stamp
becomes a ``BadRecord`` dead letter carrying its file, 1-based line and raw line (text, CSV
and JSON files are read as lines, numbered here: ``LineNumbers``), and so does a line that is
not UTF-8, with its bytes (as batch reads report it); a row behind the source's
watermark by more than its allowed delay is dropped and counted. Each partition also yields
its statistics (count, event-time range), merged on the driver into the batch's entry.
"""

from __future__ import annotations

import datetime
import functools
import re
import zoneinfo
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io.filebased import BadRecord, schema_row_type
from sparkbeam.io.streaming import StreamReadSpec
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp, to_micros
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow

__all__ = [
    "EVENT_MICROS",
    "LINE",
    "LINE_FORMATS",
    "ORIGIN",
    "PARTITION",
    "PER_TRIGGER_LIMITS",
    "RAW",
    "UNDECODED",
    "LineNumbers",
    "event_micros",
    "functions_of",
    "read_by_lines",
    "session_local_columns",
    "session_time_zone",
    "stats_param",
    "wal_records",
]


PARTITION = "__sparkbeam_partition"
EVENT_MICROS = "__sparkbeam_event_micros"
ORIGIN = "__sparkbeam_origin"
LINE = "__sparkbeam_line"
RAW = "__sparkbeam_raw"
#: a line's bytes where they are not UTF-8 (null for every other line)
UNDECODED = "__sparkbeam_undecoded"
HIDDEN = (PARTITION, EVENT_MICROS, ORIGIN, LINE, RAW, UNDECODED)

#: formats read line by line, each line numbered in its file, so that a dead letter names its
#: file and line (Spark's own readers know neither)
LINE_FORMATS = ("text", "csv", "json")

_GLOBAL = (GlobalWindow(),)

#: Spark's per-trigger limits: a source with one of them set takes one micro-batch per step
PER_TRIGGER_LIMITS = frozenset(
    {"maxFilesPerTrigger", "maxBytesPerTrigger", "maxOffsetsPerTrigger", "maxRecordsPerTrigger"}
)

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


def read_by_lines(spec: StreamReadSpec) -> bool:
    """Whether the source is read as numbered lines (see ``LINE_FORMATS``): not when a
    record may span lines (``multiLine``)."""
    options = {key.lower(): value.lower() for key, value in spec.options}
    return spec.format in LINE_FORMATS and options.get("multiline", "false") != "true"


class LineNumbers:
    """Numbers the lines of a line-read source's partition as they arrive, and says which
    ones Spark's own readers would skip.

    The source's query reads each file whole in one partition (never split: ``intake.py``),
    its lines in order, a partition's files one after the other, and filters nothing; so a
    line's number is its place in the run of rows with its file's path, counted from 1. A
    number is a fact of the file: a batch Spark runs again numbers it the same way.
    """

    def __init__(self, spec: StreamReadSpec) -> None:
        options = dict(spec.options)
        #: CSV and JSON readers skip blank lines (text keeps them as elements)
        self.skip_blank = spec.format != "text"
        self.header = spec.format == "csv" and str(options.get("header", "false")).lower() == "true"
        self.file: Any = None
        self.line = 0

    def number(self, record: dict[str, Any]) -> bool:
        """Put the row's line number in ``record[LINE]``; whether the row is a record (not a
        blank line or a CSV header, which a line that is not UTF-8 never is: its dead letter
        reports it)."""
        origin = record.get(ORIGIN)
        if origin != self.file:
            self.file, self.line = origin, 0
        self.line += 1
        record[LINE] = self.line
        if record.get(UNDECODED) is not None:
            return True
        if self.header and self.line == 1:
            return False
        # Spark's readers skip a line of spaces alone (its trim), not one of tabs
        return not (self.skip_blank and not (record.get(RAW) or "").strip(" "))


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
        if record.get("headers") is not None:
            record["headers"] = [(h[0], None if h[1] is None else bytes(h[1])) for h in record["headers"]]
        return schema_row_type(tuple(record))(*record.values())
    msg = f"unknown element kind {kind!r}"
    raise ValueError(msg)


def _decoded(spec: StreamReadSpec, element: Any) -> Any:
    """A Kafka element with its key and value deserialised (``spec.decode``)."""
    if spec.decode is None:
        return element
    if spec.element == "kafka":
        return spec.decode(*element)
    key, value = spec.decode(element.key, element.value)
    return element._replace(key=key, value=value)


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
    lines = LineNumbers(spec) if read_by_lines(spec) else None
    for row in rows:
        if names is None:
            names = tuple(row.__fields__)
            fields = tuple(n for n in names if n not in HIDDEN and n != spec.corrupt_column)
        record = dict(zip(names, row))
        if lines is not None and not lines.number(record):
            continue
        partition = record.get(PARTITION)
        origin = record.get(ORIGIN) or spec.describe()
        undecoded = record.get(UNDECODED)
        if undecoded is not None:  # Spark's text is U+FFFD there; batch reads refuse the line
            bad += 1
            failure = BadRecord.undecodable(_local_path(str(origin)), record.get(LINE), bytes(undecoded))
            yield WindowedValue(failure, ingest_micros, _GLOBAL, PANE_INFO_UNKNOWN)
            continue
        corrupt = record.get(spec.corrupt_column) if spec.corrupt_column else None
        element = _element(spec, fields, [record[n] for n in fields])
        try:
            if spec.decode is not None:
                element = _decoded(spec, element)
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


def functions_of(session: Any) -> Any:
    """PySpark's column functions for ``session``: Spark Connect's own module for a Connect
    session (``pyspark.sql.functions`` picks its implementation by a process-wide mark that
    a process with a classic session beside a Connect one does not carry)."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def session_local_columns(frame: Any) -> list[Any]:
    """The frame's columns, with timestamps as naive wall-clock times of the session's zone."""
    F = functions_of(frame.sparkSession)

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
def stats_param() -> Any:
    """One AccumulatorParam for every batch (a class made per batch would stay in memory)."""
    from pyspark.accumulators import AccumulatorParam

    class _Stats(AccumulatorParam):
        def zero(self, value: dict) -> dict:
            return {"partitions": {}, "dropped": 0, "bad": 0}

        def addInPlace(self, total: dict, part: dict) -> dict:
            return _merge_stats(total, part)

    return _Stats()
