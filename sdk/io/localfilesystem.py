"""Files on local disks and shared mounts: plain paths and ``file://`` URLs.

On Spark, executors open files where they run: a path must be local to every machine that
reads it, or on a mount every executor sees at the same path (NFS, a FUSE mount of object
storage, ...). ``file:///data/x`` is ``/data/x``; ``match`` returns plain paths.

>>> fs = LocalFileSystem()
>>> fs.join("/data", "day-1", "a.txt")
'/data/day-1/a.txt'
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator
from typing import IO, Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.io.filesystem import (
    BeamIOError,
    CompressionTypes,
    FileMetadata,
    FileSystem,
    check_equal_lengths,
    compressed_stream,
)

__all__ = ["LocalFileSystem"]


def _plain(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


class LocalFileSystem(FileSystem):
    """Beam's local file system, serving plain paths and the ``file`` scheme."""

    @classmethod
    def scheme(cls) -> str | None:
        return None

    def join(self, basepath: str, *paths: str) -> str:
        return os.path.join(basepath, *paths)

    def split(self, path: str) -> tuple[str, str]:
        return os.path.split(os.path.abspath(_plain(path)))

    def mkdirs(self, path: str) -> None:
        try:
            os.makedirs(_plain(path))
        except OSError as error:
            raise OSError(error) from error

    def has_dirs(self) -> bool:
        return True

    def is_directory(self, path: str) -> bool:
        return os.path.isdir(_plain(path))

    def _url_dirname(self, url_or_path: str) -> str:
        return os.path.dirname(url_or_path)

    def _list(self, dir_or_prefix: str) -> Iterator[FileMetadata]:
        return self._walk(dir_or_prefix, None)

    def _list_for(self, dir_or_prefix: str, pattern: str) -> Iterable[FileMetadata]:
        # Without ** (and ? or [...], which may match a separator) a pattern cannot reach
        # deeper than its own number of levels: walking further would only cost time.
        rest = pattern[len(dir_or_prefix):]
        if "**" in pattern or re.search(r"[?\[]", rest):
            return self._walk(dir_or_prefix, None)
        return self._walk(dir_or_prefix, rest.strip("/\\").count("/") + 1)

    def _walk(self, directory: str, max_depth: int | None) -> Iterator[FileMetadata]:
        # Beam lists nothing for a pattern with no folder ("*.txt"); the current folder is meant.
        root = _plain(directory) or os.curdir
        if not os.path.exists(root):
            return
        try:
            for folder, subfolders, files in os.walk(root):
                depth = 0 if folder == root else os.path.relpath(folder, root).count(os.sep) + 1
                if max_depth is not None and depth + 1 >= max_depth:
                    subfolders.clear()
                for name in files:
                    path = os.path.join(folder, name) if directory else os.path.relpath(os.path.join(folder, name))
                    try:
                        yield FileMetadata(path, os.path.getsize(path), os.path.getmtime(path))
                    except OSError:
                        continue  # removed while listing (temporary files)
        except Exception as error:
            raise BeamIOError("List operation failed", {directory: error}) from error

    def match(self, patterns: list[str], limits: list[int | None] | None = None) -> Any:
        return super().match([_plain(p) for p in patterns], limits)

    def _path_open(self, path: str, mode: str, compression_type: Any) -> IO[bytes]:
        path = _plain(path)
        compression = FileSystem._get_compression_type(path, compression_type)
        return compressed_stream(open(path, mode), mode, compression, path)

    def create(self, path: str, mime_type: str = "application/octet-stream", compression_type: Any = CompressionTypes.AUTO) -> IO[bytes]:
        directory = os.path.dirname(_plain(path))
        if directory:
            os.makedirs(directory, exist_ok=True)
        return self._path_open(path, "wb", compression_type)

    def open(self, path: str, mime_type: str = "application/octet-stream", compression_type: Any = CompressionTypes.AUTO) -> IO[bytes]:
        return self._path_open(path, "rb", compression_type)

    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        check_equal_lengths("copy", source_file_names, destination_file_names)
        failures: dict[Any, Exception] = {}
        for source, destination in zip(source_file_names, destination_file_names):
            source, destination = _plain(source), _plain(destination)
            try:
                if os.path.isdir(destination):
                    shutil.rmtree(destination)
                elif os.path.exists(destination):
                    os.remove(destination)
                if os.path.isdir(source):
                    shutil.copytree(source, destination)
                else:
                    shutil.copy2(source, destination)
            except OSError as error:
                failures[(source, destination)] = error
        if failures:
            raise BeamIOError("Copy operation failed", failures)

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        """Renames each file; a rename within one local file system is atomic."""
        check_equal_lengths("rename", source_file_names, destination_file_names)
        failures: dict[Any, Exception] = {}
        for source, destination in zip(source_file_names, destination_file_names):
            try:
                os.rename(_plain(source), _plain(destination))
            except OSError as error:
                failures[(source, destination)] = error
        if failures:
            raise BeamIOError("Rename operation failed", failures)

    def exists(self, path: str) -> bool:
        return os.path.exists(_plain(path))

    def size(self, path: str) -> int:
        try:
            return os.path.getsize(_plain(path))
        except OSError as error:
            raise BeamIOError("Size operation failed", {path: error}) from error

    def last_updated(self, path: str) -> float:
        if not self.exists(path):
            msg = f"Path does not exist: {path}"
            raise BeamIOError(msg)
        return os.path.getmtime(_plain(path))

    def checksum(self, path: str) -> str:
        """The file's size, as Beam's local file system answers (no checksum is stored)."""
        if not self.exists(path):
            msg = f"Path does not exist: {path}"
            raise BeamIOError(msg)
        return str(os.path.getsize(_plain(path)))

    def metadata(self, path: str) -> FileMetadata:
        plain = _plain(path)
        if not os.path.exists(plain):
            msg = f"Path does not exist: {path}"
            raise BeamIOError(msg)
        return FileMetadata(plain, os.path.getsize(plain), os.path.getmtime(plain))

    def delete(self, paths: list[str]) -> None:
        """Deletes what each path (or pattern) matches, folders with their contents; a
        path that matches nothing is an error, as in Beam."""
        failures: dict[Any, Exception] = {}
        for result in self.match(list(paths)):
            if not result.metadata_list:
                failures[result.pattern] = OSError(f"No files found to delete under: {result.pattern}")
            for metadata in result.metadata_list:
                try:
                    if os.path.isdir(metadata.path):
                        shutil.rmtree(metadata.path)
                    else:
                        os.remove(metadata.path)
                except OSError as error:
                    failures[metadata.path] = error
        if failures:
            raise BeamIOError("Delete operation failed", failures)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.localfilesystem")
