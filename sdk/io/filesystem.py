"""What a file system is to sparkbeam, with Beam's names (``sparkbeam.io.filesystem``).

- ``FileSystem``: the base class every file system implements (Beam's methods: ``match``,
  ``open``, ``create``, ``copy``, ``rename``, ``delete``, ``exists``, ``size``,
  ``last_updated``, ``checksum``, ``metadata``, ``join``, ``split``, ``mkdirs``).
  ``sparkbeam.io.filesystems.FileSystems`` picks one by the path's URL scheme.
- ``FileMetadata`` and ``MatchResult``: what ``match`` returns; ``BeamIOError``: what a
  batch operation raises, with the error of each path that failed.
- ``CompressionTypes``: Beam's compression names; ``AUTO`` picks one from the file name's
  extension (``.gz``, ``.bz2``, ``.deflate``, ``.xz``/``.lzma``, ``.zst``/``.zstd``).

Patterns are Beam's: ``*`` matches within one folder, ``**`` across folders, ``?`` one
character, ``[...]`` a class. The helpers that sparkbeam's own file transforms call and
that go through ``FileSystems`` (``match_files``, ``open_compressed``, ``readable_path``)
are in ``sparkbeam.io.filesystems``, beside the registry they look up, which builds on
this module.

>>> CompressionTypes.detect_compression_type("logs/day-1.jsonl.gz")
'gzip'
>>> FileMetadata("/data/a.txt", 12)
FileMetadata(/data/a.txt, 12)
"""

from __future__ import annotations

import abc
import bz2
import gzip
import io
import lzma
import os
import posixpath
import re
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any

from sparkbeam.beam_surface import module_getattr

__all__ = [
    "BeamIOError",
    "CompressionTypes",
    "FileMetadata",
    "FileSystem",
    "MatchResult",
    "compressed_stream",
    "iter_lines",
    "local_path",
]


class CompressionTypes:
    """Beam's compression names (``CompressionTypes.GZIP == 'gzip'``)."""

    AUTO = "auto"
    BZIP2 = "bzip2"
    DEFLATE = "deflate"
    GZIP = "gzip"
    LZMA = "lzma"
    ZSTD = "zstd"
    UNCOMPRESSED = "uncompressed"

    _BY_SUFFIX = {
        ".bz2": BZIP2,
        ".deflate": DEFLATE,
        ".gz": GZIP,
        ".zst": ZSTD,
        ".zstd": ZSTD,
        ".xz": LZMA,
        ".lzma": LZMA,
    }

    @classmethod
    def is_valid_compression_type(cls, compression_type: Any) -> bool:
        return compression_type in {
            cls.AUTO, cls.BZIP2, cls.DEFLATE, cls.GZIP, cls.LZMA, cls.ZSTD, cls.UNCOMPRESSED
        }

    @classmethod
    def mime_type(cls, compression_type: str, default: str = "application/octet-stream") -> str:
        return {cls.BZIP2: "application/x-bz2", cls.GZIP: "application/x-gzip"}.get(compression_type, default)

    @classmethod
    def detect_compression_type(cls, file_path: str) -> str:
        """The compression a file name's extension implies (``uncompressed`` if none)."""
        lowered = file_path.lower()
        for suffix, compression in cls._BY_SUFFIX.items():
            if lowered.endswith(suffix):
                return compression
        return cls.UNCOMPRESSED


# pandas spells compressions its own way (``compression='bz2'``); both are accepted.
_PANDAS_NAMES = {
    None: CompressionTypes.UNCOMPRESSED,
    "infer": CompressionTypes.AUTO,
    "bz2": CompressionTypes.BZIP2,
    "xz": CompressionTypes.LZMA,
    "zstd": CompressionTypes.ZSTD,
    "gzip": CompressionTypes.GZIP,
}


def compression_name(owner: str, value: Any) -> str:
    """Normalise a Beam or pandas compression argument; ``owner`` names the transform."""
    name = getattr(value, "value", value)
    name = _PANDAS_NAMES.get(name, name)
    if isinstance(name, str):
        name = name.lower()
    if not CompressionTypes.is_valid_compression_type(name):
        known = [*sorted(n for n in _PANDAS_NAMES if n), "auto", "deflate", "uncompressed", "None"]
        msg = f"{owner}: unknown compression {value!r}; use one of {known}"
        raise ValueError(msg)
    return str(name)


# -- what match returns --------------------------------------------------------------------


class FileMetadata:
    """A file ``match`` found: its ``path``, ``size_in_bytes`` and ``last_updated_in_seconds``
    (0.0 where the file system does not say). Compared and hashed by all three, as Beam's."""

    __slots__ = ("last_updated_in_seconds", "path", "size_in_bytes")

    def __init__(self, path: str, size_in_bytes: int, last_updated_in_seconds: float = 0.0) -> None:
        if not isinstance(path, str) or not path:
            msg = f"FileMetadata: path must be a non-empty string, got {path!r}"
            raise ValueError(msg)
        if not isinstance(size_in_bytes, int) or isinstance(size_in_bytes, bool) or size_in_bytes < 0:
            msg = f"FileMetadata: size_in_bytes must be a non-negative int, got {size_in_bytes!r}"
            raise ValueError(msg)
        self.path = path
        self.size_in_bytes = size_in_bytes
        self.last_updated_in_seconds = last_updated_in_seconds

    def _key(self) -> tuple[str, int, float]:
        return self.path, self.size_in_bytes, self.last_updated_in_seconds

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileMetadata) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> Any:
        return FileMetadata, self._key()

    def __repr__(self) -> str:
        if self.last_updated_in_seconds == 0.0:
            return f"FileMetadata({self.path}, {self.size_in_bytes})"
        return f"FileMetadata({self.path}, {self.size_in_bytes}, {self.last_updated_in_seconds})"


class MatchResult:
    """The files one pattern matched: ``pattern`` and ``metadata_list`` (``FileMetadata``)."""

    def __init__(self, pattern: str, metadata_list: list[FileMetadata]) -> None:
        self.pattern = pattern
        self.metadata_list = metadata_list

    def __repr__(self) -> str:
        return f"MatchResult({self.pattern!r}, {self.metadata_list!r})"


class BeamIOError(IOError):
    """A batch file operation failed; ``exception_details`` maps each failed input to its error."""

    def __init__(self, msg: str, exception_details: dict[Any, Exception] | None = None) -> None:
        super().__init__(f"{msg} with exceptions {exception_details}")
        self.exception_details = exception_details


# -- compression over any file system's streams ---------------------------------------------


class _Layered(io.RawIOBase):
    """A codec's stream over a file system's raw stream; closing it closes both."""

    def __init__(self, codec: Any, raw: IO[bytes], reading: bool) -> None:
        super().__init__()
        self._codec = codec
        self._raw = raw
        self._reading = reading

    def readable(self) -> bool:
        return self._reading

    def writable(self) -> bool:
        return not self._reading

    def readinto(self, buffer: Any) -> int:
        data = self._codec.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def write(self, data: Any) -> int:
        self._codec.write(bytes(data))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._codec.close()
            finally:
                self._raw.close()
        super().close()


class _Deflate(io.RawIOBase):
    """A zlib (``deflate``) stream, as Beam writes ``.deflate`` files."""

    def __init__(self, raw: IO[bytes], reading: bool) -> None:
        super().__init__()
        self._raw = raw
        self._reading = reading
        self._codec: Any = zlib.decompressobj() if reading else zlib.compressobj()
        self._pending = b""

    def readable(self) -> bool:
        return self._reading

    def writable(self) -> bool:
        return not self._reading

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._raw.read(1 << 16)
            if not chunk:
                self._pending = self._codec.flush()
                break
            self._pending = self._codec.decompress(chunk)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def write(self, data: Any) -> int:
        self._raw.write(self._codec.compress(bytes(data)))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                if not self._reading:
                    self._raw.write(self._codec.flush())
            finally:
                self._raw.close()
        super().close()


def gzip_writer(raw: IO[bytes]) -> gzip.GzipFile:
    """A gzip stream writing into ``raw`` whose header names no file and no time, as Beam's
    writer's (zlib's) does: the bytes of a shard depend on its lines only, not on the staged
    name it is written under before its commit renames it, nor on when it was written, so a
    retried or replayed write produces the same file."""
    return gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0)


def compressed_stream(raw: IO[bytes], mode: str, compression: str, path: str = "") -> IO[bytes]:
    """``raw`` (a binary stream from any file system) read or written through ``compression``
    (not ``auto``: resolve it from the path first). Closing the result closes ``raw``."""
    reading = "r" in mode
    if compression == CompressionTypes.UNCOMPRESSED:
        return raw
    codec: Any
    if compression == CompressionTypes.DEFLATE:
        layered: io.RawIOBase = _Deflate(raw, reading)
    elif compression == CompressionTypes.ZSTD:
        try:
            import zstandard
        except ImportError:
            raw.close()
            msg = f"reading or writing {path!r} needs zstandard for zstd compression: pip install zstandard"
            raise ImportError(msg) from None
        codec = (
            zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
            if reading
            else zstandard.ZstdCompressor().stream_writer(raw, closefd=False)
        )
        layered = _Layered(codec, raw, reading)
    else:
        codec_mode = "rb" if reading else "wb"
        if compression == CompressionTypes.GZIP:
            codec = gzip.GzipFile(fileobj=raw, mode=codec_mode) if reading else gzip_writer(raw)
        elif compression == CompressionTypes.BZIP2:
            codec = bz2.BZ2File(raw, codec_mode)  # type: ignore[call-overload]
        elif compression == CompressionTypes.LZMA:
            codec = lzma.LZMAFile(raw, codec_mode)  # noqa: SIM115 (closed with the stream)
        else:
            msg = f"unknown compression {compression!r} for {path!r}"
            raise ValueError(msg)
        layered = _Layered(codec, raw, reading)
    return io.BufferedReader(layered) if reading else io.BufferedWriter(layered)


# -- the base class ---------------------------------------------------------------------------


def translate_pattern(pattern: str) -> str:
    """A regular expression for Beam's glob syntax: ``*`` stays within a folder, ``**``
    crosses folders, ``?`` is any one character, ``[...]`` (``[!...]`` negated) a class.

    >>> bool(re.match(translate_pattern("/d/*.txt"), "/d/e/f.txt"))
    False
    >>> bool(re.match(translate_pattern("/d/**.txt"), "/d/e/f.txt"))
    True
    """
    parts = []
    index, length = 0, len(pattern)
    while index < length:
        char = pattern[index]
        index += 1
        if char == "*":
            if index < length and pattern[index] == "*":
                parts.append(".*")
                index += 1
            else:
                parts.append(r"[^/\\]*")
        elif char == "?":
            parts.append(".")
        elif char == "[":
            end = index
            if end < length and pattern[end] == "!":
                end += 1
            if end < length and pattern[end] == "]":
                end += 1
            while end < length and pattern[end] != "]":
                end += 1
            if end >= length:
                parts.append(r"\[")
            else:
                members = pattern[index:end].replace("\\", "\\\\")
                index = end + 1
                if members.startswith("!"):
                    members = "^" + members[1:]
                elif members.startswith("^"):
                    members = "\\" + members
                parts.append(f"[{members}]")
        else:
            parts.append(re.escape(char))
    return "(?ms)" + "".join(parts) + r"\Z"


_GLOB_PREFIX = re.compile(r"^[^[*?]*")


class FileSystem(abc.ABC):
    """A file system, as ``FileSystems`` uses it. Subclass it for a new one and register it
    (``FileSystems.register``, or a ``scheme()`` classmethod, as in Beam).

    Paths are strings; lists of paths go to ``copy``, ``rename`` and ``delete``, which
    try every item and then raise one ``BeamIOError`` with the error of each failed item.
    ``match`` is implemented here from ``_list`` (non-recursive listing) and ``metadata``.
    """

    CHUNK_SIZE = 1  # how many paths a batch operation hands the file system at once

    def __init__(self, pipeline_options: Any = None) -> None:
        self.pipeline_options = pipeline_options

    @classmethod
    def scheme(cls) -> str | None:
        """The URL scheme this file system serves (None: plain paths), for Beam-style discovery."""
        raise NotImplementedError

    @staticmethod
    def _get_compression_type(path: str, compression_type: Any) -> str:
        name = getattr(compression_type, "value", compression_type)
        if name == CompressionTypes.AUTO:
            return CompressionTypes.detect_compression_type(path)
        if not CompressionTypes.is_valid_compression_type(name):
            msg = f"compression_type must be one of CompressionTypes' names, got {compression_type!r}"
            raise TypeError(msg)
        return str(name)

    # -- paths
    @abc.abstractmethod
    def join(self, basepath: str, *paths: str) -> str: ...

    @abc.abstractmethod
    def split(self, path: str) -> tuple[str, str]: ...

    @abc.abstractmethod
    def mkdirs(self, path: str) -> None:
        """Create the directory and its parents; IOError if it exists already."""

    @abc.abstractmethod
    def has_dirs(self) -> bool: ...

    def is_directory(self, path: str) -> bool:
        """Whether ``path`` is a directory (sparkbeam's: ``match`` of a directory's own path
        returns it, as Beam's does, and readers skip it)."""
        return path.endswith(("/", "\\"))

    @abc.abstractmethod
    def _list(self, dir_or_prefix: str) -> Iterable[FileMetadata]:
        """The files under a directory (or with a prefix): every level down."""

    def _url_dirname(self, url_or_path: str) -> str:
        scheme, sep, path = url_or_path.partition("://")
        if not sep:
            return posixpath.dirname(url_or_path)
        return f"{scheme}://{posixpath.dirname(path)}"

    # -- matching
    def match_files(self, file_metas: Iterable[FileMetadata], pattern: str) -> Iterator[FileMetadata]:
        matches = re.compile(translate_pattern(pattern)).match
        return (metadata for metadata in file_metas if matches(metadata.path))

    def match(self, patterns: list[str], limits: list[int | None] | None = None) -> list[MatchResult]:
        """A ``MatchResult`` per pattern; a pattern without wildcards matches the path itself
        if it exists. Patterns ending in ``/`` match the folder's files."""
        if limits is None:
            limits = [None] * len(patterns)
        elif len(limits) != len(patterns):
            msg = f"match: {len(patterns)} patterns but {len(limits)} limits; give one limit per pattern"
            raise ValueError(msg)
        results = []
        failures: dict[Any, Exception] = {}
        for pattern, limit in zip(patterns, limits):
            try:
                results.append(self._match_one(pattern, limit))
            except Exception as error:
                failures[pattern] = error
        if failures:
            raise BeamIOError("Match operation failed", failures)
        return results

    def _match_one(self, pattern: str, limit: int | None) -> MatchResult:
        if pattern.endswith(("/", "\\")):
            pattern += "*"
        prefix = _GLOB_PREFIX.match(pattern).group(0)  # type: ignore[union-attr]
        if prefix == pattern:
            found = [self.metadata(pattern)] if self.exists(pattern) else []
        else:
            if self.has_dirs():
                prefix = self._url_dirname(prefix)
            found = list(self.match_files(self._list_for(prefix, pattern), pattern))
        if limit is not None:
            found = found[:limit]
        return MatchResult(pattern, found)

    def _list_for(self, dir_or_prefix: str, pattern: str) -> Iterable[FileMetadata]:
        """What to filter with the pattern (a file system may list less than everything)."""
        return self._list(dir_or_prefix)

    # -- streams
    @abc.abstractmethod
    def create(self, path: str, mime_type: str = "application/octet-stream", compression_type: str = CompressionTypes.AUTO) -> IO[bytes]: ...

    @abc.abstractmethod
    def open(self, path: str, mime_type: str = "application/octet-stream", compression_type: str = CompressionTypes.AUTO) -> IO[bytes]: ...

    # -- batch operations
    @abc.abstractmethod
    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None: ...

    @abc.abstractmethod
    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None: ...

    @abc.abstractmethod
    def delete(self, paths: list[str]) -> None: ...

    # -- one path
    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def size(self, path: str) -> int: ...

    @abc.abstractmethod
    def last_updated(self, path: str) -> float: ...

    def checksum(self, path: str) -> str:
        raise NotImplementedError

    @abc.abstractmethod
    def metadata(self, path: str) -> FileMetadata: ...

    def report_lineage(self, path: str, unused_lineage: Any) -> None:  # noqa: B027 (optional, as in Beam)
        """Beam's lineage reporting: sparkbeam records no lineage."""


def check_equal_lengths(operation: str, sources: list[str], destinations: list[str]) -> None:
    if len(sources) != len(destinations):
        msg = (
            f"{operation}: {len(sources)} source paths but {len(destinations)} destination paths; "
            "give one destination per source"
        )
        raise ValueError(msg)


# -- what sparkbeam's own file transforms call ----------------------------------------------


def local_path(owner: str, path: str) -> str:
    """``path`` as a local path, for the transforms that write with Python's own file API
    (or read with pyarrow): ``file://`` is accepted, other schemes are refused."""
    if path.startswith("file://"):
        return path[len("file://"):]
    if "://" in path:
        scheme = path.split("://", 1)[0]
        msg = (
            f"{owner}: {path!r} is on a {scheme}:// file system; this transform reads or writes "
            "through Python's own file API on the Spark executors, so only local paths and shared "
            "mounts (the same path on every executor) are supported"
        )
        raise ValueError(msg)
    return path


def output_prefix(owner: str, path: str) -> str:
    """A file sink's prefix: a local path made absolute (``file://`` taken off), or a URL of
    another file system as it is (a runner that cannot write there refuses it before it
    starts; sparkbeam's Spark runner writes Hadoop's through its driver)."""
    if "://" in path and not path.startswith("file://"):
        return path
    return os.path.abspath(local_path(owner, path))


def iter_lines(handle: IO[bytes], chunk_size: int = 1 << 20) -> Any:
    """The lines of a binary stream without their ``\n`` (or ``\r\n``), read in chunks."""
    rest = b""
    while True:
        chunk = handle.read(chunk_size)
        if not chunk:
            break
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if rest:
        yield rest[:-1] if rest.endswith(b"\r") else rest


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.filesystem")
