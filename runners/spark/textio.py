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

from sparkbeam.runners.core.errors import TransformError
from sparkbeam.runners.core.ops import ReadTextOp, WriteTextOp
from sparkbeam.runners.core.steps import StepParams
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow

__all__ = ["expand_glob", "read_text", "write_text"]


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


def _opener(path: str, compression: str, final_name: str) -> Any:
    if compression == "auto":  # by the final file name's extension, as Beam does
        compression = "gzip" if final_name.endswith(".gz") else "bzip2" if final_name.endswith(".bz2") else "uncompressed"
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


def _write_shard(op: WriteTextOp, temp_dir: str, num_shards: int, index: int, elements: Iterator[WindowedValue]) -> Iterator[str]:
    sink = op.sink
    final_name = sink.shard_name(index, num_shards)
    temp_path = os.path.join(temp_dir, f"shard-{index:05d}")
    newline = b"\n" if sink.append_trailing_newlines else b""
    with _opener(temp_path, sink.compression_type, final_name) as handle:
        if sink.header is not None:
            handle.write(_encode(sink.header) + b"\n")
        for wv in elements:
            handle.write(_encode(wv.value) + newline)
        if sink.footer is not None:
            handle.write(_encode(sink.footer) + b"\n")
    yield f"{temp_path}\t{final_name}"


def write_text(sc: Any, op: WriteTextOp, rdd: Any, params: StepParams) -> list[str]:
    """Write ``rdd`` as Beam-named shards, atomically; returns the final file names."""
    sink = op.sink
    prefix = sink.file_path_prefix
    if "://" in prefix and not prefix.startswith("file://"):
        msg = f"'{op.label}': WriteToText on Spark writes to local or shared file systems, not {prefix!r}"
        raise TransformError(msg)
    prefix = prefix.removeprefix("file://")
    directory = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(directory, exist_ok=True)
    num_shards = sink.num_shards or max(1, rdd.getNumPartitions())
    if sink.num_shards:
        rdd = rdd.repartition(num_shards) if rdd.getNumPartitions() != num_shards else rdd
    elif rdd.getNumPartitions() == 0:
        rdd = sc.parallelize([], 1)
    temp_dir = os.path.join(directory, f".sparkbeam-tmp-{uuid.uuid4().hex}")
    os.makedirs(temp_dir)
    try:
        written = rdd.mapPartitionsWithIndex(functools.partial(_write_shard, op, temp_dir, num_shards)).collect()
        finals = []
        for entry in sorted(written):
            temp_path, final_name = entry.split("\t")
            final_name = os.path.abspath(final_name.removeprefix("file://"))
            os.replace(temp_path, final_name)
            finals.append(final_name)
        return finals
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
