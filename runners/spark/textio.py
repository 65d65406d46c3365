"""ReadFromText and WriteToText on Spark.

Reading expands the glob with Hadoop's file system (local paths, HDFS, and any file system
Spark is configured for) and reads with ``textFile``'s reader, which decompresses ``.gz``
and ``.bz2`` by extension, its lines handed to Python in pickled batches (``_text_lines``). Writing is atomic: each shard is written under a temporary
directory beside the output, and only when every shard is written are they renamed to
Beam's shard names; a failed job leaves nothing under the final names.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import os
import zlib
from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import Any

from sparkbeam.coders.coders import ToBytesCoder
from sparkbeam.io import commits
from sparkbeam.io.filewrites import FileSink
from sparkbeam.io.textio import WriteToText, split_records
from sparkbeam.runners.core.errors import TransformError, UserCodeError
from sparkbeam.runners.core.ops import ReadTextOp, WriteTextOp
from sparkbeam.runners.core.steps import StepParams
from sparkbeam.runners.core.window_assignment import GLOBAL_WINDOWS
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
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


def _text_lines(sc: Any, paths: str, min_partitions: int | None = None) -> Any:
    """The lines of ``paths`` (comma-separated) as ``sc.textFile`` reads them (Hadoop's
    line reader, UTF-8 decoded in the JVM), handed to Python in pickled batches.

    ``textFile`` sends each line framed on its own, which PySpark's Python reads with three
    Python-level calls per line (length, bytes, decode); a batch of lines pickled by the
    JVM is a list of ``str`` that Python unpickles in C, for less CPU on the two sides
    together (the JVM pickles, Python does nearly nothing). The lines are the same strings.
    """
    from pyspark.rdd import RDD
    from pyspark.serializers import BatchedSerializer, CPickleSerializer

    partitions = min_partitions if min_partitions is not None else min(sc.defaultParallelism, 2)  # textFile's default
    lines = sc._jsc.textFile(paths, partitions)
    pickled = sc._jvm.org.apache.spark.api.python.SerDeUtil.javaToPython(lines)
    return RDD(pickled, sc, BatchedSerializer(CPickleSerializer()))


def _to_windowed(lines: Iterable[str]) -> Iterator[WindowedValue]:
    # assignment's own tuple: a WindowInto(GlobalWindows()) copies nothing. Built by map
    # and zip in C: no Python frame per line.
    fields = zip(lines, repeat(MIN_TIMESTAMP.micros), repeat(GLOBAL_WINDOWS), repeat(PANE_INFO_UNKNOWN))
    return map(new_windowed_value, fields)


def _skip_header(count: int, index: int, lines: Iterator[str]) -> Iterator[str]:
    if index == 0:
        for _ in range(count):
            next(lines, None)
    return lines


def _decompressed(compression: str, path: str, data: bytes) -> bytes:
    if compression == "auto":  # by extension, as Beam
        compression = "gzip" if path.endswith(".gz") else "bzip2" if path.endswith(".bz2") else "deflate" if path.endswith(".deflate") else "uncompressed"
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "bzip2":
        return bz2.decompress(data)
    if compression == "deflate":
        return zlib.decompress(data)
    return data


def _decoded_lines(op: ReadTextOp, files: Iterable[tuple[str, bytes]]) -> Iterator[WindowedValue]:
    """Beam's line splitting and the source's coder over whole files (path, bytes)."""
    source = op.source
    window = (GlobalWindow(),)
    start = MIN_TIMESTAMP.micros
    decode = source.coder.decode
    for path, data in files:
        records = split_records(
            _decompressed(source.compression_type, path, data),
            delimiter=source.delimiter,
            escapechar=source.escapechar,
            strip_trailing_newlines=source.strip_trailing_newlines,
            skip_header_lines=source.skip_header_lines,
        )
        for number, record in enumerate(records, start=source.skip_header_lines + 1):
            try:
                value = decode(record)
            except Exception as error:
                note = TransformError(f"{path}, record {number}: {source.coder!r} could not decode {record[:80]!r}: {error}")
                raise UserCodeError(op.label, op.location, note, record) from error
            yield WindowedValue(value, start, window, PANE_INFO_UNKNOWN)


def read_text(sc: Any, op: ReadTextOp) -> tuple[Any, Any]:
    """The RDD of the read's elements, and of their values alone when each element is its
    line in the global window at the minimum timestamp with an unknown pane (else None)."""
    source = op.source
    files = expand_glob(sc, source.file_pattern)
    if not files:
        if source.validate:
            msg = f"'{op.label}' (applied at {op.location}): no files match {source.file_pattern!r}"
            raise TransformError(msg)
        return sc.emptyRDD(), None
    if source.splits_lines_in_python():
        # Whole files as bytes: Spark's text reader decodes UTF-8 in the JVM and splits on a
        # lone \r too, so a coder would not see the file's bytes and lines would differ.
        contents = sc.binaryFiles(",".join(files), minPartitions=max(1, min(len(files), sc.defaultParallelism)))
        return contents.mapPartitions(functools.partial(_decoded_lines, op)), None
    if source.skip_header_lines:
        # Headers are per file, so each file is read on its own (its first partition skips them).
        per_file = [
            _text_lines(sc, path, 1).mapPartitionsWithIndex(functools.partial(_skip_header, source.skip_header_lines))
            for path in files
        ]
        lines = sc.union(per_file)
    else:
        lines = _text_lines(sc, ",".join(files))
    return lines.mapPartitions(_to_windowed), lines


def _opener(path: str, compression: str) -> Any:
    if compression == "gzip":
        return gzip.open(path, "wb")
    if compression == "bzip2":
        return bz2.open(path, "wb")
    if compression == "uncompressed":
        return open(path, "wb")
    msg = f"compression {compression!r} is not supported for writing"
    raise ValueError(msg)


_TO_BYTES = ToBytesCoder()


class _TextShardWriter:
    """One shard: the header, each element encoded by the sink's coder, the footer.

    As Beam: the header and footer are written with ToBytesCoder whatever the coder, and
    each line (header and footer too) ends with a newline only if append_trailing_newlines.
    """

    def __init__(self, handle: Any, sink: WriteToText) -> None:
        self.handle = handle
        self.footer = sink.footer
        self.encode = sink.coder.encode
        self.newline = b"\n" if sink.append_trailing_newlines else b""
        if sink.header is not None:
            handle.write(_TO_BYTES.encode(sink.header) + self.newline)

    def write(self, value: Any) -> None:
        encoded = self.encode(value)
        if not isinstance(encoded, bytes):
            msg = f"the coder's encode() returned {type(encoded).__name__}, not bytes: {encoded!r}"
            raise TypeError(msg)
        self.handle.write(encoded + self.newline)

    def close(self) -> None:
        try:
            if self.footer is not None:
                self.handle.write(_TO_BYTES.encode(self.footer) + self.newline)
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


def _write_shard(op: WriteTextOp, sink: TextFileSink, temp_dir: str, num_shards: int, index: int, elements: Iterator[WindowedValue]) -> Iterator[tuple[str, str, int]]:
    final_name = op.sink.shard_name(index, num_shards)
    temp_path = os.path.join(temp_dir, f"shard-{index:05d}")
    writer = sink.open(temp_path)
    count = 0
    value = None
    try:
        for wv in elements:
            value = wv.value
            writer.write(value)
            count += 1
    except Exception as error:
        raise UserCodeError(op.label, op.location, error, value) from error
    finally:
        writer.close()
    yield temp_path, final_name, count


def write_text(sc: Any, op: WriteTextOp, rdd: Any, params: StepParams) -> list[str]:
    """Write ``rdd`` as Beam-named shards, atomically; returns the final file names."""
    sink = op.sink
    num_shards = sink.num_shards or max(1, rdd.getNumPartitions())
    if sink.num_shards:
        rdd = rdd.repartition(num_shards) if rdd.getNumPartitions() != num_shards else rdd
    elif rdd.getNumPartitions() == 0:
        rdd = sc.parallelize([], 1)
    with commits.staging_directory(local_prefix(op)) as temp_dir:
        write = functools.partial(_write_shard, op, TextFileSink(sink), temp_dir, num_shards)
        written = sorted(rdd.mapPartitionsWithIndex(write).collect())
        if sink.skip_if_empty and not any(count for _, _, count in written):
            return []  # Beam's skip_if_empty: no shards at all for an empty PCollection
        finals = []
        for temp_path, final_name, _ in written:
            final_name = os.path.abspath(final_name.removeprefix("file://"))
            commits.commit(temp_path, final_name)
            finals.append(final_name)
        return finals
