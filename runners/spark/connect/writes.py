"""WriteToText under Spark Connect, exactly once: staged by each task attempt, committed by
one task on the server.

The client may be far from the files (a remote server), so it neither writes nor renames
any of them. One Spark job does it all, from the materialised input of the sink:

1. a ``mapInArrow`` task per partition (``num_shards`` partitions when it is set) writes
   its elements to a file of its own attempt, ``<staging>/shard-PPPPP-<attempt id>``, in a
   hidden staging folder beside the output (``commits.temporary_beside``), and yields one
   row naming that file and its count (JSON);
2. those rows, and one marker row so that the commit runs even when no task wrote, go to
   one partition (``repartition(1)``), where a single commit task renames each shard to
   Beam's name (``prefix-SSSSS-of-NNNNN``), writes an empty shard for each shard number
   no task wrote (empty input, or fewer partitions than ``num_shards``; none with
   ``skip_if_empty``), and removes the staging folder with whatever failed attempts left
   there. Only the rows of successful attempts reach the shuffle, so a failed or
   speculative attempt's file is never committed.

A commit task that fails after renaming some shards is retried: a shard whose staged file
is gone and whose final file is there was renamed by the earlier attempt. If the job fails,
the client removes the staging folder (a one-row job of its own) and raises the failure:
files committed before a failed commit stay, as on a classic session, whose driver renames
the shards one by one too. Relative prefixes are made absolute on the client (its working
directory), as a classic run makes them; a prefix on a file system only the JVM serves
(``hdfs://``, ``s3a://``) is refused before the run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io import commits
from sparkbeam.io.filewrites import shard_file_name
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import WriteTextOp
from sparkbeam.runners.spark.connect import tasks

__all__ = ["staging_cleanup_task", "step_files_sink", "text_sink", "write_step", "write_text"]

#: a shard a write task staged: JSON of its partition, file and count
STAGED = -5
#: the commit's marker row, so that it runs when no write task did
MARKER = -6
#: a committed file: JSON of its final name
COMMITTED = -7


def _json_row(kind: int, value: Any) -> tuple[int, int, bytes]:
    return (kind, 0, json.dumps(value).encode("utf-8"))


def _attempt() -> tuple[int, str]:
    """The task's partition and a name unique to its attempt."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, uuid.uuid4().hex
    return context.partitionId(), f"{context.attemptNumber()}-{context.taskAttemptId()}-{uuid.uuid4().hex[:8]}"


def write_shard_task(op: WriteTextOp, staging: str, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """Step 1: the partition's elements to a staged file of this attempt."""
    from sparkbeam.runners.spark.textio import TextFileSink

    def work(container: Any) -> Iterator[Any]:
        partition, attempt = _attempt()
        commits.makedirs(staging)
        path = os.path.join(staging, f"shard-{partition:05d}-{attempt}")
        writer = TextFileSink(op.sink).open(path)
        count = 0
        value = None
        try:
            for _, wv in tasks.elements_of(tasks.rows_of(batches), []):
                value = wv.value
                writer.write(value)
                count += 1
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, value) from error
        finally:
            writer.close()
        yield tasks.batch_of([_json_row(STAGED, {"partition": partition, "path": path, "count": count})])

    return tasks.run_task(key, work)


def commit_task(op: WriteTextOp, prefix: str, staging: str, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """Step 2: the staged shards renamed to Beam's names, missing ones written empty, the
    staging folder removed; a ``COMMITTED`` row per final file."""
    from sparkbeam.runners.spark.textio import TextFileSink

    sink = op.sink

    def work(container: Any) -> Iterator[Any]:
        staged: dict[int, dict[str, Any]] = {}
        for kind, _, chunk in tasks.rows_of(batches):
            if kind == STAGED:
                shard = json.loads(chunk.decode("utf-8"))
                staged.setdefault(shard["partition"], shard)
        finals: list[str] = []
        if not (sink.skip_if_empty and not any(shard["count"] for shard in staged.values())):
            count = sink.num_shards or max(1, len(staged))
            paths = [staged[partition]["path"] for partition in sorted(staged)]
            for number in range(count):
                final = shard_file_name(prefix, sink.shard_name_template, sink.file_name_suffix, number, count)
                path = paths[number] if number < len(paths) else None
                if path is None:
                    commits.makedirs(staging)
                    path = os.path.join(staging, f"empty-{number:05d}")
                    TextFileSink(sink).open(path).close()  # the header and footer alone
                if os.path.exists(path):
                    commits.commit(path, final)
                elif not os.path.exists(final):
                    msg = f"'{op.label}': the staged shard {path} is gone and {final} was never committed"
                    raise FileNotFoundError(msg)
                finals.append(final)
        commits.remove(staging, missing_ok=True)
        yield tasks.batch_of([_json_row(COMMITTED, final) for final in finals])

    return tasks.run_task(key, work)


def staging_cleanup_task(staging: str, batches: Iterable[Any]) -> Iterator[Any]:
    """After a failed write: the staging folder and what the attempts left in it removed."""
    for _ in batches:
        pass
    commits.remove(staging, missing_ok=True)
    yield tasks.batch_of([])


def write_text(backend: Any, op: WriteTextOp, frame: Any) -> list[str]:
    """Write ``frame`` (the sink's input) as Beam-named shards, exactly once (see the module
    docs); returns the final file names."""
    from sparkbeam.runners.spark.textio import output_prefix

    key = backend.error_key
    prefix = output_prefix(op)
    staging = commits.temporary_beside(prefix)
    shard = functools.partial(write_shard_task, op, staging, key)
    return _written_and_committed(
        backend, frame, op.sink.num_shards, shard, functools.partial(commit_task, op, prefix, staging, key), staging
    )


def _written_and_committed(backend: Any, frame: Any, num_shards: int, shard: Any, commit: Any, staging: str) -> list:
    """``frame`` written by ``shard`` tasks into ``staging`` (in ``num_shards`` partitions
    if set), then one ``commit`` task given every shard's row and a marker (so it runs for
    empty input too); what the commit reported. A failed write leaves no staging behind."""
    marker = backend.session.createDataFrame([(MARKER, 0, b"")], schema=tasks.ROW_TYPE)
    if frame.known_empty:
        written = marker
    else:
        source = frame.df.repartition(num_shards) if num_shards else frame.df
        written = source.mapInArrow(shard, tasks.ROW_TYPE).union(marker)
    committed = written.repartition(1).mapInArrow(commit, tasks.ROW_TYPE)
    try:
        with backend.user_errors():
            rows = committed.collect()
    except BaseException:
        cleanup = marker.mapInArrow(functools.partial(staging_cleanup_task, staging), tasks.ROW_TYPE)
        with contextlib.suppress(Exception):  # the write's own failure is the one to report
            cleanup.collect()
        raise
    return [json.loads(row["chunk"].decode("utf-8")) for row in rows if row["pcoll"] == COMMITTED]


# -------------------------------------------------------------- a stream's step directories


def step_shard_task(files: Any, staging: str, every_shard: bool, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """A stream step's shard: the partition's elements to a file of this attempt in the
    step's staging folder (none for a partition without elements, unless the sink has a
    fixed number of shards), as a classic step writes it."""

    def work(container: Any) -> Iterator[Any]:
        partition, attempt = _attempt()
        path = os.path.join(staging, f"shard-{partition:05d}-{attempt}")
        writer = None
        count = 0
        value = None
        try:
            for _, wv in tasks.elements_of(tasks.rows_of(batches), []):
                value = wv.value
                if writer is None:
                    commits.makedirs(staging)
                    writer = files.sink.open(path)
                writer.write(value)
                count += 1
            if writer is None and every_shard:
                commits.makedirs(staging)
                writer = files.sink.open(path)
        except Exception as error:
            raise UserCodeError(files.label, files.location, error, value) from error
        finally:
            if writer is not None:
                writer.close()
        written = path if writer is not None else None
        yield tasks.batch_of([_json_row(STAGED, {"partition": partition, "path": written, "count": count})])

    return tasks.run_task(key, work)


def step_commit_task(files: Any, step: int, staging: str, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """The step's shards renamed to their names in the staging folder, which then replaces
    the step's directory at once (``commits.commit_directory``, as a classic step commits:
    a replayed step rewrites it); nothing at all when no element was written."""

    def work(container: Any) -> Iterator[Any]:
        staged: dict[int, dict[str, Any]] = {}
        for kind, _, chunk in tasks.rows_of(batches):
            if kind == STAGED:
                shard = json.loads(chunk.decode("utf-8"))
                if shard["path"] is not None:
                    staged.setdefault(shard["partition"], shard)
        final_dir = files.directory(step)
        if not os.path.exists(staging) and os.path.exists(final_dir) and staged:
            yield tasks.batch_of([])  # an earlier attempt of this commit committed it
            return
        if not any(shard["count"] for shard in staged.values()):  # a fixed num_shards too, as a classic step
            commits.commit_directory(None, final_dir)
            commits.remove(staging, missing_ok=True)
            yield tasks.batch_of([])
            return
        names = []
        paths = [staged[partition]["path"] for partition in sorted(staged)]
        for shard, path in enumerate(paths):
            name = os.path.basename(files.shard_path(step, shard, len(paths)))
            if os.path.exists(path):
                commits.commit(path, os.path.join(staging, name))
            names.append(name)
        for stray in set(commits.list_names(staging)) - set(names):  # failed attempts' files
            commits.remove(os.path.join(staging, stray), missing_ok=True)
        commits.commit_directory(staging, final_dir)
        yield tasks.batch_of([_json_row(COMMITTED, os.path.join(final_dir, name)) for name in names])

    return tasks.run_task(key, work)


def write_step(backend: Any, op: Any, frame: Any, step: int) -> list[str]:
    """A stream step of a file sink: its own directory (``prefix-step-NNNNNNNN``), written
    by the step's tasks and committed by one task, as ``write_text`` commits a batch write;
    the files written."""
    from sparkbeam.runners.spark.sinks import step_files

    files = step_files(op)
    if files is None:
        msg = f"'{op.label}': the Spark Connect backend writes no {type(op).__name__} (refused before the run)"
        raise NotImplementedError(msg)
    key = backend.error_key
    staging = commits.temporary_beside(files.directory(step))
    shard = functools.partial(step_shard_task, _Where(files, op), staging, files.num_shards > 0, key)
    commit = functools.partial(step_commit_task, files, step, staging, key)
    return _written_and_committed(backend, frame, files.num_shards, shard, commit, staging)


# ------------------------------------------------------------- the sinks CONNECT registers


def text_sink(backend: Any, op: WriteTextOp, frame: Any, params: Any) -> None:
    """WriteToText: Beam's flat shards in batch, a directory per step in a stream."""
    if params.batch:
        write_text(backend, op, frame)
    else:
        write_step(backend, op, frame, params.step)


def step_files_sink(backend: Any, op: Any, frame: Any, params: Any) -> None:
    """A file sink of unbounded input (``WriteToCsv``, ``WriteToJson``, ``WriteToParquet``,
    ``WriteShardedFiles``...): each step's directory, as a classic step commits it. Bounded
    input never reaches here but as the flat layout of a URL only the JVM serves, which is
    refused before the run (``refusals.py``)."""
    if op.files.flat:
        msg = f"'{op.label}': the Spark Connect backend writes no flat file layout of {op.files.prefix!r} (refused before the run)"
        raise NotImplementedError(msg)
    write_step(backend, op, frame, params.step)


class _Where:
    """A sink's ``StepFiles`` with the op's label and location, for a user error's message."""

    def __init__(self, files: Any, op: Any) -> None:
        self.sink = files.sink
        self.label = op.label
        self.location = op.location
