"""File sinks of streaming runs on Spark: each step's shards committed as one directory.

For each step with elements (layout in ``sparkbeam.io.stepfiles``):

1. executors write one shard per partition (``num_shards=0``: only partitions with
   elements; otherwise the input is repartitioned to ``num_shards`` and every shard is
   written) into a hidden temporary directory beside the output, through the sink's
   ``FileSink.open(path)``;
2. the driver gives the shards Beam's names inside that directory and drops any file a
   failed task attempt left there;
3. the driver renames the directory to ``prefix-step-NNNNNNNN`` in one rename (atomic on
   POSIX and HDFS). If the step already has a directory (the step is being replayed), it is
   first renamed aside to a hidden name and deleted after the new one is in place.

A step whose input is empty writes nothing, not even its temporary directory (the first
task with an element creates it), and removes what an earlier attempt of the same step
wrote, so a step's files are always those of its last attempt. When a stream resumes from
its checkpoint, ``remove_leftovers`` deletes the temporary directories of steps a crash cut
short (recognised by the sink's own prefix, so other writers' files are left alone).

The shards are written by the executors' Python. On a prefix that Python cannot reach,
a file system only the driver's JVM serves (``hdfs://``, ``s3a://``..., see
``runners/spark/hadoop_filesystem.py``), each shard is sent back to the driver and uploaded
from there (``remote_files.py``), then committed the same way; the committed step
directory then also gets an empty ``_SUCCESS`` file, written last: on an object store the
directory's rename is a copy file by file, so a reader takes a step folder as complete only
once its ``_SUCCESS`` is there (a crash in the copy leaves a folder without it, which the
replayed step rewrites). Any other scheme is refused before Spark starts.

Each sink op Spark writes is registered here as a ``SparkSink`` (under
``execution.backend_ops("Spark")``): how a step lays out its files, and in batch, when it
has one, its own write (WriteToText keeps Beam's flat shards).
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from sparkbeam.io import commits
from sparkbeam.io.filesystems import FileSystems
from sparkbeam.io.filewrites import FileSink
from sparkbeam.io.stepfiles import StepFiles
from sparkbeam.runners.core.elements.execution import backend_ops
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import (
    Op,
    WriteFilesPerStepOp,
    WriteFilesThroughDriverOp,
    WriteKafkaOp,
    WriteTextOp,
)
from sparkbeam.runners.core.lowering.step_values import StepParams
from sparkbeam.runners.spark import files_through_driver, remote_files, textio
from sparkbeam.runners.spark.hadoop_filesystem import HADOOP_SCHEMES
from sparkbeam.runners.spark.metrics import MetricsChannel, metered_by
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["SparkSink", "check", "step_files", "write", "write_step", "writes_files"]

@attrs.frozen
class SparkSink:
    """How Spark writes one sink op type."""

    #: what the op writes each step (a committed directory per step); refuses paths that
    #: are not local or on a shared mount. None: a sink that writes no files
    step_files: Callable[[Any], StepFiles] | None
    #: in batch, a write of its own (sc, op, rdd, params); None: as one step
    batch_write: Callable[..., Any] | None = None
    #: a sink of no files: writes a step itself (sc, op, rdd, known_empty, step, channel, run)
    step_write: Callable[..., Any] | None = None


def _kafka_step(sc: Any, op: Any, rdd: Any, known_empty: bool, step: int, channel: Any, run: str) -> None:
    from pyspark.sql import SparkSession

    from sparkbeam.runners.spark import kafka

    spark = SparkSession.getActiveSession() or SparkSession(sc)
    kafka.write_step(spark, op, rdd, known_empty, step, run, channel)


def _text_step_files(op: WriteTextOp) -> StepFiles:
    sink = op.sink
    template = sink.shard_name_template
    num_shards = 1 if template == "" else sink.num_shards  # '' names exactly one file
    return StepFiles(textio.TextFileSink(sink), textio.output_prefix(op), template, sink.file_name_suffix, num_shards)


_SINKS = backend_ops("Spark").sinks
_SINKS.register(WriteFilesPerStepOp)(SparkSink(step_files=lambda op: op.files))
_SINKS.register(WriteTextOp)(SparkSink(step_files=_text_step_files, batch_write=textio.write_text))
_SINKS.register(WriteKafkaOp)(SparkSink(step_files=None, step_write=_kafka_step))
_SINKS.register(WriteFilesThroughDriverOp)(SparkSink(step_files=None, step_write=files_through_driver.write_files_through_driver))


def step_files(op: Op) -> StepFiles | None:
    """What ``op``'s sink writes each step, and where (None: a sink of no files)."""
    files = _SINKS.lookup(op).step_files
    return None if files is None else files(op)


def writes_files(op: Op) -> bool:
    """The sink commits files per step (its prefix is owned, its leftovers removed)."""
    return _SINKS.lookup(op).step_files is not None


#: the file written last into a step directory committed on a cluster file system
COMMITTED_MARK = "_SUCCESS"


def check(op: Op) -> None:
    """Refuse, before Spark starts, a sink Spark cannot write (an op type it does not
    write, a path on a file system that neither Python nor Hadoop serves)."""
    step_files = _SINKS.lookup(op).step_files
    if step_files is None:
        return
    prefix = step_files(op).prefix
    scheme = prefix.split("://", 1)[0] if "://" in prefix else "file"
    if scheme != "file" and scheme not in HADOOP_SCHEMES:
        msg = (
            f"'{op.label}' (applied at {op.location}): file sinks on Spark write to local paths, shared "
            f"mounts and the file systems Hadoop serves ({', '.join(f'{s}://' for s in HADOOP_SCHEMES)}), "
            f"not {prefix!r}"
        )
        raise TransformError(msg)


def step_prefix(op: Op) -> str:
    """The path ``op``'s step folders are named after (``prefix-step-NNNNNNNN``): local, or
    a URL of a cluster file system."""
    step_files = _SINKS.lookup(op).step_files
    if step_files is None:
        msg = f"'{op.label}' writes no files"
        raise TypeError(msg)
    return str(step_files(op).prefix).removeprefix("file://")


def prefix_directory(prefix: str) -> str:
    """The directory a sink's prefix names files in (``os.path.dirname`` for URLs too)."""
    return os.path.dirname(prefix) or "."


def remove_leftovers(op: Op) -> list[str]:
    """Delete the temporary step directories of ``op``'s sink that an interrupted run left
    (called when a stream resumes, before its first step); returns what was removed."""
    if not writes_files(op):
        return []
    prefix = step_prefix(op)
    directory, base = prefix_directory(prefix), os.path.basename(prefix)
    ours = tuple(f"{mark}{base}-step-" for mark in (commits.TEMPORARY_MARK, ".sparkbeam-replaced-"))
    removed = []
    for name in commits.list_names(directory):
        if name.startswith(ours):
            commits.remove(os.path.join(directory, name), missing_ok=True)
            removed.append(name)
    return removed


def write(
    sc: Any, op: Op, rdd: Any, known_empty: bool, params: StepParams, channel: MetricsChannel | None = None, run: str = ""
) -> None:
    """Write one step of ``op``'s input: a sink's own step write if it has one (Kafka);
    bounded input of a flat ``StepFiles`` once, in Beam's layout; in batch by the sink's own
    write if it has one; else as the step's committed directory. The writing tasks are
    metered by ``channel`` (which also carries the run's key for their errors); ``run``
    names the run for sinks that mark what they write with it."""
    sink: SparkSink = _SINKS.lookup(op)
    if sink.step_write is not None:
        sink.step_write(sc, op, rdd, known_empty, params.step, channel, run)
    elif isinstance(op, WriteFilesPerStepOp) and op.files.flat:
        _write_flat(sc, op, rdd, params, channel)  # bounded input, in any run
    elif params.batch and sink.batch_write is not None:
        sink.batch_write(sc, op, rdd, params, channel)
    else:
        write_step(sc, op, rdd, known_empty, params.step, channel)


def _write_partition(
    op: Op, sink: FileSink, temp_dir: str, every_shard: bool, index: int, values: Iterator[WindowedValue], path: str | None = None
) -> Iterator[tuple[int, str, int]]:
    """Writes one partition's values to a new file in ``temp_dir`` (or to ``path``):
    (index, path, count)."""
    path = path or os.path.join(temp_dir, f".part-{index:05d}-{uuid.uuid4().hex}")  # one per task attempt
    writer = None
    records = 0
    value = None
    try:
        for wv in values:
            value = wv.value
            if writer is None:
                commits.makedirs(temp_dir)  # only once there is something to write
                writer = sink.open(path)
            writer.write(value)
            records += 1
        if writer is None and every_shard:
            commits.makedirs(temp_dir)
            writer = sink.open(path)
            value = None
        if writer is not None:
            writer.close()
    except Exception as error:
        if writer is not None:
            # The write already failed: its own error is the one to report.
            with contextlib.suppress(Exception):
                writer.close()
        if isinstance(error, UserCodeError):
            raise  # an upstream transform's failure, already naming it
        raise UserCodeError(op.label, op.location, error, value) from error
    if writer is not None:
        yield index, path, records


def _written_shards(op: Op, files: StepFiles, rdd: Any, temp_dir: str, every_shard: bool, channel: MetricsChannel | None) -> list[tuple[int, str, int]]:
    """Each partition's shard written into ``temp_dir`` (by the executors, or through the
    driver where they cannot reach it): ``(partition, path, records)``, sorted."""
    if files.num_shards and rdd.getNumPartitions() != files.num_shards:
        rdd = rdd.repartition(files.num_shards)
    if remote_files.is_remote(temp_dir):
        chunks = functools.partial(metered_by(channel, _shard_chunks), op, files.sink, every_shard)
        return remote_files.carry_shards(rdd.mapPartitionsWithIndex(chunks), temp_dir)
    write = functools.partial(metered_by(channel, _write_partition), op, files.sink, temp_dir, every_shard)
    return sorted(rdd.mapPartitionsWithIndex(write).collect())


def _write_flat(sc: Any, op: WriteFilesPerStepOp, rdd: Any, params: StepParams, channel: MetricsChannel | None = None) -> list[str]:
    """Bounded input written once as ``WriteShardedFiles`` lays it out (Beam's flat shard
    names, at least ``min_shards`` of them, empty ones padded), committed file by file."""
    files = op.files
    remote = remote_files.is_remote(files.prefix)
    with commits.staging_directory(files.prefix, create=remote) as temp_dir:
        written = _written_shards(op, files, rdd, temp_dir, files.num_shards > 0 and files.min_shards > 0, channel)
        written = [item for item in written if item[2] or files.num_shards]
        if files.num_shards:
            total = files.num_shards
            shards = [(index, path) for index, path, _ in written]
        else:
            total = max(len(written), files.min_shards)
            shards = [(number, path) for number, (_, path, _) in enumerate(written)]
            for number in range(len(written), total):  # as Beam's file sinks pad empty input
                shards.append((number, _empty_shard(files.sink, temp_dir, number)))
        finals = []
        for number, path in shards:
            final = files.flat_path(number, total)
            commits.commit(path, final)
            finals.append(final)
        return finals


def _empty_shard(sink: FileSink, temp_dir: str, number: int) -> str:
    """An empty shard of ``sink`` (its header and footer, if it has them) in ``temp_dir``."""
    handle, local = tempfile.mkstemp(prefix="sparkbeam-shard-")
    os.close(handle)
    try:
        sink.open(local).close()
        path = commits.join(temp_dir, f".empty-{number:05d}")
        if remote_files.is_remote(temp_dir):
            FileSystems.get_filesystem(temp_dir).upload(local, path)
        else:
            commits.makedirs(temp_dir)
            commits.commit(local, path)
        return path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(local)


def _shard_chunks(op: Op, sink: FileSink, every_shard: bool, index: int, values: Iterator[WindowedValue]) -> Iterator[tuple[int, int, Any]]:
    """One partition's shard, written locally and sent to the driver (``remote_files``)."""

    def write(path: str) -> int | None:
        written = list(_write_partition(op, sink, os.path.dirname(path), every_shard, index, values, path=path))
        return written[0][2] if written else None

    yield from remote_files.shard_chunks(index, write)


def write_step(sc: Any, op: Op, rdd: Any, known_empty: bool, step: int, channel: MetricsChannel | None = None) -> list[str]:
    """Writes ``rdd`` as step ``step``'s committed directory; returns its files (none if empty)."""
    step_files = _SINKS.lookup(op).step_files
    if step_files is None:
        msg = f"'{op.label}' writes no files"
        raise TypeError(msg)
    files = step_files(op)
    final_dir = files.directory(step)
    if known_empty:
        commits.commit_directory(None, final_dir)
        return []
    remote = remote_files.is_remote(final_dir)
    with commits.staging_directory(final_dir, create=remote) as temp_dir:
        written = _written_shards(op, files, rdd, temp_dir, files.num_shards > 0, channel)
        if not any(records for _, _, records in written):
            commits.commit_directory(None, final_dir)
            return []
        names = []
        for shard, (_, path, _) in enumerate(written):
            final = files.shard_path(step, shard, len(written))
            commits.commit(path, commits.join(temp_dir, os.path.basename(final)))
            names.append(os.path.basename(final))
        for stray in set(commits.list_names(temp_dir)) - set(names):  # from task attempts that failed
            commits.remove(commits.join(temp_dir, stray), missing_ok=True)
        commits.commit_directory(temp_dir, final_dir)
        if remote:
            commits.write_bytes(commits.join(final_dir, COMMITTED_MARK), b"")
        return [os.path.join(final_dir, name) for name in names]
