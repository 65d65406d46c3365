"""Cluster file systems (``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``, ``viewfs://``...)
through Hadoop's ``FileSystem`` API in the Spark driver's JVM.

``HadoopFileSystem`` is a ``sparkbeam.io.filesystem.FileSystem`` whose every call goes
through Py4J to ``org.apache.hadoop.fs.FileSystem``, built from the running
``SparkContext``'s ``hadoopConfiguration`` (so ``--spark_conf spark.hadoop.fs.s3a....``
settings and the connectors on Spark's class path apply, as for Spark's own reads). It is
registered in ``FileSystems`` for ``HADOOP_SCHEMES`` when this module is imported (the
Spark runner imports it); a call made while no Spark session is up says so.

**Plain paths and ``file://`` URLs** stay with ``LocalFileSystem`` (Python's ``os``): it
works on the executors too, and fsyncs. ``--file_urls_through_hadoop`` sends ``file://``
URLs (not plain paths) through Hadoop's local file system instead, on the driver, which is
how the checkpoint, write-ahead-log and commit paths are tested against Hadoop's API
without a cluster.

**Atomic renames.** ``rename`` is Hadoop's: atomic on HDFS, ``viewfs`` over HDFS, ABFS
with hierarchical namespace and the local file system. On object stores (S3 through
``s3a``, GCS through the ``gs`` connector) a rename is a copy and a delete, file by file:
a committed directory can be seen half-renamed by a reader during the rename, and a crash
in the middle leaves a partial copy. What remains: a manifest or journal entry is one
object, written whole (the object store's put is atomic), so a checkpoint exists only once
complete and recovery ignores what it does not name; a stream's step directory replayed
after such a crash is rewritten whole. Readers that need never to see a partial step
directory on S3 should read only the steps a later step's existence proves committed.

**The driver only.** Py4J reaches the driver's JVM, not the executors' Python workers, so
this file system serves the driver: matching input globs, checkpoints, the step journal,
write-ahead-log metadata and renames that commit output. Data is written by Spark's own
writers on the executors (sealed text files for keyed state and the write-ahead log, ``sealed_files.py``),
which take any Hadoop URL. A file sink's shards are written by the executors' Python, so a
sink's path must be one the executors reach (local, ``file://`` or a shared mount); a sink
on a cluster file system is refused before Spark starts (``runners/spark/sinks.py``).
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterator
from typing import IO, Any

from sparkbeam.io.filesystem import (
    BeamIOError,
    CompressionTypes,
    FileMetadata,
    FileSystem,
    compressed_stream,
)
from sparkbeam.io.filesystems import FileSystems

__all__ = ["HADOOP_SCHEMES", "HadoopFileSystem", "register"]

#: the schemes served through Hadoop while a Spark session is up
HADOOP_SCHEMES = ("hdfs", "s3a", "gs", "abfs", "abfss", "viewfs", "wasb", "wasbs", "o3fs", "ofs")

_READ_CHUNK = 1 << 20


def _context() -> Any:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        msg = (
            "Hadoop-backed paths (hdfs://, s3a://, gs://, ...) are served through the Spark driver's JVM, "
            "and no Spark session is up; run the pipeline (which starts one) or start a SparkSession first"
        )
        raise RuntimeError(msg)
    return sc


class _JavaOutput(io.RawIOBase):
    """Bytes written to a Hadoop ``FSDataOutputStream``; ``close`` syncs where it can."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        if chunk:
            self._stream.write(bytearray(chunk))
        return len(chunk)

    def close(self) -> None:
        if not self.closed:
            try:
                try:
                    self._stream.hsync()  # durable before it is renamed into place (HDFS)
                except Exception:  # a file system without hsync: close still flushes
                    self._stream.flush()
            finally:
                self._stream.close()
        super().close()


class _JavaInput(io.RawIOBase):
    """Bytes read from a Hadoop ``FSDataInputStream``, a chunk per Py4J call."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self._stream = stream
        self._pending = b""
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._pending and not self._ended:
            self._pending = bytes(self._stream.readNBytes(max(len(buffer), _READ_CHUNK)))
            self._ended = not self._pending
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()


class HadoopFileSystem(FileSystem):
    """Beam's ``FileSystem`` over Hadoop's, in the driver's JVM (see the module docs)."""

    def _path(self, path: str) -> Any:
        return _context()._jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, path: str) -> tuple[Any, Any]:
        sc = _context()
        jpath = sc._jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(sc._jsc.hadoopConfiguration()), jpath

    def hadoop_class(self, path: str) -> str:
        """The Java class of the Hadoop file system serving ``path`` (which connector)."""
        fs, _ = self._fs(path)
        return str(fs.getClass().getName())

    # -- paths
    def join(self, basepath: str, *paths: str) -> str:
        return posixpath.join(basepath, *paths)

    def split(self, path: str) -> tuple[str, str]:
        scheme, sep, rest = path.partition("://")
        head, tail = posixpath.split(rest)
        return (f"{scheme}{sep}{head}" if sep else head), tail

    def mkdirs(self, path: str) -> None:
        fs, jpath = self._fs(path)
        if fs.exists(jpath):
            msg = f"Path {path} already exists."
            raise OSError(msg)
        fs.mkdirs(jpath)

    def makedirs(self, path: str, private: bool = False) -> None:
        """Create the directory and its parents; one already there is fine. ``private``:
        the directory gets permission 700 where the file system has permissions (HDFS,
        local; object stores ignore it: their access is the bucket's policy)."""
        fs, jpath = self._fs(path)
        created = fs.mkdirs(jpath)
        if not created and not fs.getFileStatus(jpath).isDirectory():
            msg = f"cannot create the directory {path}: a file is in the way"
            raise OSError(msg)
        if private and created:
            fs.setPermission(jpath, _context()._jvm.org.apache.hadoop.fs.permission.FsPermission("700"))

    def has_dirs(self) -> bool:
        return True

    def is_directory(self, path: str) -> bool:
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath) and fs.getFileStatus(jpath).isDirectory())

    def list_names(self, path: str) -> list[str]:
        """The names directly in a directory (Hadoop's own hidden checksum files left out)."""
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return []
        return [str(status.getPath().getName()) for status in fs.listStatus(jpath)]

    def _list(self, dir_or_prefix: str) -> Iterator[FileMetadata]:
        fs, jpath = self._fs(dir_or_prefix.rstrip("/") or dir_or_prefix)
        try:
            if not fs.exists(jpath):
                return
            found = fs.listFiles(jpath, True)
            while found.hasNext():
                status = found.next()
                yield FileMetadata(str(status.getPath().toString()), int(status.getLen()), status.getModificationTime() / 1000.0)
        except Exception as error:
            raise BeamIOError("List operation failed", {dir_or_prefix: error}) from error

    def match(self, patterns: list[str], limits: list[int | None] | None = None) -> Any:
        # Hadoop qualifies what it lists (file:/x for file:///x): match in its spelling.
        return super().match([self._qualified(p) for p in patterns], limits)

    def _qualified(self, pattern: str) -> str:
        scheme, sep, rest = pattern.partition("://")
        if scheme == "file" and sep:
            return "file:" + rest  # Hadoop's LocalFileSystem lists file:/abs/path
        return pattern

    # -- reading and writing
    def create(self, path: str, mime_type: str = "application/octet-stream", compression_type: Any = CompressionTypes.AUTO) -> IO[bytes]:
        fs, jpath = self._fs(path)
        raw = io.BufferedWriter(_JavaOutput(fs.create(jpath, True)), buffer_size=_READ_CHUNK)
        return compressed_stream(raw, "wb", FileSystem._get_compression_type(path, compression_type), path)

    def create_new(self, path: str, data: bytes) -> bool:
        """Write ``data`` to ``path`` unless something is there: Hadoop's create without
        overwrite, atomic on HDFS (on object stores, as atomic as the connector's
        conditional create); False if the file was there."""
        fs, jpath = self._fs(path)
        try:
            stream = fs.create(jpath, False)
        except Exception as error:  # Py4J's error around FileAlreadyExistsException
            if "FileAlreadyExistsException" in str(error) or fs.exists(jpath):
                return False
            raise
        with io.BufferedWriter(_JavaOutput(stream), buffer_size=_READ_CHUNK) as handle:
            handle.write(data)
        return True

    def open(self, path: str, mime_type: str = "application/octet-stream", compression_type: Any = CompressionTypes.AUTO) -> IO[bytes]:
        fs, jpath = self._fs(path)
        raw = io.BufferedReader(_JavaInput(fs.open(jpath)), buffer_size=_READ_CHUNK)
        return compressed_stream(raw, "rb", FileSystem._get_compression_type(path, compression_type), path)

    # -- operations on many paths
    def _each(self, what: str, pairs: list[tuple[str, ...]], action: Any) -> None:
        failures: dict[Any, Exception] = {}
        for pair in pairs:
            try:
                action(*pair)
            except Exception as error:
                failures[pair if len(pair) > 1 else pair[0]] = error
        if failures:
            raise BeamIOError(f"{what} operation failed", failures)

    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        def copy_one(source: str, destination: str) -> None:
            sc = _context()
            src_fs, src = self._fs(source)
            dst_fs, dst = self._fs(destination)
            if not sc._jvm.org.apache.hadoop.fs.FileUtil.copy(src_fs, src, dst_fs, dst, False, True, sc._jsc.hadoopConfiguration()):
                msg = f"Hadoop could not copy {source} to {destination}"
                raise OSError(msg)

        self._each("Copy", list(zip(source_file_names, destination_file_names)), copy_one)

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        self._each("Rename", list(zip(source_file_names, destination_file_names)), self.replace)

    def replace(self, source: str, destination: str) -> None:
        """Rename ``source`` to ``destination``, replacing a file there. Hadoop's rename does
        not replace: an existing file is deleted first (atomic only where no file is in the
        way, which is how the committers use it; a replaced file is missing for a moment)."""
        fs, src = self._fs(source)
        _, dst = self._fs(destination)
        if fs.rename(src, dst):
            return
        if fs.exists(dst) and not fs.getFileStatus(dst).isDirectory() and fs.exists(src):
            fs.delete(dst, False)
            if fs.rename(src, dst):
                return
        msg = f"Hadoop could not rename {source} to {destination} ({self.hadoop_class(source)})"
        raise OSError(msg)

    def exists(self, path: str) -> bool:
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath))

    def _status(self, path: str) -> Any:
        fs, jpath = self._fs(path)
        return fs.getFileStatus(jpath)

    def size(self, path: str) -> int:
        return int(self._status(path).getLen())

    def last_updated(self, path: str) -> float:
        return float(self._status(path).getModificationTime()) / 1000.0

    def checksum(self, path: str) -> str:
        fs, jpath = self._fs(path)
        found = fs.getFileChecksum(jpath)
        return str(found.toString()) if found is not None else str(self.size(path))

    def metadata(self, path: str) -> FileMetadata:
        status = self._status(path)
        return FileMetadata(path, int(status.getLen()), status.getModificationTime() / 1000.0)

    def delete(self, paths: list[str]) -> None:
        def delete_one(path: str) -> None:
            fs, jpath = self._fs(path)
            if not fs.exists(jpath):
                msg = f"{path} does not exist"
                raise FileNotFoundError(msg)
            fs.delete(jpath, True)

        self._each("Delete", [(p,) for p in paths], delete_one)

    def remove(self, path: str) -> None:
        """Delete a file or directory tree; one already gone is fine. Hadoop's local file
        system answers False where it could not delete (a permission error): raised."""
        fs, jpath = self._fs(path)
        if not fs.delete(jpath, True) and fs.exists(jpath):
            msg = f"Hadoop could not delete {path} ({self.hadoop_class(path)}): check its permissions"
            raise OSError(msg)


def register() -> None:
    """Serve ``HADOOP_SCHEMES`` with ``HadoopFileSystem`` (done when this module is imported)."""
    for scheme in HADOOP_SCHEMES:
        FileSystems.register(scheme, HadoopFileSystem)


def serve_file_urls(through_hadoop: bool) -> None:
    """Send ``file://`` URLs through Hadoop's local file system (``--file_urls_through_hadoop``),
    or back to Python's."""
    FileSystems.serve_file_urls(HadoopFileSystem if through_hadoop else None)


register()
