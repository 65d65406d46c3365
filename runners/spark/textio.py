"""ReadFromText and WriteToText on Spark.

Reading matches a local pattern as Beam does (``FileSystems``, Beam's glob syntax) and any
other through Hadoop's file system (HDFS, and any file system Spark is configured for), and
reads each file's lines by the rules of Beam's text source (``runners/core/sources/text_lines.py``):
local files in byte ranges, several tasks per file, each range read on an executor in a few
C calls; a compressed file whole in one task, as Beam reads it. A coder other than
``StrUtf8Coder``, a delimiter or an escape character split each file whole with
``split_records``. Files on a cluster file system (which the executors' Python cannot open)
are read through the JVM: plain lines by Spark's splittable text reader (a file of any
size, split over tasks; it also ends lines at a lone ``\r``, keeps a byte-order mark and
replaces bytes that are not UTF-8: the README lists this difference), anything else whole
through Spark's ``binaryFiles``.

Writing is atomic: each shard is written under a temporary directory beside the output,
and only when every shard is written are they renamed to Beam's shard names; a failed job
leaves nothing under the final names.
"""

from __future__ import annotations

import bz2
import functools
import io
import os
from collections.abc import Iterable, Iterator
from itertools import chain, repeat
from typing import Any

import attrs

from sparkbeam.coders.coders import ToBytesCoder
from sparkbeam.io import commits
from sparkbeam.io.filesystem import CompressionTypes, compressed_stream
from sparkbeam.io.filesystems import FileSystems
from sparkbeam.io.filewrites import FileSink
from sparkbeam.io.localfilesystem import LocalFileSystem
from sparkbeam.io.textio import ReadFromText, WriteToText, split_records
from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError, add_note
from sparkbeam.runners.core.lowering.ops import ReadTextOp, WriteTextOp
from sparkbeam.runners.core.lowering.step_values import StepParams
from sparkbeam.runners.core.sources.text_lines import (
    TextRange,
    bundle_ranges,
    read_ranges,
    stream_lines,
)
from sparkbeam.runners.spark import remote_files
from sparkbeam.runners.spark.metrics import MetricsChannel, metered_by
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import GlobalWindow

__all__ = [
    "MatchedFile",
    "TextFileSink",
    "compression_of",
    "contents_elements",
    "line_elements",
    "matched_files",
    "output_prefix",
    "range_bundles",
    "read_range_bundles",
    "read_text",
    "read_whole_files",
    "readable_files",
    "write_text",
]

#: the most bytes a task reads: Hadoop's local block size, the most a ``textFile`` split held
_MAX_BUNDLE = 32 << 20
#: the fewest bytes a task reads (unless the files hold fewer): a task costs more than
#: reading a MiB of lines, so small files are read together
_MIN_BUNDLE = 1 << 20


@attrs.frozen
class MatchedFile:
    """A file a read's pattern matched: ``path`` (a local path when ``local``, else its URL)."""

    path: str
    size: int
    local: bool


def matched_files(sc: Any, pattern: str) -> list[MatchedFile]:
    """The files matching ``pattern``, sorted: a local pattern (a path, ``file://``) with
    Beam's glob syntax through ``FileSystems``, as Beam matches it; another through
    Hadoop's FileSystem API (a folder matched stands for its files, hidden ones and
    ``_``-named ones left out)."""
    filesystem = FileSystems.get_filesystem(pattern)
    if isinstance(filesystem, LocalFileSystem):
        (result,) = filesystem.match([pattern])
        found = [MatchedFile(m.path, m.size_in_bytes, True) for m in result.metadata_list if not filesystem.is_directory(m.path)]
        return sorted(found, key=lambda f: f.path)
    jvm = sc._jvm
    path = jvm.org.apache.hadoop.fs.Path(pattern)
    fs = path.getFileSystem(sc._jsc.hadoopConfiguration())
    statuses: list[Any] = []
    for status in fs.globStatus(path) or []:
        if status.isDirectory():
            statuses.extend(
                child for child in fs.listStatus(status.getPath()) if child.isFile() and not child.getPath().getName().startswith((".", "_"))
            )
        else:
            statuses.append(status)
    return sorted((MatchedFile(status.getPath().toString(), status.getLen(), False) for status in statuses), key=lambda f: f.path)


def _names_a_local_directory(pattern: str) -> bool:
    """Whether ``pattern`` is no glob but the path of a local folder (``FileSystems``' view)."""
    filesystem = FileSystems.get_filesystem(pattern)
    if not isinstance(filesystem, LocalFileSystem) or any(c in pattern for c in "*?["):
        return False
    return filesystem.is_directory(pattern)


def line_elements(lines: Iterable[str]) -> Iterator[WindowedValue]:
    """Each line as a read's element: in the global window at the minimum timestamp."""
    # assignment's own tuple: a WindowInto(GlobalWindows()) copies nothing. Built by map
    # and zip in C: no Python frame per line.
    fields = zip(lines, repeat(MIN_TIMESTAMP.micros), repeat(GLOBAL_WINDOWS), repeat(PANE_INFO_UNKNOWN))
    return map(new_windowed_value, fields)


def compression_of(source: ReadFromText, path: str) -> str:
    """The compression the source reads ``path`` with (by its extension when AUTO, as Beam)."""
    if source.compression_type == CompressionTypes.AUTO:  # by extension, as Beam
        return CompressionTypes.detect_compression_type(path)
    return source.compression_type


def _open_local(path: str, compression: str) -> Any:
    raw = open(path, "rb", buffering=0)  # noqa: SIM115 - closed with the stream
    return compressed_stream(raw, "rb", compression, path)


def _failed(op: ReadTextOp, path: str, error: Exception) -> UserCodeError:
    add_note(error, f"while reading {path}")
    return UserCodeError(op.label, op.location, error)


def _range_blocks(op: ReadTextOp, bundles: Iterable[tuple[TextRange, ...]]) -> Iterator[list[str]]:
    source = op.source
    for ranges in bundles:
        for whole in ranges:
            try:
                yield from read_ranges(
                    (whole,), _open_local, skip_header_lines=source.skip_header_lines, keep_ends=not source.strip_trailing_newlines
                )
            except Exception as error:
                raise _failed(op, whole.path, error) from error


def _range_lines(op: ReadTextOp, bundles: Iterable[tuple[TextRange, ...]]) -> Iterator[str]:
    """The lines of the task's ranges, by Beam's rules (``text_lines``), read a block at a
    time and handed on by ``chain`` (no Python frame per line)."""
    return chain.from_iterable(_range_blocks(op, bundles))


def _whole_file_blocks(op: ReadTextOp, files: Iterable[tuple[str, bytes]]) -> Iterator[list[str]]:
    source = op.source
    for path, data in files:
        try:
            stream = compressed_stream(io.BytesIO(data), "rb", compression_of(source, path), path)
            yield from stream_lines(stream, source.skip_header_lines, not source.strip_trailing_newlines)
        except Exception as error:
            raise _failed(op, path, error) from error


def _spark_text_lines(sc: Any, paths: list[str], header_lines: int) -> Any:
    """The lines of ``paths`` as Spark's ``textFile`` reads them (Hadoop's line reader,
    UTF-8 decoded in the JVM), handed to Python in batches the JVM pickles (``textFile``
    frames each line on its own, which costs PySpark's Python three calls per line)."""
    from pyspark.rdd import RDD
    from pyspark.serializers import BatchedSerializer, CPickleSerializer

    def read(joined: str, partitions: int) -> Any:
        pickled = sc._jvm.org.apache.spark.api.python.SerDeUtil.javaToPython(sc._jsc.textFile(joined, partitions))
        return RDD(pickled, sc, BatchedSerializer(CPickleSerializer()))

    if not header_lines:
        return read(",".join(paths), min(sc.defaultParallelism, 2))  # textFile's default
    # Headers are per file, so each file is read on its own (its first partition skips them).
    return sc.union([read(path, 1).mapPartitionsWithIndex(functools.partial(_skip_header, header_lines)) for path in paths])


def _skip_header(count: int, index: int, lines: Iterator[str]) -> Iterator[str]:
    if index == 0:
        for _ in range(count):
            next(lines, None)
    return lines


def _whole_file_lines(op: ReadTextOp, files: Iterable[tuple[str, bytes]]) -> Iterator[str]:
    """The lines of whole files (path, bytes), by Beam's rules (``text_lines``)."""
    return chain.from_iterable(_whole_file_blocks(op, files))


def _decoded_lines(op: ReadTextOp, files: Iterable[tuple[str, bytes]]) -> Iterator[WindowedValue]:
    """Beam's record splitting and the source's coder over whole files (path, bytes)."""
    source = op.source
    window = (GlobalWindow(),)
    start = MIN_TIMESTAMP.micros
    decode = source.coder.decode
    for path, data in files:
        try:
            content = compressed_stream(io.BytesIO(data), "rb", compression_of(source, path), path).read()
        except Exception as error:
            raise _failed(op, path, error) from error
        records = split_records(
            content,
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


def contents_elements(op: ReadTextOp, files: Iterable[tuple[str, bytes]]) -> Iterator[WindowedValue]:
    """The elements of whole files (path, bytes) by Beam's rules: decompressed by the
    source's compression, split into lines or records, decoded by its coder."""
    if op.source.splits_lines_in_python():
        return _decoded_lines(op, files)
    return line_elements(_whole_file_lines(op, files))


def readable_files(op: ReadTextOp, matched: list[MatchedFile]) -> list[MatchedFile]:
    """The matched files that have lines (an empty file has none: Beam skips it); refused
    as Beam refuses them: a pattern naming a folder, and no match when the read validates."""
    source = op.source
    if not matched and _names_a_local_directory(source.file_pattern):
        # Beam matches the folder itself and fails opening it; nothing read would be silent.
        msg = (
            f"'{op.label}' (applied at {op.location}): {source.file_pattern!r} is a directory; "
            f"ReadFromText reads files: give a pattern for the files in it, such as {source.file_pattern.rstrip('/') + '/*'!r}"
        )
        raise TransformError(msg)
    if not matched and source.validate:
        msg = f"'{op.label}' (applied at {op.location}): no files match {source.file_pattern!r}"
        raise TransformError(msg)
    return [f for f in matched if f.size > 0]


def range_bundles(op: ReadTextOp, files: list[MatchedFile], parallelism: int) -> list[tuple[TextRange, ...]]:
    """Local files cut into byte ranges, bundled for ``parallelism`` readers (each bundle
    from 1 MiB to 32 MiB): what ``read_range_bundles`` reads, a bundle per task."""
    ranges = tuple(TextRange(f.path, 0, f.size, compression_of(op.source, f.path)) for f in files)
    total = sum(f.size for f in files)
    size = min(_MAX_BUNDLE, max(_MIN_BUNDLE, -(-total // max(1, parallelism))))
    return [bundle for _, bundle in bundle_ranges(ranges, size)]


def read_range_bundles(op: ReadTextOp, bundles: Iterable[tuple[TextRange, ...]]) -> Iterator[WindowedValue]:
    """The elements of local files' byte ranges: each line in the global window."""
    return line_elements(_range_lines(op, bundles))


def read_whole_files(op: ReadTextOp, paths: Iterable[str]) -> Iterator[WindowedValue]:
    """The elements of local files read whole by this process's Python, for a source that
    ``splits_lines_in_python`` (a coder, a delimiter or an escape character)."""

    def contents() -> Iterator[tuple[str, bytes]]:
        for path in paths:
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except Exception as error:
                raise _failed(op, path, error) from error
            yield path, data

    return _decoded_lines(op, contents())


def read_text(sc: Any, op: ReadTextOp) -> tuple[Any, Any]:
    """The RDD of the read's elements, and of their values alone when each element is its
    line in the global window at the minimum timestamp with an unknown pane (else None)."""
    source = op.source
    files = readable_files(op, matched_files(sc, source.file_pattern))
    if not files:
        return sc.emptyRDD(), None
    on_cluster_fs = not all(f.local for f in files)
    plain = not source.splits_lines_in_python() and source.strip_trailing_newlines
    if on_cluster_fs and plain and all(compression_of(source, f.path) == CompressionTypes.UNCOMPRESSED for f in files):
        # The executors' Python cannot open an hdfs:// or s3a:// file, and whole files would
        # have to fit in a task's memory (and under 2 GB): Spark's splittable text reader,
        # with its three differences from Beam's lines (README).
        lines = _spark_text_lines(sc, [f.path for f in files], source.skip_header_lines)
    elif source.splits_lines_in_python() or on_cluster_fs:
        # Whole files as bytes, through the JVM (which reaches any file system Spark does).
        contents = sc.binaryFiles(",".join(f.path for f in files), minPartitions=max(1, min(len(files), sc.defaultParallelism)))
        if source.splits_lines_in_python():
            return contents.mapPartitions(functools.partial(_decoded_lines, op)), None
        lines = contents.mapPartitions(functools.partial(_whole_file_lines, op))
    else:
        bundles = range_bundles(op, files, sc.defaultParallelism)
        lines = sc.parallelize(bundles, len(bundles)).mapPartitions(functools.partial(_range_lines, op))
        lines.setName(f"{op.label} ({len(bundles)} bundles of lines)")
    return lines.mapPartitions(line_elements), lines


def _opener(path: str, compression: str) -> Any:
    if compression == "gzip":
        return compressed_stream(open(path, "wb"), "wb", CompressionTypes.GZIP, path)
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


def output_prefix(op: WriteTextOp) -> str:
    """The sink's prefix: an absolute local path, or a URL of a file system Hadoop serves
    (written through the driver, ``remote_files.py``); other schemes are refused."""
    from sparkbeam.runners.spark.hadoop_filesystem import HADOOP_SCHEMES

    prefix = op.sink.file_path_prefix
    if "://" in prefix and not prefix.startswith("file://"):
        if prefix.split("://", 1)[0] in HADOOP_SCHEMES:
            return prefix
        msg = f"'{op.label}' (applied at {op.location}): WriteToText on Spark writes to local or shared file systems, or those Hadoop serves ({', '.join(HADOOP_SCHEMES)}), not {prefix!r}"
        raise TransformError(msg)
    return os.path.abspath(prefix.removeprefix("file://"))


def _write_shard(
    op: WriteTextOp, sink: TextFileSink, temp_dir: str, num_shards: int, index: int, elements: Iterator[WindowedValue], path: str | None = None
) -> Iterator[tuple[str, str, int]]:
    final_name = op.sink.shard_name(index, num_shards)
    temp_path = path or os.path.join(temp_dir, f"shard-{index:05d}")
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


def write_text(sc: Any, op: WriteTextOp, rdd: Any, params: StepParams, channel: MetricsChannel | None = None) -> list[str]:
    """Write ``rdd`` as Beam-named shards, atomically; returns the final file names. The
    writing tasks are metered by ``channel`` (which carries the run's key for their errors)."""
    sink = op.sink
    num_shards = sink.num_shards or max(1, rdd.getNumPartitions())
    if sink.num_shards:
        rdd = rdd.repartition(num_shards) if rdd.getNumPartitions() != num_shards else rdd
    elif rdd.getNumPartitions() == 0:
        rdd = sc.parallelize([], 1)
    prefix = output_prefix(op)
    remote = remote_files.is_remote(prefix)
    with commits.staging_directory(prefix) as temp_dir:
        if remote:
            chunks = functools.partial(metered_by(channel, _shard_chunks), op, TextFileSink(sink), num_shards)
            written = [
                (path, sink.shard_name(index, num_shards), count)
                for index, path, count in remote_files.carry_shards(rdd.mapPartitionsWithIndex(chunks), temp_dir)
            ]
        else:
            write = functools.partial(metered_by(channel, _write_shard), op, TextFileSink(sink), temp_dir, num_shards)
            written = sorted(rdd.mapPartitionsWithIndex(write).collect())
        if sink.skip_if_empty and not any(count for _, _, count in written):
            return []  # Beam's skip_if_empty: no shards at all for an empty PCollection
        finals = []
        for temp_path, final_name, _ in written:
            if not remote:
                final_name = os.path.abspath(final_name.removeprefix("file://"))
            commits.commit(temp_path, final_name)
            finals.append(final_name)
        return finals


def _shard_chunks(op: WriteTextOp, sink: TextFileSink, num_shards: int, index: int, elements: Iterator[WindowedValue]) -> Iterator[tuple[int, int, Any]]:
    """One shard written locally and sent to the driver, for a prefix it alone reaches."""

    def write(path: str) -> int:
        (_, _, count), = _write_shard(op, sink, os.path.dirname(path), num_shards, index, elements, path=path)
        return count

    return remote_files.shard_chunks(index, write)
