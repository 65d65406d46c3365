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

The shards are written by the executors' Python, so a sink's path must be one every
executor reaches: a local path, a ``file://`` URL or a shared mount. A prefix on a file
system only the driver's JVM serves (``hdfs://``, ``s3a://``..., see
``runners/spark/hadoop_filesystem.py``) is refused before Spark starts.

Each sink op Spark writes is registered here as a ``SparkSink`` (under
``execution.backend_ops("Spark")``): how a step lays out its files, and in batch, when it
has one, its own write (WriteToText keeps Beam's flat shards).
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from sparkbeam.io import commits
from sparkbeam.io.filewrites import FileSink
from sparkbeam.io.stepfiles import StepFiles
from sparkbeam.runners.core.errors import TransformError, UserCodeError
from sparkbeam.runners.core.execution import backend_ops
from sparkbeam.runners.core.ops import Op, WriteFilesPerStepOp, WriteTextOp
from sparkbeam.runners.core.steps import StepParams
from sparkbeam.runners.spark import textio
from sparkbeam.runners.spark.metrics import MetricsChannel, metered_by
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["SparkSink", "check", "write", "write_step"]

@attrs.frozen
class SparkSink:
    """How Spark writes one sink op type."""

    #: what the op writes each step (a committed directory per step); refuses paths that
    #: are not local or on a shared mount
    step_files: Callable[[Any], StepFiles]
    #: in batch, a write of its own (sc, op, rdd, params); None: as one step
    batch_write: Callable[..., Any] | None = None


def _text_step_files(op: WriteTextOp) -> StepFiles:
    sink = op.sink
    template = sink.shard_name_template
    num_shards = 1 if template == "" else sink.num_shards  # '' names exactly one file
    return StepFiles(textio.TextFileSink(sink), textio.local_prefix(op), template, sink.file_name_suffix, num_shards)


_SINKS = backend_ops("Spark").sinks
_SINKS.register(WriteFilesPerStepOp)(SparkSink(step_files=lambda op: op.files))
_SINKS.register(WriteTextOp)(SparkSink(step_files=_text_step_files, batch_write=textio.write_text))


def check(op: Op) -> None:
    """Refuse, before Spark starts, a sink Spark cannot write (an op type it does not
    write, a path off the local and shared file systems)."""
    prefix = _SINKS.lookup(op).step_files(op).prefix
    if "://" in prefix and not prefix.startswith("file://"):
        msg = (
            f"'{op.label}' (applied at {op.location}): file sinks on Spark are written by the executors' "
            f"Python, which cannot reach {prefix!r} (its file system is served by Hadoop in the driver's JVM "
            "only); write to a local path or a mount every executor shares"
        )
        raise TransformError(msg)


def step_prefix(op: Op) -> str:
    """The local path ``op``'s step folders are named after (``prefix-step-NNNNNNNN``)."""
    return str(_SINKS.lookup(op).step_files(op).prefix).removeprefix("file://")


def remove_leftovers(op: Op) -> list[str]:
    """Delete the temporary step directories of ``op``'s sink that an interrupted run left
    (called when a stream resumes, before its first step); returns what was removed."""
    directory, base = os.path.split(step_prefix(op))
    ours = tuple(f"{mark}{base}-step-" for mark in (commits.TEMPORARY_MARK, ".sparkbeam-replaced-"))
    removed = []
    for name in commits.list_names(directory):
        if name.startswith(ours):
            commits.remove(os.path.join(directory, name), missing_ok=True)
            removed.append(name)
    return removed


def write(sc: Any, op: Op, rdd: Any, known_empty: bool, params: StepParams, channel: MetricsChannel | None = None) -> None:
    """Write one step of ``op``'s input: in batch by the sink's own write if it has one,
    else as the step's committed directory. The writing tasks are metered by ``channel``
    (which also carries the run's key for their errors)."""
    sink: SparkSink = _SINKS.lookup(op)
    if params.batch and sink.batch_write is not None:
        sink.batch_write(sc, op, rdd, params, channel)
    else:
        write_step(sc, op, rdd, known_empty, params.step, channel)


def _write_partition(
    op: Op, sink: FileSink, temp_dir: str, every_shard: bool, index: int, values: Iterator[WindowedValue]
) -> Iterator[tuple[int, str, int]]:
    """Writes one partition's values to a new file in ``temp_dir``: (index, path, count)."""
    path = os.path.join(temp_dir, f".part-{index:05d}-{uuid.uuid4().hex}")  # one per task attempt
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


def write_step(sc: Any, op: Op, rdd: Any, known_empty: bool, step: int, channel: MetricsChannel | None = None) -> list[str]:
    """Writes ``rdd`` as step ``step``'s committed directory; returns its files (none if empty)."""
    files = _SINKS.lookup(op).step_files(op)
    final_dir = files.directory(step)
    if known_empty:
        commits.commit_directory(None, final_dir)
        return []
    with commits.staging_directory(final_dir, create=False) as temp_dir:
        if files.num_shards and rdd.getNumPartitions() != files.num_shards:
            rdd = rdd.repartition(files.num_shards)
        write = functools.partial(metered_by(channel, _write_partition), op, files.sink, temp_dir, files.num_shards > 0)
        written = sorted(rdd.mapPartitionsWithIndex(write).collect())
        if not any(records for _, _, records in written):
            commits.commit_directory(None, final_dir)
            return []
        names = []
        for shard, (_, path, _) in enumerate(written):
            final = files.shard_path(step, shard, len(written))
            commits.commit(path, os.path.join(temp_dir, os.path.basename(final)))
            names.append(os.path.basename(final))
        for stray in set(commits.list_names(temp_dir)) - set(names):  # from task attempts that failed
            os.remove(os.path.join(temp_dir, stray))
        commits.commit_directory(temp_dir, final_dir)
        return [os.path.join(final_dir, name) for name in names]
