"""A real source's stream under Spark Connect: the write-ahead log, without RDDs.

A classic run's ``StreamIntake`` (``intake.py``) runs the source's Structured Streaming
query with a ``foreachBatch`` function on the driver, over RDDs and an accumulator. Under
Connect ``foreachBatch`` would run its function in a Python process the server starts for
the query and gives 10 s (fixed) to connect back, which a loaded server misses; so the
query here writes to a Python data source's stream writer (``sparkbeam_wal``, Spark 4.0's
``DataSourceStreamWriter``), which the server runs in its own Python workers:

1. the source's frame (``StreamIntake._frame``: readStream, the numbered lines, the hidden
   columns), with the micro-batch's time (``current_timestamp``, one per batch);
2. ``write``, one task per partition: its rows become the log's records with the classic
   code (``stream_rows.wal_records``: elements, event times, dead letters, drops), written
   as the sealed part file a classic run writes (``sealed_files.sealed_lines``) under
   ``wal/<b>.parts``; it returns the file's name and its statistics;
3. ``commit``, once per batch on the server, before Spark records the batch as done:
   ``wal/<b>`` from the successful tasks' part files, then ``<b>.json`` (``commit_batch``),
   as a classic run's ``foreachBatch`` does. So a batch Spark counts as done is durable,
   and one that is not is run again by the next query on the checkpoint (``_recover``
   removes its pieces): a client killed at any point loses nothing.

Before each step the client (``ConnectIntake``) reads the new batches' ``<b>.json``, so the
step loop takes the same batches per step as on a classic session; a step's elements are
read from the log's part files on the server (``wal_frame``: Spark's text reader, each
piece checked with the stream's key before it is unpickled). The log is the server's
files: a client on the server's machine lists and reads them directly, one elsewhere
through the server (``server_files.py``), the paths being the same.

A killed client leaves its query running on the server (Connect ties a query to its
session, not to the client process). The writer's tasks and its commit check the run's
lease on the checkpoint directory (``lease.py``) first, so once a restarted run has taken
the lease over, the old query writes no more batches (its next batch fails), and the new
query, started on the same checkpoint, stops it (Spark's ``stopActiveRunOnRestart``).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import pickle
import time
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io import commits
from sparkbeam.io.streaming import StreamReadSpec
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.sources.stream_sources import (
    PartitionStats,
    WalBatch,
)
from sparkbeam.runners.spark import sealed_files
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.connect.session import made_active
from sparkbeam.runners.spark.intake import StreamIntake
from sparkbeam.runners.spark.lease import LeaseError, newest_generation
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.stream_rows import functions_of
from sparkbeam.runners.spark.streaming import StreamRun

__all__ = ["ConnectIntake", "ConnectStreamRun", "WalConfig", "commit_batch", "wal_frame", "write_partition"]

_LOG = logging.getLogger(__name__)

#: the source's drop threshold for the next batches, written by the client before each
#: step beside the log (a name in it would be read as a batch)
DROP_FILE = "drop_before"
#: the hidden column of the micro-batch's time, read by the tasks and dropped
BATCH_MICROS = "__sparkbeam_batch_micros"
#: the Python data source the query writes to (registered once per session)
WAL_SINK = "sparkbeam_wal"
#: seconds a restarted run waits after taking over the lease of a run that did not let it
#: go, for a commit the old query began before the takeover to finish (it takes milliseconds)
TAKEOVER_GRACE = 2.0


class WalConfig:
    """What the writer needs on the server: the source, the log's place and key, and the
    lease that fences it (``(checkpoint root, generation)``: see the module docs)."""

    def __init__(self, spec: StreamReadSpec, time_zone: str, wal_dir: str, spark_checkpoint: str, sealer: Sealer, fence: tuple[str, int] | None) -> None:
        self.spec = spec
        self.time_zone = time_zone
        self.wal_dir = wal_dir
        self.spark_checkpoint = spark_checkpoint
        self.sealer = sealer
        self.fence = fence

    def check_fence(self, what: str) -> None:
        """Refuse to write once another run has taken over the checkpoint directory."""
        if self.fence is None:
            return
        root, generation = self.fence
        newest = newest_generation(root)
        if newest != generation:
            msg = (
                f"--checkpoint_dir={root}: another run took over its lease (generation {newest}, this query's {generation}); "
                f"this query's {what} stops here"
            )
            raise LeaseError(msg)


class _Stats:
    """What ``wal_records`` reports a partition's statistics to (an accumulator on a
    classic session): kept for the task's commit message."""

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


def _drop_before(source_dir: str) -> int | None:
    try:
        with open(os.path.join(source_dir, DROP_FILE), encoding="utf-8") as handle:
            value = json.load(handle)
    except FileNotFoundError:
        return None
    return value if isinstance(value, int) else None


def _parts_dir(wal_dir: str, batch_id: int) -> str:
    return os.path.join(wal_dir, f"{batch_id:010d}.parts")


def write_partition(config: WalConfig, rows: Iterator[Any]) -> tuple[int, str, dict[str, Any]]:
    """Step 2 of the module docs, on the server, for one partition of a micro-batch: its
    index, the part file it wrote ("" for none) and its statistics."""
    from pyspark import TaskContext
    from pyspark.sql import Row

    from sparkbeam.runners.spark.stream_rows import wal_records

    config.check_fence("write-ahead log")
    context = TaskContext.get()
    if context is None:
        msg = f"'{config.spec.describe()}': the write-ahead log's task runs only in a Spark task"
        raise RuntimeError(msg)
    batch_id = int(str(context.getLocalProperty("streaming.sql.batchId")))
    index = context.partitionId()
    first = next(rows, None)
    stats = _Stats()
    if first is None:
        return index, "", stats.part
    names = [name for name in first.__fields__ if name != BATCH_MICROS]
    shape = Row(*names)
    ingest = int(first[BATCH_MICROS])  # the batch's time, the same in every row of it
    plain = (shape(*(row[name] for name in names)) for part in ([first], rows) for row in part)
    records = wal_records(config.spec, ingest, _drop_before(os.path.dirname(config.wal_dir)), config.time_zone, stats, plain)
    directory = _parts_dir(config.wal_dir, batch_id)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    name = f"part-{index:05d}.{context.taskAttemptId()}"
    with open(os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        for line in sealed_files.sealed_lines(config.sealer, "wal", records):
            handle.write(line + b"\n")
    return index, name, stats.part


def _spark_offsets(spark_checkpoint: str, batch_id: int) -> str | None:
    try:
        return commits.read_bytes(commits.join(spark_checkpoint, "offsets", str(batch_id))).decode("utf-8").splitlines()[-1]
    except (OSError, IndexError):
        return None


def commit_batch(config: WalConfig, batch_id: int, parts: list[tuple[int, str, dict[str, Any]]]) -> None:
    """Step 3 of the module docs: ``wal/<b>`` from the successful tasks' part files, then
    ``<b>.json``. A batch already durable (made so before a restart, and Spark runs it
    again) keeps what it had: a step may have read it."""
    config.check_fence("commit")
    final = commits.join(config.wal_dir, f"{batch_id:010d}")
    parts_dir = _parts_dir(config.wal_dir, batch_id)
    if commits.exists(final + ".json"):
        commits.remove(parts_dir, missing_ok=True)
        return
    total: dict[str, Any] = {"partitions": {}, "dropped": 0, "bad": 0}
    for _, _, stats in parts:
        total = _merge(total, stats)
    kept = sum(entry[0] for entry in total["partitions"].values())
    path: str | None = None
    if kept or total["bad"]:
        temp = commits.temporary_beside(final)
        commits.makedirs(temp, private=True)
        for index, name, _ in parts:
            if name:
                os.replace(os.path.join(parts_dir, name), os.path.join(temp, f"part-{index:05d}"))
        commits.commit_directory(temp, final)  # replacing an attempt cut short
        path = final
    commits.remove(parts_dir, missing_ok=True)  # with any failed attempt's file
    batch = WalBatch(
        batch_id=batch_id,
        path=path,
        partitions=tuple(PartitionStats(key, count, low, high) for key, (count, low, high) in sorted(total["partitions"].items())),
        records=kept,
        dropped=total["dropped"],
        bad=total["bad"],
        offsets=_spark_offsets(config.spark_checkpoint, batch_id),
    )
    commits.write_bytes(final + ".json", json.dumps(batch.to_plain()).encode("utf-8"), private=True)


def _wal_sink() -> type:
    """The ``sparkbeam_wal`` data source (made on first use: PySpark's data source classes
    import pyarrow and pandas)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

    class _Written(WriterCommitMessage):
        def __init__(self, part: tuple[int, str, dict[str, Any]]) -> None:
            self.part = part

    class _Writer(DataSourceStreamWriter):
        def __init__(self, config: WalConfig) -> None:
            self.config = config

        def write(self, iterator: Iterator[Any]) -> Any:
            return _Written(write_partition(self.config, iterator))

        def commit(self, messages: list[Any], batchId: int) -> None:
            commit_batch(self.config, batchId, [message.part for message in messages if message is not None])

        def abort(self, messages: list[Any], batchId: int) -> None:
            # The batch is not done: Spark runs it again, writing new part files.
            commits.remove(_parts_dir(self.config.wal_dir, batchId), missing_ok=True)

    class WalSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return WAL_SINK

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            # The client's own configuration, pickled by the client into the query's plan
            # (as ``reads.py`` ships a read): nothing a record or a file holds.
            return _Writer(pickle.loads(base64.b64decode(self.options["config"])))

    return WalSink


#: sessions the sink is registered on (by id: a session is not hashable)
_REGISTERED: set[int] = set()


class ConnectIntake(StreamIntake):
    """A source's query under Connect (see the module docs): its batches made durable on
    the server, read here from the log's ``<b>.json`` files."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the highest batch made durable and seen here or before a restart
        self._seen = max(self._ready, default=-1)
        #: the checkpoint directory's lease the writer checks: (root, generation)
        self.fence: tuple[str, int] | None = None

    def parsed_schema(self, ddl: str) -> Any:
        # Parsed by the server: the client has no JVM, and PySpark's parser takes the
        # active session, which the backend's is not (``session.py``).
        return self.spark.createDataFrame([], ddl).schema

    def reading_session(self) -> Any:
        session = super().reading_session()
        if session is self.spark:
            return session
        # The packages --requirements_file and --setup_file added to the run's session
        # (``dependencies.ship_to_connect``), for the user's code the log's tasks call
        # (timestamp=, partition_by=): a new session has no artifacts.
        shipped = set(getattr(self.spark, "_sparkbeam_dependencies", ()))
        try:
            for archive in sorted(shipped):
                session.addArtifacts(archive, pyfile=True)
        except BaseException:
            self._release(session)
            raise
        session._sparkbeam_dependencies = shipped
        return session

    def _new_session(self) -> Any:
        # A session of its own on the server, with its own settings (``reading_session``).
        try:
            return self.spark.newSession()  # PySpark 4.3's client
        except NotImplementedError:
            pass
        clone = getattr(self.spark, "cloneSession", None)
        if clone is None:
            msg = f"{self.where}: a stream of files on Spark Connect needs PySpark's Connect client 4.1 or newer (pip install -U 'pyspark[connect]')"
            raise TransformError(msg)
        return clone()

    def _parallelism(self) -> int:
        # The server's default parallelism, which the client cannot read: a range of no
        # stated partitions gets that many.
        F = functions_of(self.spark)
        ids = self.spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p"))
        last = ids.agg(F.max("p").alias("p")).first()
        return max(1, int(last["p"]) + 1) if last is not None and last["p"] is not None else 1

    def _release(self, session: Any) -> None:
        try:
            session.stop()
        except Exception:  # the run's outcome is what matters; the server expires it anyway
            _LOG.debug("releasing the Connect session of %s failed", self.op.label, exc_info=True)

    def start(self) -> None:
        from pyspark import cloudpickle

        self.check_time_zone()
        self.session = session = self.reading_session()
        if session is not self.spark:
            session.dataSource.register(_wal_sink())  # a new session each time: registered each time
        elif id(session) not in _REGISTERED:
            session.dataSource.register(_wal_sink())
            _REGISTERED.add(id(session))
        with made_active(session):
            F = functions_of(session)
            frame = self._frame().withColumn(BATCH_MICROS, F.unix_micros(F.current_timestamp()))
            time_zone = session.conf.get("spark.sql.session.timeZone")
            config = WalConfig(self.spec, time_zone, self.wal_dir, self.spark_checkpoint, self.sealer, self.fence)
            shipped = base64.b64encode(cloudpickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
            writer = frame.writeStream.format(WAL_SINK).option("config", shipped).option("checkpointLocation", self.spark_checkpoint)
            if self.available_now:
                writer = writer.trigger(availableNow=True)
            else:
                writer = writer.trigger(processingTime=f"{max(1, round(self.trigger_seconds * 1000))} milliseconds")
            self.query = writer.start()

    def _refresh(self) -> None:
        """The batches the server made durable since the last look, in order."""
        found = []
        for name in commits.list_names(self.wal_dir):
            stem = name[: -len(".json")]
            if name.endswith(".json") and stem.isdigit() and int(stem) > self._seen:
                found.append(int(stem))
        for batch_id in sorted(found):
            batch = self._read_batch(commits.join(self.wal_dir, f"{batch_id:010d}.json"))
            with self._lock:
                self._ready[batch_id] = batch
            self._seen = batch_id

    def take(self, after: int) -> tuple[list[WalBatch], bool]:
        # The threshold the next batches drop records behind, as the step loop knows it
        # now (a classic run's foreachBatch asks the source on the driver).
        drop = self.drop_before()
        with commits.batched(self.wal_dir):  # written in the listing's job where files are the server's
            commits.write_bytes(commits.join(os.path.dirname(self.wal_dir), DROP_FILE), json.dumps(drop).encode("utf-8"), private=True)
            self._refresh()
        return super().take(after)

    def finished(self) -> bool:
        done = super().finished()
        if done:
            self._refresh()  # what the query committed before it ended
        return done


class ConnectStreamRun(StreamRun):
    """``StreamRun`` with the sources' queries on a Connect server (``ConnectIntake``),
    fenced by the run's lease. Without ``--checkpoint_dir`` nothing resumes the run, so no
    checkpoint is written: each step's log batches are removed once read."""

    intake_type = ConnectIntake

    def __init__(self, *args: Any, files: Any = None, **kwargs: Any) -> None:
        #: the server's files reached through it (``server_files.py``), or None: shared with it
        self.files = files
        self._stop_serving: list[Any] = []
        super().__init__(*args, **kwargs)

    def _temporary_root(self) -> str:
        if self.files is None:
            return super()._temporary_root()
        root = self.files.mkdtemp("sparkbeam-stream-")  # on the server, which writes it
        self._stop_serving.append(commits.serve(root, self.files))
        return root

    def close(self) -> None:
        try:
            super().close()
        finally:
            for stop in self._stop_serving:
                stop()

    def _check_session(self) -> None:
        return None  # the session's settings are the server's

    def _intake(self, stage_id: int, source: Any) -> StreamIntake:
        if self.lease.took_over and not getattr(self, "_waited", False):
            # The run before was killed: a commit its query began may still be finishing.
            time.sleep(TAKEOVER_GRACE)
            self._waited = True
        intake = super()._intake(stage_id, source)
        if isinstance(intake, ConnectIntake) and self.lease.generation is not None:
            intake.fence = (self.lease.root, self.lease.generation)
        return intake

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
    return lines.mapInArrow(functools.partial(wal_read_task, pcoll, sealer, key), tasks.ROW_TYPE)


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
