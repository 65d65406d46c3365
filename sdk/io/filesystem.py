"""Files as the file-based transforms see them: matching globs, and opening with compression.

sparkbeam's file transforms read and write through Python's own file API on the Spark
executors, so paths must be local or on a file system every executor mounts at the same
path (NFS, a FUSE mount of object storage, ...). ``file://`` URLs are accepted; other
schemes are refused with an error naming the transform.

Compression follows Beam's ``CompressionTypes``: ``AUTO`` picks it from the file name's
extension (``.gz``, ``.bz2``, ``.deflate``, ``.xz``/``.lzma``, ``.zst``/``.zstd``).

>>> CompressionTypes.detect_compression_type("logs/day-1.jsonl.gz")
'gzip'
>>> match_files("/no/such/dir/*.csv")
[]
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import lzma
import os
import zlib
from typing import IO, Any

__all__ = ["CompressionTypes", "iter_lines", "local_path", "match_files", "open_compressed"]


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


def local_path(owner: str, path: str) -> str:
    """``path`` as a local path; refuses URL schemes other than ``file://``."""
    if "://" in path:
        scheme = path.split("://", 1)[0]
        if scheme != "file":
            msg = (
                f"{owner}: {path!r} is on a {scheme}:// file system; sparkbeam reads and writes "
                "files through Python on the Spark executors, so only local paths and shared "
                "mounts (the same path on every executor) are supported"
            )
            raise ValueError(msg)
        path = path[len("file://"):]
    return path


def match_files(pattern: str) -> list[str]:
    """The files (not directories) matching a glob, sorted; ``**`` matches across folders."""
    return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))


def open_compressed(path: str, mode: str, compression: str) -> IO[bytes]:
    """A binary file object for ``path`` (``mode`` 'rb' or 'wb') through ``compression``."""
    if compression == CompressionTypes.AUTO:
        compression = CompressionTypes.detect_compression_type(path)
    if compression == CompressionTypes.UNCOMPRESSED:
        return open(path, mode)
    if compression == CompressionTypes.GZIP:
        return gzip.open(path, mode)  # type: ignore[return-value]
    if compression == CompressionTypes.BZIP2:
        return bz2.open(path, mode)  # type: ignore[return-value]
    if compression == CompressionTypes.LZMA:
        return lzma.open(path, mode)  # type: ignore[return-value]
    if compression == CompressionTypes.DEFLATE:
        raw_deflate = _DeflateFile(path, mode)
        if "r" in mode:
            return io.BufferedReader(raw_deflate)
        return io.BufferedWriter(raw_deflate)
    if compression == CompressionTypes.ZSTD:
        try:
            import zstandard
        except ImportError:
            msg = f"reading or writing {path!r} needs zstandard for zstd compression: pip install zstandard"
            raise ImportError(msg) from None
        raw = open(path, mode)  # noqa: SIM115 (the returned stream closes it)
        if "r" in mode:
            return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        return zstandard.ZstdCompressor().stream_writer(raw, closefd=True)
    msg = f"unknown compression {compression!r}"
    raise ValueError(msg)


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


class _DeflateFile(io.RawIOBase):
    """A zlib (``deflate``) stream, as Beam writes ``.deflate`` files."""

    def __init__(self, path: str, mode: str) -> None:
        super().__init__()
        self._raw = open(path, mode)  # noqa: SIM115 (closed by close())
        self._reading = "r" in mode
        self._codec: Any = zlib.decompressobj() if self._reading else zlib.compressobj()
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
            if not self._reading:
                self._raw.write(self._codec.flush())
            self._raw.close()
        super().close()
