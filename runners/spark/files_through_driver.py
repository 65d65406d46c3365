"""Bounded ``WriteToFiles`` on a URL only the driver's JVM reaches (``hdfs://``, ``s3a://``...).

The layout and naming are ``WriteToFiles``'s (``sparkbeam.io.fileio_remote`` says what the
primitive promises). Here: each task writes its partition's records with the sink into
local private files, one per (destination, window), at most ``max_writers_per_bundle``
open at a time (a key met again once its writer was closed starts another file, as another
bundle would); then it sends each file back to the driver in ``remote_files.CHUNK``-byte
chunks after a header naming its destination and window. The driver takes one partition
at a time (``toLocalIterator``), uploads each file into a hidden temporary folder under
the path with Hadoop's ``create`` (``HadoopFileSystem.upload``), then names them per
destination and window and renames each into place: one atomic rename per file on HDFS, a
copy and a delete on object stores. A run that fails before the renames leaves only the
temporary folder, which it removes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import IO, Any

from sparkbeam.io import commits
from sparkbeam.io.filesystems import FileSystems
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import WriteFilesThroughDriverOp
from sparkbeam.runners.spark import remote_files
from sparkbeam.runners.spark.metrics import MetricsChannel, metered_by
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["user_label", "write_files_through_driver"]

_HEADER = -1


def user_label(op: WriteFilesThroughDriverOp) -> str:
    """The label of the ``WriteToFiles`` the user applied (the op is its one part)."""
    return op.label.removesuffix("/WriteThroughDriver")


def _written_files(op: WriteFilesThroughDriverOp, folder: str, values: Iterator[WindowedValue]) -> list[tuple[Any, Any, str]]:
    """The partition's records written into files in the local ``folder``:
    ``(destination, window, path)`` per file, in the order they were opened."""
    files = op.files
    limit = max(files.max_writers_per_bundle, 1)
    open_writers: dict[tuple[Any, Any], tuple[IO[bytes], Any]] = {}
    written: list[tuple[Any, Any, str]] = []

    def close_all() -> None:
        for handle, sink in open_writers.values():
            sink.flush()
            handle.close()
        open_writers.clear()

    value = None
    try:
        for wv in values:
            value = wv.value
            destination = files.destination_fn(value)
            for window in wv.windows:
                key = (destination, window)
                found = open_writers.get(key)
                if found is None:
                    if len(open_writers) >= limit:
                        close_all()
                    sink = files.sink_fn(destination)
                    path = os.path.join(folder, f"{len(written):08d}")
                    metadata = sink.create_metadata(destination, path)
                    handle = FileSystems.create(path, **metadata._asdict())
                    sink.open(handle)
                    found = open_writers[key] = (handle, sink)
                    written.append((destination, window, path))
                found[1].write(value)
        value = None
        close_all()
    except Exception as error:
        for handle, _ in open_writers.values():
            with contextlib.suppress(Exception):  # the write's own error is the one to report
                handle.close()
        raise UserCodeError(user_label(op), op.location, error, value) from error
    return written


def _file_chunks(op: WriteFilesThroughDriverOp, index: int, values: Iterator[WindowedValue]) -> Iterator[tuple[int, int, Any]]:
    """On an executor: ``(file, -1, (destination, window))`` then ``(file, n, bytes)`` per
    chunk, for each file the partition's records make (``file`` unique in the write)."""
    folder = tempfile.mkdtemp(prefix="sparkbeam-files-")  # 0700, this task's alone
    try:
        for number, (destination, window, path) in enumerate(_written_files(op, folder, values)):
            file_id = index * 1_000_000 + number
            yield file_id, _HEADER, (destination, window)
            with open(path, "rb") as handle:
                sequence = 0
                while chunk := handle.read(remote_files.CHUNK):
                    yield file_id, sequence, chunk
                    sequence += 1
            os.remove(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _carry(chunks: Any, temp_dir: str) -> list[tuple[Any, Any, str]]:
    """On the driver: each file the tasks sent, uploaded into ``temp_dir``;
    ``(destination, window, path)`` per file."""
    remote = FileSystems.get_filesystem(temp_dir)
    staging = tempfile.mkdtemp(prefix="sparkbeam-upload-")  # 0700
    local_path = os.path.join(staging, "file")
    uploaded: list[tuple[Any, Any, str]] = []
    local: Any = None

    def upload() -> None:
        nonlocal local
        if local is not None:
            local.close()
            local = None
            remote.upload(local_path, uploaded[-1][2])

    try:
        for file_id, sequence, payload in chunks.toLocalIterator(prefetchPartitions=False):
            if sequence == _HEADER:
                upload()
                destination, window = payload
                uploaded.append((destination, window, commits.join(temp_dir, f"{file_id:014d}-{uuid.uuid4().hex[:8]}")))
                local = open(local_path, "wb")  # noqa: SIM115 (closed by upload)
            elif local is not None:
                local.write(payload)
        upload()
    finally:
        if local is not None:
            local.close()
        shutil.rmtree(staging, ignore_errors=True)
    return uploaded


def _refused_name(op: WriteFilesThroughDriverOp, final: str, error: Exception) -> TransformError:
    said = next((line.strip() for line in str(error).splitlines() if line.strip()), repr(error))[:300]
    msg = f"'{user_label(op)}' (applied at {op.location}): cannot write {final}: {said}"
    if ":" in final.partition("://")[2]:
        # Beam's default names hold the window's bounds as ISO times, with colons.
        msg += "; HDFS refuses ':' in a file name: give WriteToFiles a file_naming= whose names have none"
    return TransformError(msg)


def write_files_through_driver(
    sc: Any, op: WriteFilesThroughDriverOp, rdd: Any, known_empty: bool, step: int, channel: MetricsChannel | None, run: str
) -> list[str]:
    """Writes the bounded input ``rdd`` as ``WriteToFiles`` would (see the module docs);
    returns the final paths."""
    if known_empty:
        return []  # as Beam: no record, no file
    files = op.files
    finals: list[str] = []
    with commits.staging_directory(commits.join(files.path, "files")) as temp_dir:
        chunks = rdd.mapPartitionsWithIndex(functools.partial(metered_by(channel, _file_chunks), op))
        groups: dict[tuple[Any, Any], list[str]] = {}
        for destination, window, path in _carry(chunks, temp_dir):
            groups.setdefault((destination, window), []).append(path)
        for (destination, window), paths in groups.items():
            paths.sort()
            for index, path in enumerate(paths):
                name = files.file_naming_fn(window, None, index, len(paths), "", destination)
                final = commits.join(files.path, name)
                try:
                    commits.commit(path, final)
                except Exception as error:
                    raise _refused_name(op, final, error) from None
                finals.append(final)
    return finals
