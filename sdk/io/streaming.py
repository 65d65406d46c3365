"""Unbounded reads: a directory watched for new files, Spark's ``rate`` and ``socket`` sources, Kafka.

Each is a Spark Structured Streaming source whose micro-batches the runner hands to its step
loop. Every read takes the same event-time settings:

- ``timestamp``: where an element's event time comes from — a field name (CSV, JSON,
  Parquet rows), or a function of the element returning a ``Timestamp``, a number of
  seconds, a ``datetime`` or an RFC 3339 string. Without one, the source's own time is
  used where it has one (the rate source's ``timestamp``, Kafka's record timestamp) and
  the arrival (ingestion) time otherwise. A naive ``datetime`` (and text without an
  offset) is wall-clock time in Spark's session time zone (``spark.sql.session.timeZone``),
  and ``TIMESTAMP`` fields reach the element as naive datetimes of that zone.
- ``watermark``: a ``sparkbeam.io.watermarks`` estimator, run once per source partition
  (default: bounded out-of-orderness with no delay; with ingestion time, the wall clock).
- ``allowed_delay``: records behind the source's watermark by more than this are dropped
  at the source and counted in the watermark timeline (``late_dropped`` of the source);
  None (the default) drops nothing, leaving late data to the windows' allowed lateness.
- ``idle_timeout``: a partition with no data for this long (processing time) stops holding
  the watermark back (see ``sparkbeam.runners.core.sources.source_watermarks`` for the rule).

A record that cannot be parsed, or whose timestamp cannot be read, is a ``BadRecord``, and so
is a line of a text, CSV or JSON file that is not UTF-8 (its bytes in ``BadRecord.data``);
by default it fails the run (as batch reads do), and ``with_exception_handling()`` routes it
to a dead-letter output instead, counted in the timeline (``dead_letters``):

>>> good, bad = p | ReadFromJsonStream("/in/", timestamp="ts").with_exception_handling()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import attrs

from sparkbeam import pvalue
from sparkbeam.core import DoFn, ParDo
from sparkbeam.io._kafka_codecs import BYTES_DESERIALIZER, KafkaDecode
from sparkbeam.io.filebased import BadRecord, BadRecordError, ExceptionHandling
from sparkbeam.io.watermarks import (
    MonotonicWatermarkEstimator,
    WalltimeWatermarkEstimator,
    WatermarkEstimator,
    coerce_estimator,
)
from sparkbeam.ptransform import PTransform
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.utils.timestamp import to_micros

__all__ = [
    "ReadFromCsvStream",
    "ReadFromJsonStream",
    "ReadFromKafka",
    "ReadFromParquetStream",
    "ReadFromRate",
    "ReadFromSocket",
    "ReadFromTextStream",
    "StreamReadSpec",
]

#: what a Spark row becomes: a text line, a schema'd row, a dict, the rate counter, a Kafka pair
ELEMENT_KINDS = ("line", "row", "dict", "value", "kafka", "kafka_metadata")


@attrs.frozen
class StreamReadSpec:
    """Everything the runner needs to open one unbounded source (plain data; pickles)."""

    owner: str
    format: str
    element: str
    path: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    schema: str | None = None
    timestamp: str | Callable[[Any], Any] | None = None
    #: the source's own event-time column, used when ``timestamp`` is None (rate, Kafka)
    source_time_column: str | None = None
    watermark: WatermarkEstimator = attrs.field(factory=MonotonicWatermarkEstimator)
    allowed_delay: int | None = None  # micros
    idle_timeout: int | None = None  # micros
    #: which source partition a record belongs to for watermarks: a field, a function, or
    #: None for the source's own partitions (Kafka's topic-partitions, the rate source's
    #: partitions; a directory or a socket is one partition)
    partition_by: str | Callable[[Any], Any] | None = None
    #: parse failures of CSV and JSON land in this column (Spark's PERMISSIVE mode)
    corrupt_column: str | None = None
    #: Kafka: the key and value deserializers (None: the bytes as read); a failure is a bad record
    decode: Callable[[Any, Any], tuple[Any, Any]] | None = None

    @property
    def uses_ingestion_time(self) -> bool:
        return self.timestamp is None and self.source_time_column is None

    def describe(self) -> str:
        where = self.path if self.path is not None else dict(self.options).get("host", self.format)
        return f"{self.format} source {where}"


def _optional_micros(owner: str, setting: str, value: Any) -> int | None:
    if value is None:
        return None
    try:
        micros = to_micros(value)
    except TypeError:
        msg = f"{owner}: {setting} must be a Duration or a number of seconds, got {value!r}"
        raise TypeError(msg) from None
    if micros < 0:
        msg = f"{owner}: {setting} must not be negative, got {value!r}"
        raise ValueError(msg)
    return micros


def _check_field_setting(owner: str, setting: str, value: Any, fields_allowed: bool) -> None:
    if value is None or callable(value):
        return
    if isinstance(value, str) and fields_allowed:
        if not value:
            msg = f"{owner}: {setting} must name a field, got ''"
            raise ValueError(msg)
        return
    accepted = "a field name or a function of the element" if fields_allowed else "a function of the element"
    msg = f"{owner}: {setting} must be {accepted}, got {value!r}"
    raise TypeError(msg)


def _schema_fields(schema: str) -> list[str]:
    """The top-level field names of a Spark DDL schema string (``"user STRING, ts TIMESTAMP"``)."""
    names: list[str] = []
    current: list[str] = []
    depth = 0
    for char in schema + ",":
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            part = "".join(current).strip()
            if part:
                names.append(part.split()[0].strip("`"))
            current = []
        else:
            current.append(char)
    return names


class _StreamRead(PTransform):
    """The primitive: one unbounded source; elements, or ``BadRecord`` for bad input."""

    is_primitive = True

    def __init__(self, spec: StreamReadSpec) -> None:
        super().__init__()
        self.spec = spec

    def default_label(self) -> str:
        return "ReadStream"

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        return pvalue.PCollection(pbegin.pipeline, is_bounded=False)


class _RouteBadRecords(DoFn):
    #: The engine's promise (``fast_paths.pass_on_all_but``): every element of another type
    #: is output unchanged, so only a ``BadRecord`` calls ``process``.
    _engine_routes_only: ClassVar[tuple[type, ...]] = (BadRecord,)

    def __init__(self, owner: str, dead_letter_tag: str | None) -> None:
        self.owner = owner
        self.dead_letter_tag = dead_letter_tag

    def process(self, element: Any) -> Iterator[Any]:
        if type(element) is BadRecord:
            if self.dead_letter_tag is None:
                msg = (
                    f"{self.owner}: bad record at {element.describe()}. Use .with_exception_handling() "
                    "to send bad records to a dead-letter output and keep running"
                )
                raise BadRecordError(msg)
            yield TaggedOutput(self.dead_letter_tag, element)
        else:
            yield element


class _StreamReadTransform(ExceptionHandling, PTransform):
    """What every unbounded read shares: event-time settings, dead letters, expansion."""

    _format = ""
    _element = "line"
    _fields_allowed = False
    _source_time_column: str | None = None

    def __init__(
        self,
        *,
        timestamp: str | Callable[[Any], Any] | None = None,
        watermark: Any = None,
        allowed_delay: Any = None,
        idle_timeout: Any = None,
        partition_by: str | Callable[[Any], Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        _check_field_setting(owner, "timestamp", timestamp, self._fields_allowed)
        _check_field_setting(owner, "partition_by", partition_by, self._fields_allowed)
        self.timestamp = timestamp
        self.allowed_delay = _optional_micros(owner, "allowed_delay", allowed_delay)
        self.idle_timeout = _optional_micros(owner, "idle_timeout", idle_timeout)
        self.partition_by = partition_by
        ingestion = timestamp is None and self._source_time_column is None
        if watermark is None:
            watermark = WalltimeWatermarkEstimator() if ingestion else MonotonicWatermarkEstimator()
        self.watermark = coerce_estimator(owner, watermark)
        if options is not None and not isinstance(options, dict):
            msg = f"{owner}: options must be a dict of Spark reader options, got {options!r}"
            raise TypeError(msg)
        self.options: dict[str, str] = {str(k): str(v) for k, v in (options or {}).items()}

    def default_label(self) -> str:
        return type(self).__name__

    def _spec_fields(self) -> dict[str, Any]:
        """Source-specific fields of the spec (path, options, schema, ...)."""
        return {}

    def spec(self) -> StreamReadSpec:
        fields: dict[str, Any] = {
            "owner": type(self).__name__,
            "format": self._format,
            "element": self._element,
            "timestamp": self.timestamp,
            "source_time_column": self._source_time_column if self.timestamp is None else None,
            "watermark": self.watermark,
            "allowed_delay": self.allowed_delay,
            "idle_timeout": self.idle_timeout,
            "partition_by": self.partition_by,
        }
        fields.update(self._spec_fields())
        options = dict(fields.pop("options", {}))
        options.update(self.options)
        return StreamReadSpec(options=tuple(sorted(options.items())), **fields)

    def expand(self, pbegin: Any) -> Any:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = f"{type(self).__name__} is a root transform: apply it to the pipeline (p | {type(self).__name__}(...))"
            raise TypeError(msg)
        records = pbegin | "Read" >> _StreamRead(self.spec())
        owner = f"{type(self).__name__} '{self.label}'"
        if self._dead_letter_tags is None:
            return records | "Records" >> ParDo(_RouteBadRecords(owner, None))
        main_tag, bad_tag = self._dead_letter_tags
        return records | "Records" >> ParDo(_RouteBadRecords(owner, bad_tag)).with_outputs(bad_tag, main=main_tag)


class _DirectoryRead(_StreamReadTransform):
    def __init__(self, path: str, *, max_files_per_trigger: int | None = None, **settings: Any) -> None:
        super().__init__(**settings)
        owner = type(self).__name__
        if not isinstance(path, str) or not path:
            msg = f"{owner}: path must be a directory or a glob, got {path!r}"
            raise ValueError(msg)
        if max_files_per_trigger is not None and (
            not isinstance(max_files_per_trigger, int) or isinstance(max_files_per_trigger, bool) or max_files_per_trigger < 1
        ):
            msg = f"{owner}: max_files_per_trigger must be a positive integer, got {max_files_per_trigger!r}"
            raise ValueError(msg)
        self.path = path
        self.max_files_per_trigger = max_files_per_trigger
        self.schema: str | None = None

    def _spec_fields(self) -> dict[str, Any]:
        options = {}
        if self.max_files_per_trigger is not None:
            options["maxFilesPerTrigger"] = str(self.max_files_per_trigger)
        return {"path": self.path, "options": options, "schema": self.schema}

    def _set_schema(self, schema: str | None) -> None:
        owner = type(self).__name__
        if schema is None:
            return
        if not isinstance(schema, str) or not schema.strip():
            msg = f"{owner}: schema must be a Spark DDL string such as 'user STRING, score INT', got {schema!r}"
            raise TypeError(msg)
        self.schema = schema
        fields = _schema_fields(schema)
        for setting in ("timestamp", "partition_by"):
            value = getattr(self, setting)
            if isinstance(value, str) and value not in fields:
                msg = f"{owner}: {setting} field {value!r} is not in the schema (fields: {', '.join(fields)})"
                raise ValueError(msg)


class ReadFromTextStream(_DirectoryRead):
    """Lines of the files that appear in a directory (Beam Java's ``TextIO.watchForNewFiles``).

    >>> lines = p | ReadFromTextStream("/in/", timestamp=lambda line: float(line.split(",")[0]))  # doctest: +SKIP
    """

    _format = "text"
    _element = "line"


class ReadFromCsvStream(_DirectoryRead):
    """Rows of the CSV files that appear in a directory, as ``ReadFromCsv``'s rows.

    ``schema`` is a Spark DDL string; without it the schema is inferred from the files
    already there when the run starts. Rows that do not fit it are bad records.
    """

    _format = "csv"
    _element = "row"
    _fields_allowed = True

    def __init__(self, path: str, *, schema: str | None = None, header: bool = True, sep: str = ",", **settings: Any) -> None:
        super().__init__(path, **settings)
        self._set_schema(schema)
        self.header = bool(header)
        self.sep = sep

    def _spec_fields(self) -> dict[str, Any]:
        fields = super()._spec_fields()
        fields["options"].update(header=str(self.header).lower(), sep=self.sep)
        fields["corrupt_column"] = "_corrupt_record"
        return fields


class ReadFromJsonStream(_DirectoryRead):
    """Records of the JSON-lines files that appear in a directory, as ``ReadFromJson``'s rows."""

    _format = "json"
    _element = "row"
    _fields_allowed = True

    def __init__(self, path: str, *, schema: str | None = None, **settings: Any) -> None:
        super().__init__(path, **settings)
        self._set_schema(schema)

    def _spec_fields(self) -> dict[str, Any]:
        fields = super()._spec_fields()
        fields["corrupt_column"] = "_corrupt_record"
        return fields


class ReadFromParquetStream(_DirectoryRead):
    """Records (dicts) of the Parquet files that appear in a directory, as ``ReadFromParquet``."""

    _format = "parquet"
    _element = "dict"
    _fields_allowed = True

    def __init__(self, path: str, *, schema: str | None = None, **settings: Any) -> None:
        super().__init__(path, **settings)
        self._set_schema(schema)


class ReadFromRate(_StreamReadTransform):
    """Spark's ``rate`` source for load: consecutive integers, ``rows_per_second`` of them,
    each stamped with its generation time; its partitions are the watermark's partitions."""

    _format = "rate"
    _element = "value"
    _source_time_column = "timestamp"

    def __init__(self, rows_per_second: int = 1, *, num_partitions: int | None = None, ramp_up_seconds: int = 0, **settings: Any) -> None:
        super().__init__(**settings)
        for name, value, least in (("rows_per_second", rows_per_second, 1), ("ramp_up_seconds", ramp_up_seconds, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                msg = f"ReadFromRate: {name} must be an integer >= {least}, got {value!r}"
                raise ValueError(msg)
        if num_partitions is not None and (not isinstance(num_partitions, int) or num_partitions < 1):
            msg = f"ReadFromRate: num_partitions must be a positive integer, got {num_partitions!r}"
            raise ValueError(msg)
        self.rows_per_second = rows_per_second
        self.num_partitions = num_partitions
        self.ramp_up_seconds = ramp_up_seconds

    def _spec_fields(self) -> dict[str, Any]:
        options = {"rowsPerSecond": str(self.rows_per_second), "rampUpTime": f"{self.ramp_up_seconds}s"}
        if self.num_partitions is not None:
            options["numPartitions"] = str(self.num_partitions)
        return {"options": options}


class ReadFromSocket(_StreamReadTransform):
    """Lines from a TCP socket (Spark's ``socket`` source, for trials: a socket cannot replay
    what it sent, so lines not yet in a micro-batch when the process dies are lost)."""

    _format = "socket"
    _element = "line"

    def __init__(self, host: str, port: int, **settings: Any) -> None:
        super().__init__(**settings)
        if not isinstance(port, int) or not 0 < port < 65536:
            msg = f"ReadFromSocket: port must be an integer in 1..65535, got {port!r}"
            raise ValueError(msg)
        self.host = host
        self.port = port

    def _spec_fields(self) -> dict[str, Any]:
        return {"options": {"host": self.host, "port": str(self.port)}}


_KAFKA_POLICIES = {"ProcessingTime": None, "CreateTime": "timestamp", "LogAppendTime": "timestamp"}
#: Beam's ReadFromKafka arguments that a Spark Structured Streaming read has no use for when
#: left at Beam's defaults; set otherwise, they are refused naming what to do instead
_BEAM_ONLY = {
    "start_read_time": (None, "set consumer_config['auto.offset.reset'] or options={'startingTimestamp': ms}"),
    "max_num_records": (None, "stop the stream with --max_steps or --available_now"),
    "max_read_time": (None, "stop the stream with --max_steps or --available_now"),
    "commit_offset_in_finalize": (False, "Spark keeps the offsets in the checkpoint, not in a consumer group"),
    "redistribute": (False, "follow the read with beam.Reshuffle()"),
    "expansion_service": (None, "sparkbeam reads with Spark's Kafka connector, not a cross-language expansion"),
}


class ReadFromKafka(_StreamReadTransform):
    """Kafka records as ``(key, value)`` pairs (bytes, or what the deserializers make of
    them), or with ``with_metadata`` as rows of ``key, value, topic, partition, offset,
    timestamp, timestampType, headers`` (headers as ``(name, bytes)`` pairs), with Beam's
    ``ReadFromKafka`` arguments; needs Spark's Kafka connector on the classpath
    (``--spark_conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``).

    The watermark's partitions are Kafka's topic-partitions. ``timestamp_policy``:
    ``'ProcessingTime'`` (Beam's default), ``'CreateTime'`` or ``'LogAppendTime'`` (the
    record's Kafka timestamp; which one the broker stores is a topic setting).
    ``key_deserializer``/``value_deserializer``: see ``sparkbeam.io.kafka``; a record that
    fails to deserialise is a bad record naming its topic, partition and offset.
    ``options``: more of Spark's Kafka source options (``maxOffsetsPerTrigger``,
    ``startingOffsets`` as JSON, ...).
    """

    _format = "kafka"
    _element = "kafka"

    def __init__(
        self,
        consumer_config: dict[str, Any],
        topics: list[str] | str,
        key_deserializer: Any = BYTES_DESERIALIZER,
        value_deserializer: Any = BYTES_DESERIALIZER,
        *,
        with_metadata: bool = False,
        timestamp_policy: str = "ProcessingTime",
        **settings: Any,
    ) -> None:
        if timestamp_policy not in _KAFKA_POLICIES:
            msg = f"ReadFromKafka: timestamp_policy must be one of {', '.join(_KAFKA_POLICIES)}, got {timestamp_policy!r}"
            raise ValueError(msg)
        for name, (default, instead) in _BEAM_ONLY.items():
            value = settings.pop(name, default)
            if value != default:
                msg = f"ReadFromKafka: {name}={value!r} is not supported on Spark: {instead}"
                raise ValueError(msg)
        for name in ("consumer_polling_timeout", "redistribute_num_keys", "allow_duplicates", "dynamic_read_poll_interval_seconds"):
            settings.pop(name, None)  # Beam's tuning of its own Java reader: no meaning here
        self._source_time_column = _KAFKA_POLICIES[timestamp_policy]
        super().__init__(**settings)
        if not isinstance(consumer_config, dict) or "bootstrap.servers" not in consumer_config:
            msg = f"ReadFromKafka: consumer_config must be a dict with 'bootstrap.servers', got {consumer_config!r}"
            raise ValueError(msg)
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            msg = f"ReadFromKafka: topics must be one or more topic names, got {topics!r}"
            raise ValueError(msg)
        self.consumer_config = dict(consumer_config)
        self.topics = topics
        self.with_metadata = with_metadata
        self.timestamp_policy = timestamp_policy
        self.decode = KafkaDecode.of("ReadFromKafka", key_deserializer, value_deserializer)
        if with_metadata:
            self._element = "kafka_metadata"

    def _spec_fields(self) -> dict[str, Any]:
        options = kafka_reader_options(self.consumer_config, self.topics)
        if self.with_metadata:
            options["includeHeaders"] = "true"
        return {"options": options, "decode": self.decode}


def kafka_reader_options(consumer_config: dict[str, Any], topics: list[str]) -> dict[str, str]:
    """Spark's Kafka reader options for Beam's consumer config: each key prefixed ``kafka.``,
    ``auto.offset.reset`` mapped to ``startingOffsets``, topics joined for ``subscribe``.

    >>> kafka_reader_options({"bootstrap.servers": "b:9092", "auto.offset.reset": "earliest"}, ["a", "b"])
    {'kafka.bootstrap.servers': 'b:9092', 'startingOffsets': 'earliest', 'subscribe': 'a,b'}
    """
    options: dict[str, str] = {}
    for key, value in consumer_config.items():
        if key == "auto.offset.reset":
            options["startingOffsets"] = str(value)
        elif key in ("group.id", "enable.auto.commit", "key.deserializer", "value.deserializer"):
            continue  # Spark manages consumer groups and offsets itself, and reads raw bytes
        else:
            options[f"kafka.{key}"] = str(value)
    options["subscribe"] = ",".join(topics)
    return options
