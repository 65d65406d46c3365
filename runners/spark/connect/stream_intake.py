"""A real source's stream under Spark Connect: the write-ahead log, without RDDs.

A classic run's ``StreamIntake`` (``intake.py``) runs the source's Structured Streaming
query with a ``foreachBatch`` function on the driver, over RDDs and an accumulator. Under
Connect ``foreachBatch`` would run its function in a Python process the server starts for
the query and gives 10 s (fixed) to connect back, which a loaded server misses; so the
query here is DataFrame operations end to end:

1. the source's frame (``StreamIntake._frame``: readStream, the numbered lines, the hidden
   columns), with the micro-batch's time (``current_timestamp``, one per batch);
2. ``mapInArrow(wal_task)``: each task turns its partition's rows into the log's records
   with the classic code (``stream_rows.wal_records``: elements, event times, dead
   letters, drops), writes them as the sealed part file a classic run writes
   (``sealed_files.sealed_lines``) under ``wal/<b>.parts`` (its batch *b* read from the
   task's ``streaming.sql.batchId``), and returns one row: the batch, the partition, the
   file it wrote and its statistics;
3. the rows go to a ``memory`` sink, which appends a batch's rows at once when Spark
   commits the batch.

Before each step the client (``ConnectIntake``) reads the new batches' rows (a few per
batch) and makes each batch durable as a classic run does: ``wal/<b>`` with the part files
of the successful task attempts, then ``<b>.json``. So the step loop takes the same
batches per step as on a classic session. A step's elements are read from the log's part
files on the server (``wal_frame``: Spark's text reader, each piece checked with the
stream's key before it is unpickled). The log lives in a directory the client and the
server both reach: a server on this machine (``runner.py`` refuses another).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io import commits
from sparkbeam.io.streaming import StreamReadSpec
from sparkbeam.runners.core.sources.stream_sources import (
    PartitionStats,
    WalBatch,
)
from sparkbeam.runners.spark import sealed_files
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.connect.session import made_active
from sparkbeam.runners.spark.intake import StreamIntake
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.stream_rows import functions_of
from sparkbeam.runners.spark.streaming import StreamRun

__all__ = ["ConnectIntake", "ConnectStreamRun", "wal_frame", "wal_task"]

_LOG = logging.getLogger(__name__)

#: the source's drop threshold for the next batches, written by the client before each
#: step beside the log (a name in it would be read as a batch)
DROP_FILE = "drop_before"
#: the hidden column of the micro-batch's time, read by the tasks and dropped
BATCH_MICROS = "__sparkbeam_batch_micros"
#: what each task of a micro-batch returns to the memory sink
TASK_ROWS = "batch long, part int, file string, stats string"


class _Stats:
    """What ``wal_records`` reports a partition's statistics to (an accumulator on a
    classic session): kept for the task's one row."""

    def __init__(self) -> None:
        self.part: dict[str, Any] = {"partitions": {}, "dropped": 0, "bad": 0}

    def add(self, part: dict[str, Any]) -> None:
        self.part = part


def _merge(total: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    for key, (count, low, high) in part["partitions"].items():
        entry = total["partitions"].get(key)
        total["partitions"][key] = [count, low, high] if entry is None else [entry[0] + count, min(entry[1], low), max(entry[2], high)]
    total["dropped"] += part["dropped"]
    total["bad"] += part["bad"]
    return total


def _rows(batches: Iterable[Any], ingest: list[int]) -> Iterator[Any]:
    """The batch's rows as PySpark ``Row``s, as ``wal_records`` reads them on a classic
    session, without the batch's time (put in ``ingest``)."""
    from pyspark.sql import Row

    shape = None
    for batch in batches:
        names = [name for name in batch.schema.names if name != BATCH_MICROS]
        if shape is None:
            shape = Row(*names)
        for record in batch.to_pylist():
            ingest[0] = record[BATCH_MICROS]
            yield shape(*(record[name] for name in names))


def _drop_before(source_dir: str) -> int | None:
    try:
        with open(os.path.join(source_dir, DROP_FILE), encoding="utf-8") as handle:
            value = json.load(handle)
    except FileNotFoundError:
        return None
    return value if isinstance(value, int) else None


def _parts_dir(wal_dir: str, batch_id: int) -> str:
    return os.path.join(wal_dir, f"{batch_id:010d}.parts")


def wal_task(spec: StreamReadSpec, time_zone: str, wal_dir: str, sealer: Sealer, batches: Iterable[Any]) -> Iterator[Any]:
    """Step 2 of the module docs, on the server, for one partition of a micro-batch."""
    import pyarrow as pa
    from pyspark import TaskContext

    from sparkbeam.runners.spark.stream_rows import wal_records
    from sparkbeam.utils.timestamp import Timestamp

    context = TaskContext.get()
    if context is None:
        msg = f"'{spec.describe()}': the write-ahead log's task runs only in a Spark task"
        raise RuntimeError(msg)
    batch_id = int(str(context.getLocalProperty("streaming.sql.batchId")))
    index = context.partitionId()
    # The batch's time, from its first row (a partition without rows keeps none).
    ingest = [Timestamp.now().micros]
    stats = _Stats()
    rows = _rows(batches, ingest)
    first = next(rows, None)
    if first is not None:
        source = (row for part in ([first], rows) for row in part)
        records = wal_records(spec, ingest[0], _drop_before(os.path.dirname(wal_dir)), time_zone, stats, source)
        directory = _parts_dir(wal_dir, batch_id)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        name = f"part-{index:05d}.{context.taskAttemptId()}"
        with open(os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
            for line in sealed_files.sealed_lines(sealer, "wal", records):
                handle.write(line + b"\n")
    else:
        name = ""
    yield pa.RecordBatch.from_arrays(
        [pa.array([batch_id], pa.int64()), pa.array([index], pa.int32()), pa.array([name], pa.string()), pa.array([json.dumps(stats.part)], pa.string())],
        names=["batch", "part", "file", "stats"],
    )


class ConnectIntake(StreamIntake):
    """A source's query under Connect (see the module docs): its batches made durable
    here from the memory sink's rows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the highest batch made durable here or before a restart
        self._seen = max(self._ready, default=-1)
        self.table = f"sparkbeam_wal_{uuid.uuid4().hex}"

    def parsed_schema(self, ddl: str) -> Any:
        # Parsed by the server: the client has no JVM, and PySpark's parser takes the
        # active session, which the backend's is not (``session.py``).
        return self.spark.createDataFrame([], ddl).schema

    def start(self) -> None:
        self.check_time_zone()
        with made_active(self.spark):
            F = functions_of(self.spark)
            frame = self._frame().withColumn(BATCH_MICROS, F.unix_micros(F.current_timestamp()))
            time_zone = self.spark.conf.get("spark.sql.session.timeZone")
            task = functools.partial(wal_task, self.spec, time_zone, self.wal_dir, self.sealer)
            writer = (
                frame.mapInArrow(task, TASK_ROWS)
                .writeStream.format("memory")
                .queryName(self.table)
                .outputMode("append")
                .option("checkpointLocation", self.spark_checkpoint)
            )
            if self.available_now:
                writer = writer.trigger(availableNow=True)
            else:
                writer = writer.trigger(processingTime=f"{max(1, round(self.trigger_seconds * 1000))} milliseconds")
            self.query = writer.start()

    def _refresh(self) -> None:
        """Make durable the batches the memory sink received since the last look."""
        rows = self.spark.table(self.table).filter(f"batch > {self._seen}").collect()
        by_batch: dict[int, list[Any]] = {}
        for row in rows:
            by_batch.setdefault(row[0], []).append(row)
        for batch_id in sorted(by_batch):
            batch = self._commit(batch_id, by_batch[batch_id])
            with self._lock:
                self._ready[batch_id] = batch
            self._seen = batch_id

    def _commit(self, batch_id: int, rows: list[Any]) -> WalBatch:
        """``wal/<b>`` from the part files of the batch's successful tasks, then ``<b>.json``."""
        total: dict[str, Any] = {"partitions": {}, "dropped": 0, "bad": 0}
        for row in rows:
            total = _merge(total, json.loads(row[3]))
        kept = sum(entry[0] for entry in total["partitions"].values())
        final = commits.join(self.wal_dir, f"{batch_id:010d}")
        parts = _parts_dir(self.wal_dir, batch_id)
        path: str | None = None
        if kept or total["bad"]:
            commits.makedirs(final, private=True)
            for _, index, name, _ in rows:
                if name:
                    os.replace(os.path.join(parts, name), os.path.join(final, f"part-{index:05d}"))
            path = final
        commits.remove(parts, missing_ok=True)  # with any failed attempt's file
        batch = WalBatch(
            batch_id=batch_id,
            path=path,
            partitions=tuple(PartitionStats(key, count, low, high) for key, (count, low, high) in sorted(total["partitions"].items())),
            records=kept,
            dropped=total["dropped"],
            bad=total["bad"],
            offsets=self._spark_offsets(batch_id),
        )
        commits.write_bytes(final + ".json", json.dumps(batch.to_plain()).encode("utf-8"), private=True)
        return batch

    def take(self, after: int) -> tuple[list[WalBatch], bool]:
        # The threshold the next batches drop records behind, as the step loop knows it
        # now (a classic run's foreachBatch asks the source on the driver).
        drop = self.drop_before()
        commits.write_bytes(os.path.join(os.path.dirname(self.wal_dir), DROP_FILE), json.dumps(drop).encode("utf-8"), private=True)
        self._refresh()
        return super().take(after)

    def stop(self) -> None:
        super().stop()
        try:
            self.spark.catalog.dropTempView(self.table)
        except Exception:  # the session may be gone with a failed run
            _LOG.debug("dropping %s failed", self.table, exc_info=True)


class ConnectStreamRun(StreamRun):
    """``StreamRun`` with the sources' queries on a Connect server (``ConnectIntake``).
    Without ``--checkpoint_dir`` (the only way yet, ``refusals.py``) nothing resumes the
    run, so no checkpoint is written: each step's log batches are removed once read."""

    intake_type = ConnectIntake

    def _check_session(self) -> None:
        return None  # the session's settings are the server's

    def after_step(self, step: int) -> None:
        if not self.temporary:
            super().after_step(step)
            return
        for stage_id, source in self.sources.items():
            self.intakes[stage_id].forget_through(source.consumed_through)


def wal_frame(session: Any, pcoll: int, paths: tuple[str, ...], sealer: Sealer, key: bytes) -> Any:
    """A step's elements from the log batches at ``paths``, read on the server: rows of
    ``tasks.ROWS``, each piece checked with ``sealer`` before it is unpickled."""
    F = functions_of(session)
    lines = session.read.text(list(paths)).select(F.col("value"), F.col("_metadata.file_path").alias("file"))
    return lines.mapInArrow(functools.partial(wal_read_task, pcoll, sealer, key), tasks.ROWS)


def wal_read_task(pcoll: int, sealer: Sealer, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    def work(container: Any) -> Iterator[Any]:
        output = tasks.Output()
        for batch in batches:
            values, files = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            for value, where in zip(values, files):
                for wv in sealed_files.opened(sealer, "wal", where, [value.encode("ascii")]):
                    full = output.add(pcoll, wv)
                    if full is not None:
                        yield full
        yield output.close()

    return tasks.run_task(key, work)
