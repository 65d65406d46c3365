"""A real source's Structured Streaming query, written micro-batch by micro-batch to a write-ahead log.

Each source runs one Spark streaming query whose ``foreachBatch`` function, for batch *b*:

1. turns each row into the pipeline's element and its event time on the executors, with
   records the source cannot parse or stamp kept as ``BadRecord`` dead letters (text, CSV
   and JSON files are read as a stream of lines, each file whole in one task, and numbered
   there, so that a dead letter carries its file, line number and raw line), and
   records behind the source's watermark by more than its allowed delay dropped;
2. writes what it kept under ``wal/<b>`` (pickled and sealed with the checkpoint key,
   ``sealed_files.py``, through Hadoop's output committer),
   then a small ``<b>.json`` beside it with the batch's per-partition statistics — the
   batch is complete only once that file exists;
3. returns, and only then does Spark mark batch *b* committed in its own checkpoint.

So every batch Spark considers done is durable here; a batch replayed by Spark after a
crash finds its log entry complete and is not written twice. The step loop takes complete
batches from ``ready`` and journals which ones each step took, so a step replayed after a
restart reads exactly what it read before.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import uuid
from typing import Any

import attrs

from sparkbeam.io import commits
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import StreamReadOp
from sparkbeam.runners.core.sources.stream_sources import PartitionStats, WalBatch
from sparkbeam.runners.spark import kafka_rows, sealed_files
from sparkbeam.runners.spark.checkpoints import CheckpointError, read_json
from sparkbeam.runners.spark.counters import read_and_release
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.stream_rows import (
    EVENT_MICROS,
    LINE_FORMATS,
    ORIGIN,
    PARTITION,
    PER_TRIGGER_LIMITS,
    RAW,
    UNDECODED,
    functions_of,
    read_by_lines,
    session_local_columns,
    session_time_zone,
    stats_param,
    wal_records,
)
from sparkbeam.utils.timestamp import Timestamp

__all__ = ["SourceFailedError", "StreamIntake"]


class SourceFailedError(RuntimeError):
    """A source's Structured Streaming query failed (its broker went away, its files were
    removed...); the run stops at the step boundary, with a checkpoint when it has a directory."""

_LOG = logging.getLogger(__name__)

def _first_cause(failure: Any) -> str:
    """The line of a query's failure that says what went wrong (Spark's own first line is
    often only 'Query ... terminated with exception')."""
    text = str(getattr(failure, "desc", failure) or failure)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if "Exception:" in line or "Error:" in line]
    return (causes[-1] if causes else lines[0] if lines else repr(failure))[:500]


# -- on the driver ---------------------------------------------------------------------


#: the reading session's settings that keep each file of a line-read source whole, in one
#: partition (see ``StreamIntake.reading_session``): a file up to this size is never split,
#: and each file alone costs as much as this to open, so that Spark's packing puts files
#: together only when a batch has more of them than ``spark.sql.files.maxPartitionNum``
#: (set to the session's parallelism), and then by count, each file still whole.
WHOLE_FILE_BYTES = 1 << 40


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
        sealer: Sealer,
    ) -> None:
        self.spark = spark
        self.op = op
        self.spec = op.spec
        self.wal_dir = commits.join(directory, "wal")
        self.spark_checkpoint = commits.join(directory, "spark")
        self.trigger_seconds = trigger_seconds
        self.available_now = available_now
        self.drop_before = drop_before
        self.sealer = sealer
        self.query: Any = None
        #: the session the query runs in (``reading_session``), made by ``start``
        self.session: Any = None
        self._ready: dict[int, WalBatch] = {}
        self._lock = threading.Lock()
        self._idle = threading.Event()  # set while no batch is being written
        self._idle.set()
        commits.makedirs(self.wal_dir, private=True)
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
                batch = self._read_batch(commits.join(self.wal_dir, name))
                if batch.path is not None:  # the directory may have moved since
                    batch = attrs.evolve(batch, path=commits.join(self.wal_dir, f"{batch.batch_id:010d}"))
                self._ready[batch.batch_id] = batch
        for name in names:
            path = commits.join(self.wal_dir, name)
            cut_short = not name.endswith(".json") and f"{name}.json" not in names
            if commits.is_temporary(name) or cut_short:
                commits.remove(path)

    def _read_batch(self, path: str) -> WalBatch:
        """A durable batch's statistics, as ``_write_batch`` wrote them; refused naming the file
        if they are not."""
        plain = read_json(path, "write-ahead-log batch")
        try:
            return WalBatch.from_plain(plain)
        except (KeyError, TypeError, ValueError) as error:
            msg = f"{path}: the write-ahead-log batch's statistics are not what sparkbeam writes ({error!r}); restore it or start a new --checkpoint_dir"
            raise CheckpointError(msg) from None

    # -- the query -----------------------------------------------------------------------
    def start(self) -> None:
        self.check_time_zone()
        self.session = self.reading_session()
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
        from pyspark.sql.types import (
            StringType,
            StructField,
            TimestampNTZType,
            TimestampType,
        )

        session = self.session if self.session is not None else self.spark
        F = functions_of(session)
        spec = self.spec
        schema: Any = None
        reader = session.readStream.format("text" if self.by_lines else spec.format)
        for key, value in spec.options:
            reader = reader.option(key, value)
        if spec.format in ("csv", "json", "parquet"):
            schema = self.parsed_schema(spec.schema) if spec.schema else self._infer_schema()
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
                    f"{session.version} ({text.splitlines()[0]})"
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
        return frame.select(*session_local_columns(frame), *extra)

    def parsed_schema(self, ddl: str) -> Any:
        """The source's ``schema='field TYPE, ...'`` as a StructType (parsed by the session's JVM)."""
        from pyspark.sql.types import StructType

        return StructType.fromDDL(ddl)

    @property
    def by_lines(self) -> bool:
        """Read as numbered lines (see ``LINE_FORMATS``), unless a record may span lines."""
        return read_by_lines(self.spec)

    def reading_session(self) -> Any:
        """The session the source's query runs in: the run's own, except for a line-read
        source, whose query gets a session of its own with the run's settings and
        ``WHOLE_FILE_BYTES``'s. Spark plans each micro-batch's file scan with the settings of
        the session that made the query's reader, not with the query's own copy of them, so
        set on the run's session they would keep every file of its batch reads whole too."""
        if not self.by_lines:
            return self.spark
        session = self._new_session()
        try:
            own, given = self.spark.conf.getAll, session.conf.getAll
            for key, value in own.items():
                if given.get(key) != value:
                    try:
                        session.conf.set(key, value)
                    except Exception:
                        # a static or core setting, which the sessions of one Spark share
                        if session.conf.isModifiable(key):
                            raise
            whole = str(WHOLE_FILE_BYTES)
            session.conf.set("spark.sql.files.maxPartitionBytes", whole)
            session.conf.set("spark.sql.files.openCostInBytes", whole)
            if "spark.sql.files.maxPartitionNum" not in own:
                session.conf.set("spark.sql.files.maxPartitionNum", str(self._parallelism()))
        except BaseException:
            self._release(session)
            raise
        return session

    def _new_session(self) -> Any:
        return self.spark.newSession()  # the same SparkContext, its own SQL settings

    def _parallelism(self) -> int:
        return max(1, int(self.spark.sparkContext.defaultParallelism))

    def _release(self, session: Any) -> None:
        """A classic session needs no release (stopping it would stop the SparkContext)."""

    def _numbered_lines(self, reader: Any, schema: Any) -> Any:
        """The source's lines, read as Spark's text source reads them (a stream of lines,
        none held longer than its row), each file whole in one partition
        (``reading_session``), and parsed with ``from_json``/``from_csv`` and the source's
        options, as its own reader would. Nothing is filtered: the write-ahead log's tasks
        number the lines and skip blank ones and CSV headers (``stream_rows.LineNumbers``).
        The file's path, the line's text and, where they are not UTF-8, its bytes go along
        in hidden columns."""
        F = functions_of(self.session if self.session is not None else self.spark)
        spec = self.spec
        options = dict(spec.options)
        if spec.corrupt_column:
            options.update(mode="PERMISSIVE", columnNameOfCorruptRecord=spec.corrupt_column)
        # Lines end at '\n' alone ('\r' alone ends none, as before), a '\r' before it is cut
        # below; the text source keeps a line's bytes as they are, UTF-8 or not.
        text = reader.option("wholetext", "false").option("lineSep", "\n").load(spec.path)
        value = F.col("value")
        as_bytes = value.cast("binary")
        raw = F.when(value.endswith("\r"), as_bytes.substr(F.lit(1), F.length(as_bytes) - 1).cast("string")).otherwise(value)
        block = F.col("_metadata.file_block_start")
        path = F.col("_metadata.file_path")
        # A file larger than WHOLE_FILE_BYTES would be split, and its lines after the first
        # part numbered from 1 again: refused instead.
        origin = F.when(block == 0, path).otherwise(
            F.raise_error(
                F.concat(
                    F.lit(f"{self.where}: "),
                    path,
                    F.lit(f" is larger than {WHOLE_FILE_BYTES} bytes, which a stream read as lines reads whole in one task"),
                )
            )
        )
        lines = text.select(origin.alias(ORIGIN), raw.alias(RAW))
        # a line that is not UTF-8 keeps its bytes, for its dead letter
        lines = lines.withColumn(UNDECODED, F.when(~F.is_valid_utf8(F.col(RAW)), F.col(RAW).cast("binary")))
        if spec.format == "text":
            return lines.select(F.col(RAW).alias("value"), ORIGIN, RAW, UNDECODED)
        parse = F.from_json if spec.format == "json" else F.from_csv
        shape = schema.simpleString() if spec.format == "csv" else schema  # from_csv takes text
        # blank lines are not parsed (the log's tasks skip them)
        parsed = F.when(F.trim(F.col(RAW)) != "", parse(F.col(RAW), shape, options))
        lines = lines.select(parsed.alias("__sparkbeam_parsed"), ORIGIN, RAW, UNDECODED)
        return lines.select(
            *[F.col("__sparkbeam_parsed").getField(name).alias(name) for name in schema.fieldNames()],
            ORIGIN,
            RAW,
            UNDECODED,
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
        stats = sc.accumulator({"partitions": {}, "dropped": 0, "bad": 0}, stats_param())
        ingest = Timestamp.now().micros
        # The zone Spark used for this batch's casts: the query's own copy of the session conf.
        time_zone = frame.sparkSession.conf.get("spark.sql.session.timeZone")
        final = commits.join(self.wal_dir, f"{batch_id:010d}")
        temp = commits.temporary_beside(final)
        if kafka_rows.applies(self.spec) and kafka_rows.arrow_ready():  # Kafka's (key, value) pairs: column by column, through Arrow
            lines = kafka_rows.kafka_wal_lines(frame, self.spec, ingest, self.drop_before(), self.sealer, stats)
            lines.write.text(temp)
            commits.restrict(temp)
        else:
            records = frame.rdd.mapPartitions(
                functools.partial(wal_records, self.spec, ingest, self.drop_before(), time_zone, stats)
            )
            sealed_files.save_records(records, temp, self.sealer, "wal")
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
        commits.write_bytes(final + ".json", json.dumps(batch.to_plain()).encode("utf-8"), private=True)
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
            msg = f"{self.where}: the source's Structured Streaming query failed: {_first_cause(failure)}"
            raise SourceFailedError(msg)

    def forget_through(self, batch_id: int) -> None:
        """Delete the log of batches up to ``batch_id`` (a checkpoint no longer needs them)."""
        with self._lock, commits.batched(self.wal_dir):
            for b in [b for b in self._ready if b <= batch_id]:
                batch = self._ready.pop(b)
                # missing_ok: a run stopped mid-way through this repeats it after a restart
                if batch.path is not None:
                    commits.remove(batch.path, missing_ok=True)
                commits.remove(commits.join(self.wal_dir, f"{b:010d}.json"), missing_ok=True)

    def stop(self) -> None:
        # Let a batch being written finish (it is durable either way, but interrupting its
        # Spark job fills the log with the interruption's stack traces).
        self._idle.wait(timeout=30)
        if self.query is not None and self.query.isActive:
            try:
                self.query.stop()
            except Exception:  # stopping after a failure: the failure is what matters
                _LOG.debug("stopping %s failed", self.op.label, exc_info=True)
        if self.session is not None and self.session is not self.spark:
            self._release(self.session)
