"""``FileSystems``: Beam's one entry point to every file system, chosen by the path's URL scheme.

>>> from sparkbeam.io.filesystems import FileSystems
>>> [m.path for m in FileSystems.match(["/no/such/dir/*.txt"])[0].metadata_list]
[]
>>> FileSystems.get_scheme("hdfs://namenode/logs"), FileSystems.get_scheme("/tmp/x")
('hdfs', None)
>>> match_files("/no/such/dir/*.csv")
[]

Plain paths and ``file://`` URLs are served by ``LocalFileSystem``. A path with any other
scheme needs a file system registered for it; without one, every operation raises a
``ValueError`` naming the scheme.

**Registering a file system** (the seam for ``hdfs://``, ``s3a://``, ``gs://``...):

- ``FileSystems.register("hdfs", factory)``: ``factory(pipeline_options)`` returns a
  ``sparkbeam.io.filesystem.FileSystem``; one factory may be registered for several
  schemes. A registration replaces an earlier one for the same scheme;
  ``FileSystems.unregister(scheme)`` removes it.
- As in Beam, a subclass of ``FileSystem`` whose ``scheme()`` returns the scheme is found
  without registering, once its module is imported.

``FileSystems.serve_file_urls(factory)`` serves ``file://`` URLs (not plain paths) with
another file system: the Spark runner's ``--file_urls_through_hadoop`` sends them through
Hadoop's local file system (``runners/spark/hadoop_filesystem.py``, which also registers
``hdfs``, ``s3a``, ``gs``, ``abfs``, ``viewfs``... while a Spark session is up).

A registration lives in the process that made it. A file system backed by the Spark
driver's JVM (Hadoop's ``FileSystem`` API through Py4J) serves the driver only: matching
globs when a pipeline is built, checkpoints, committing output. Code that runs on the
executors (a DoFn calling ``FileSystems.open``, ``ReadMatches``, the CSV and JSON reads)
needs a file system that works in the executors' Python processes too, registered there
by importing its module (for example from a DoFn's ``setup``), or a shared mount.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import IO, Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.io.filesystem import (
    BeamIOError,
    CompressionTypes,
    FileMetadata,
    FileSystem,
    MatchResult,
)
from sparkbeam.io.localfilesystem import LocalFileSystem

__all__ = ["FileSystems", "match_files", "open_compressed", "readable_path"]

FileSystemFactory = Callable[[Any], FileSystem]

_LOCAL_SCHEMES = (None, "file")


def _all_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    subclasses: list[type] = cls.__subclasses__()
    for sub in subclasses:
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


class FileSystems:
    """Beam's ``FileSystems``: static methods that route each call to the file system of
    the path's scheme (see the module's documentation for registering one)."""

    URI_SCHEMA_PATTERN = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")

    _pipeline_options: Any = None
    _registered: dict[str | None, FileSystemFactory] = {}
    _instances: dict[str | None, FileSystem] = {}
    _file_urls: FileSystemFactory | None = None
    _lock = threading.Lock()

    # -- the registry ------------------------------------------------------------------------
    @classmethod
    def register(cls, scheme: str, factory: FileSystemFactory) -> None:
        """Serve paths ``scheme://...`` with ``factory(pipeline_options)`` (a ``FileSystem``)."""
        if not isinstance(scheme, str) or not re.fullmatch(r"[a-zA-Z][-a-zA-Z0-9+.]*", scheme):
            msg = f"FileSystems.register: scheme must be a URL scheme such as 'hdfs' (no '://'), got {scheme!r}"
            raise ValueError(msg)
        if scheme.lower() == "file":
            msg = "FileSystems.register: the 'file' scheme is the local file system's and cannot be replaced"
            raise ValueError(msg)
        if not callable(factory):
            msg = f"FileSystems.register({scheme!r}, ...): factory must be callable (a FileSystem class or function), got {factory!r}"
            raise TypeError(msg)
        with cls._lock:
            cls._registered[scheme.lower()] = factory
            cls._instances.pop(scheme.lower(), None)

    @classmethod
    def unregister(cls, scheme: str) -> None:
        with cls._lock:
            cls._registered.pop(scheme.lower(), None)
            cls._instances.pop(scheme.lower(), None)

    @classmethod
    def serve_file_urls(cls, factory: FileSystemFactory | None) -> None:
        """Serve ``file://`` URLs (never plain paths) with ``factory`` instead of
        ``LocalFileSystem``; None gives them back. The Spark runner uses it for
        ``--file_urls_through_hadoop`` (Hadoop's view of the local disk, on the driver)."""
        with cls._lock:
            cls._file_urls = factory
            cls._instances.pop("file", None)

    @classmethod
    def registered_schemes(cls) -> list[str]:
        """The schemes served: 'file' and those registered or found as subclasses."""
        discovered = {_scheme_of(sub) for sub in _all_subclasses(FileSystem)}
        registered = (scheme for scheme in cls._registered if scheme is not None)
        return sorted({"file", *registered, *(s for s in discovered if isinstance(s, str))})

    @classmethod
    def set_options(cls, pipeline_options: Any) -> None:
        """The options file systems are built with (Beam's ``FileSystems.set_options``)."""
        with cls._lock:
            cls._pipeline_options = pipeline_options
            cls._instances.clear()

    @staticmethod
    def get_scheme(path: str) -> str | None:
        match = FileSystems.URI_SCHEMA_PATTERN.match(path.strip())
        return None if match is None else match.group("scheme")

    @classmethod
    def get_filesystem(cls, path: str) -> FileSystem:
        """The file system serving ``path``; a ValueError naming the scheme if none does."""
        if not isinstance(path, str):
            msg = f"a file path must be a string, got {path!r}"
            raise TypeError(msg)
        scheme = cls.get_scheme(path)
        key = scheme.lower() if scheme is not None else None
        if key in _LOCAL_SCHEMES and not (key == "file" and cls._file_urls is not None):
            key = None
        with cls._lock:
            found = cls._instances.get(key)
            if found is not None:
                return found
            factory = cls._factory(key)
            if factory is None:
                msg = (
                    f"no file system is registered for the {scheme!r} scheme of {path!r} "
                    f"(registered: {', '.join(cls.registered_schemes())}, and plain local paths). "
                    f"Register one with FileSystems.register({scheme!r}, factory) or a FileSystem "
                    f"subclass whose scheme() returns {scheme!r}; a shared mount (the same local path "
                    "on every executor) works without one"
                )
                raise ValueError(msg)
            filesystem = factory(cls._pipeline_options)
            cls._instances[key] = filesystem
            return filesystem

    @classmethod
    def _factory(cls, key: str | None) -> FileSystemFactory | None:
        if key is None:
            return LocalFileSystem
        if key == "file":
            return cls._file_urls
        registered = cls._registered.get(key)
        if registered is not None:
            return registered
        found = [sub for sub in _all_subclasses(FileSystem) if _scheme_of(sub) == key]
        if len(found) > 1:
            names = ", ".join(sorted(sub.__qualname__ for sub in found))
            msg = f"more than one FileSystem subclass serves the {key!r} scheme ({names}); register the one to use with FileSystems.register"
            raise ValueError(msg)
        return found[0] if found else None

    # -- Beam's operations -----------------------------------------------------------------
    @staticmethod
    def join(basepath: str, *paths: str) -> str:
        return FileSystems.get_filesystem(basepath).join(basepath, *paths)

    @staticmethod
    def split(path: str) -> tuple[str, str]:
        return FileSystems.get_filesystem(path).split(path)

    @staticmethod
    def mkdirs(path: str) -> None:
        """Create the directory and its parents; IOError if it already exists (as Beam)."""
        FileSystems.get_filesystem(path).mkdirs(path)

    @staticmethod
    def match(patterns: list[str], limits: list[int | None] | None = None) -> list[MatchResult]:
        """A ``MatchResult`` per pattern (Beam's glob syntax: ``*`` within a folder, ``**``
        across folders). All patterns go to the file system of the first one, as in Beam."""
        if isinstance(patterns, str):
            msg = f"FileSystems.match takes a list of patterns, got the string {patterns!r}; use [{patterns!r}]"
            raise TypeError(msg)
        if not patterns:
            return []
        return FileSystems.get_filesystem(patterns[0]).match(list(patterns), limits)

    @staticmethod
    def create(path: str, mime_type: str = "application/octet-stream", compression_type: str = CompressionTypes.AUTO) -> IO[bytes]:
        """A binary stream writing ``path`` (compressed as its extension says, by default)."""
        return FileSystems.get_filesystem(path).create(path, mime_type, compression_type)

    @staticmethod
    def open(path: str, mime_type: str = "application/octet-stream", compression_type: str = CompressionTypes.AUTO) -> IO[bytes]:
        """A binary stream reading ``path`` (decompressed as its extension says, by default)."""
        return FileSystems.get_filesystem(path).open(path, mime_type, compression_type)

    @staticmethod
    def copy(source_file_names: list[str], destination_file_names: list[str]) -> None:
        if not source_file_names:
            return
        FileSystems.get_filesystem(source_file_names[0]).copy(list(source_file_names), list(destination_file_names))

    @staticmethod
    def rename(source_file_names: list[str], destination_file_names: list[str]) -> None:
        if not source_file_names:
            return
        FileSystems.get_filesystem(source_file_names[0]).rename(list(source_file_names), list(destination_file_names))

    @staticmethod
    def exists(path: str) -> bool:
        return FileSystems.get_filesystem(path).exists(path)

    @staticmethod
    def size(path: str) -> int:
        return FileSystems.get_filesystem(path).size(path)

    @staticmethod
    def last_updated(path: str) -> float:
        return FileSystems.get_filesystem(path).last_updated(path)

    @staticmethod
    def checksum(path: str) -> str:
        return FileSystems.get_filesystem(path).checksum(path)

    @staticmethod
    def metadata(path: str) -> FileMetadata:
        return FileSystems.get_filesystem(path).metadata(path)

    @staticmethod
    def delete(paths: list[str]) -> None:
        """Deletes files and folders (recursively); a string instead of a list is an error, as in Beam."""
        if isinstance(paths, str):
            msg = f"Delete passed string argument instead of list: {paths}"
            raise BeamIOError(msg)
        if not paths:
            return
        FileSystems.get_filesystem(paths[0]).delete(list(paths))

    @staticmethod
    def get_chunk_size(path: str) -> int:
        return FileSystems.get_filesystem(path).CHUNK_SIZE

    @staticmethod
    def report_source_lineage(path: str, level: Any = None) -> None:
        """Beam's lineage reporting: sparkbeam records no lineage."""

    @staticmethod
    def report_sink_lineage(path: str, level: Any = None) -> None:
        """Beam's lineage reporting: sparkbeam records no lineage."""


def _scheme_of(filesystem_class: type) -> str | None:
    try:
        scheme = filesystem_class.scheme()  # type: ignore[attr-defined]
    except (NotImplementedError, TypeError):
        return None
    return scheme.lower() if isinstance(scheme, str) else None


# -- what sparkbeam's own file transforms call (beside the registry they look up) ----------


def readable_path(owner: str, path: str) -> str:
    """``path`` checked against the registered file systems (``file://`` becomes a plain
    path); a scheme no file system serves is refused naming ``owner`` and the scheme."""
    try:
        FileSystems.get_filesystem(path)
    except ValueError as error:
        msg = f"{owner}: {error}"
        raise ValueError(msg) from None
    return path[len("file://"):] if path.startswith("file://") else path


def match_files(pattern: str) -> list[str]:
    """The files (not directories) ``pattern`` matches, sorted, through ``FileSystems``."""
    filesystem = FileSystems.get_filesystem(pattern)
    (result,) = filesystem.match([pattern])
    return sorted(m.path for m in result.metadata_list if not filesystem.is_directory(m.path))


def open_compressed(path: str, mode: str, compression: str) -> IO[bytes]:
    """A binary stream for ``path`` (``mode`` 'rb' or 'wb') through ``compression``,
    from the file system ``FileSystems`` picks for it."""
    if "r" in mode:
        return FileSystems.open(path, compression_type=compression)
    return FileSystems.create(path, compression_type=compression)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.filesystems")
