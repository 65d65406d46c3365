"""ReadFromText and WriteToText on Spark.

Reading expands the glob with Hadoop's file system (local paths, HDFS, and any file system
Spark is configured for) and reads with ``textFile``, which decompresses ``.gz`` and
``.bz2`` by extension. Writing is atomic: each shard is written under a temporary
directory beside the output, and only when every shard is written are they renamed to
Beam's shard names; a failed job leaves nothing under the final names.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io.filebased import FileSink
from sparkbeam.io.textio import WriteToText
from sparkbeam.runners.core.errors import TransformError
from sparkbeam.runners.core.ops import ReadTextOp, WriteTextOp
from sparkbeam.runners.core.steps import StepParams
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow

__all__ = ["TextFileSink", "expand_glob", "local_prefix", "read_text", "write_text"]


def expand_glob(sc: Any, pattern: str) -> list[str]:
    """The files matching ``pattern``, sorted, through Hadoop's FileSystem API."""
    jvm = sc._jvm
    path = jvm.org.apache.hadoop.fs.Path(pattern)
    fs = path.getFileSystem(sc._jsc.hadoopConfiguration())
    statuses = fs.globStatus(path) or []
    files = []
    for status in statuses:
        if status.isDirectory():
            for child in fs.listStatus(status.getPath()):
                if child.isFile() and not child.getPath().getName().startswith((".", "_")):
                    files.append(child.getPath().toString())
        else:
            files.append(status.getPath().toString())
    return sorted(files)


def _to_windowed(lines: Iterable[str]) -> Iterator[WindowedValue]:
    window = (GlobalWindow(),)
    start = MIN_TIMESTAMP.micros
    for line in lines:
        yield WindowedValue(line, start, window, PANE_INFO_UNKNOWN)


def _skip_header(count: int, index: int, lines: Iterator[str]) -> Iterator[str]:
    if index == 0:
        for _ in range(count):
            next(lines, None)
    return lines


def read_text(sc: Any, op: ReadTextOp) -> Any:
    source = op.source
    if not source.strip_trailing_newlines:
        msg = (
            f"'{op.label}' (applied at {op.location}): strip_trailing_newlines=False is not "
            "supported on Spark (Spark's text reader removes line endings)"
        )
        raise TransformError(msg)
    files = expand_glob(sc, source.file_pattern)
    if not files:
        if source.validate:
            msg = f"'{op.label}' (applied at {op.location}): no files match {source.file_pattern!r}"
            raise TransformError(msg)
        return sc.emptyRDD()
    if source.skip_header_lines:
        # Headers are per file, so each file is read on its own (its first partition skips them).
        per_file = [
            sc.textFile(path, minPartitions=1).mapPartitionsWithIndex(
                functools.partial(_skip_header, source.skip_header_lines)
            )
            for path in files
        ]
        lines = sc.union(per_file)
    else:
        lines = sc.textFile(",".join(files))
    return lines.mapPartitions(_to_windowed)


def _opener(path: str, compression: str) -> Any:
    if compression == "gzip":
        return gzip.open(path, "wb")
    if compression == "bzip2":
        return bz2.open(path, "wb")
    if compression == "uncompressed":
        return open(path, "wb")
    msg = f"compression {compression!r} is not supported for writing"
    raise ValueError(msg)


def _encode(value: Any) -> bytes:
    # Beam's ToStringCoder: bytes as they are, anything else as str() in UTF-8.
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


class _TextShardWriter:
    def __init__(self, handle: Any, sink: WriteToText) -> None:
        self.handle = handle
        self.footer = sink.footer
        self.newline = b"\n" if sink.append_trailing_newlines else b""
        if sink.header is not None:
            handle.write(_encode(sink.header) + b"\n")

    def write(self, value: Any) -> None:
        self.handle.write(_encode(value) + self.newline)

    def close(self) -> None:
        try:
            if self.footer is not None:
                self.handle.write(_encode(self.footer) + b"\n")
        finally:
            self.handle.close()


class TextFileSink(FileSink):
    """One file of ``WriteToText``: the header, each value's ``str()`` as a line, the footer."""

    def __init__(self, sink: WriteToText) -> None:
        self.sink = sink
        self.compression = sink.compression_type
        if self.compression == "auto":  # by the final file name's extension, as Beam does
            final_name = sink.shard_name(0, 1)
            self.compression = "gzip" if final_name.endswith(".gz") else "bzip2" if final_name.endswith(".bz2") else "uncompressed"

    def open(self, path: str) -> _TextShardWriter:
        return _TextShardWriter(_opener(path, self.compression), self.sink)


def local_prefix(op: WriteTextOp) -> str:
    """The sink's prefix as an absolute local path; other file systems are refused."""
    prefix = op.sink.file_path_prefix
    if "://" in prefix and not prefix.startswith("file://"):
        msg = f"'{op.label}' (applied at {op.location}): WriteToText on Spark writes to local or shared file systems, not {prefix!r}"
        raise TransformError(msg)
    return os.path.abspath(prefix.removeprefix("file://"))


def _write_shard(op: WriteTextOp, sink: TextFileSink, temp_dir: str, num_shards: int, index: int, elements: Iterator[WindowedValue]) -> Iterator[str]:
    final_name = op.sink.shard_name(index, num_shards)
    temp_path = os.path.join(temp_dir, f"shard-{index:05d}")
    writer = sink.open(temp_path)
    try:
        for wv in elements:
            writer.write(wv.value)
    finally:
        writer.close()
    yield f"{temp_path}\t{final_name}"


def write_text(sc: Any, op: WriteTextOp, rdd: Any, params: StepParams) -> list[str]:
    """Write ``rdd`` as Beam-named shards, atomically; returns the final file names."""
    sink = op.sink
    directory = os.path.dirname(local_prefix(op))
    os.makedirs(directory, exist_ok=True)
    num_shards = sink.num_shards or max(1, rdd.getNumPartitions())
    if sink.num_shards:
        rdd = rdd.repartition(num_shards) if rdd.getNumPartitions() != num_shards else rdd
    elif rdd.getNumPartitions() == 0:
        rdd = sc.parallelize([], 1)
    temp_dir = os.path.join(directory, f".sparkbeam-tmp-{uuid.uuid4().hex}")
    os.makedirs(temp_dir)
    try:
        write = functools.partial(_write_shard, op, TextFileSink(sink), temp_dir, num_shards)
        written = rdd.mapPartitionsWithIndex(write).collect()
        finals = []
        for entry in sorted(written):
            temp_path, final_name = entry.split("\t")
            final_name = os.path.abspath(final_name.removeprefix("file://"))
            os.replace(temp_path, final_name)
            finals.append(final_name)
        return finals
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
