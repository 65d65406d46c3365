"""Writing files so that a reader never sees half of them: write to a temporary, commit by rename.

Every writer in sparkbeam that must not expose partial output goes through this module:
the file sinks (batch shards, ``sparkbeam.io.filebased``; a stream's step directories,
``runners/spark/sinks.py``; ``WriteToText`` on Spark, ``runners/spark/textio.py``), the
write-ahead log of real sources (``runners/spark/intake.py``), checkpoints and the step
journal (``runners/spark/checkpoints.py``), and the dependency archive shipped to
executors. The pattern is always the same three parts:

- **write to a temporary** beside the final path (``temporary_beside``,
  ``staging_directory``), named with ``TEMPORARY_MARK`` so that leftovers are recognisable
  (``is_temporary``);
- **commit by rename** (``commit`` for a file or a new directory, ``commit_directory`` to
  replace a directory readers may be listing, ``write_bytes`` for small files in one call);
- **remove leftovers** of attempts that failed or were cut short (``remove``).

Two more for checkpoints: ``private=True`` (``makedirs``, ``write_bytes``) makes what is
created its owner's alone on a local file system (0700, 0600), and ``create_new`` writes a
file only if nothing is there, the one step that decides between racing writers (a lease).

Paths are plain local paths or URLs. Where ``FileSystems`` serves a path with
``LocalFileSystem`` (plain paths, ``file://``), the work is Python's ``os``: renames are
atomic and made durable by an fsync of the folder renamed into, small files are fsynced.
Any other file system registered in ``FileSystems`` (``hdfs://``, ``s3a://``... through
Hadoop's FileSystem API on Spark, see ``runners/spark/hadoop_filesystem.py``) is used
through its own operations, with the atomicity its rename has. ``serve`` hands the plain
paths under a directory to such a file system too, in this process only (a stream's
directories on a Spark Connect server of another machine, served through that server:
``runners/spark/connect/server_files.py``). The helpers that go with
the pattern (``join``, ``makedirs``, ``exists``, ``is_directory``, ``list_names``,
``read_bytes``) let a writer stay free of ``os``.

>>> temporary_beside("/out/scores-step-00000007").startswith("/out/.sparkbeam-temp-scores-step-00000007-")
True
>>> is_temporary(".sparkbeam-temp-scores-1f3a"), is_temporary("scores-00000-of-00001")
(True, False)
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from sparkbeam.io.filesystem import CompressionTypes
from sparkbeam.io.filesystems import FileSystems
from sparkbeam.io.localfilesystem import LocalFileSystem

__all__ = [
    "TEMPORARY_MARK",
    "absolute",
    "batched",
    "commit",
    "commit_directory",
    "create_new",
    "exists",
    "exists_all",
    "is_directory",
    "is_temporary",
    "join",
    "list_names",
    "local_path",
    "makedirs",
    "modified_time",
    "read_bytes",
    "remove",
    "restrict",
    "serve",
    "staging_directory",
    "temporary_beside",
    "write_bytes",
]

_LOG = logging.getLogger(__name__)

#: how every temporary file or directory's name starts (hidden from readers' globs)
TEMPORARY_MARK = ".sparkbeam-temp-"
#: how a directory being replaced is named while the new one is renamed in
_REPLACED_MARK = ".sparkbeam-replaced-"


#: directories whose paths a file system other than Python's serves (``serve``), by their spelling
_SERVED: dict[str, Any] = {}


def serve(directory: str, filesystem: Any) -> Callable[[], None]:
    """Serve ``directory`` and every path under it (spelt as it is, plain or a URL) with
    ``filesystem`` in this process, until the returned function is called."""
    key = directory.rstrip("/") or "/"
    _SERVED[key] = filesystem

    def stop() -> None:
        if _SERVED.get(key) is filesystem:
            del _SERVED[key]

    return stop


def _served(path: str) -> Any:
    for directory, filesystem in _SERVED.items():
        if path == directory or path.startswith(directory if directory.endswith("/") else directory + "/"):
            return filesystem
    return None


def _local(path: str) -> str | None:
    """The ``os`` path of ``path`` if the local file system serves it, else None."""
    if _SERVED and _served(path) is not None:
        return None
    if "://" not in path:
        return path
    if isinstance(FileSystems.get_filesystem(path), LocalFileSystem):
        return path.removeprefix("file://")
    return None


def batched(path: str) -> Any:
    """A context manager: where the file system of ``path`` groups operations (a Spark
    Connect server's files reached through it, one job each), the operations within this
    block that answer nothing (writes, renames, removals) wait and go with the next one
    that answers, or at the block's end: one round trip for several. Elsewhere it changes
    nothing. Within it, what was written is not yet there for other processes."""
    batch = _own(path, "batch")
    return batch() if batch is not None else contextlib.nullcontext()


def local_path(path: str) -> str | None:
    """The ``os`` path of ``path`` if Python's local file system serves it, else None."""
    return _local(path)


def _remote(path: str) -> Any:
    served = _served(path) if _SERVED else None
    return served if served is not None else FileSystems.get_filesystem(path)


def _own(path: str, operation: str) -> Callable[..., Any] | None:
    """The file system's own ``operation`` for ``path``, where it is not Python's local one
    and has one that does the whole step at once (a Spark Connect server's files reached
    through it: one job instead of one per primitive); else None, and the step is made of
    the file system's primitives here."""
    if _local(path) is not None:
        return None
    return getattr(_remote(path), operation, None)


def absolute(path: str) -> str:
    """A plain path made absolute; a URL as it is."""
    return path if "://" in path else os.path.abspath(path)


def join(directory: str, *names: str) -> str:
    return posixpath.join(directory, *names) if "://" in directory else os.path.join(directory, *names)


def _split(path: str) -> tuple[str, str]:
    if "://" in path:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail
    return os.path.split(path)


def temporary_beside(final: str) -> str:
    """A new hidden path in ``final``'s directory, unique to this attempt (the rename that
    commits it then stays within one directory, hence one file system)."""
    directory, name = _split(final)
    return join(directory, f"{TEMPORARY_MARK}{name}-{uuid.uuid4().hex}")


def is_temporary(name: str) -> bool:
    """Whether a file name is a temporary of this module (a leftover if nothing is writing)."""
    return _split(name)[1].startswith((TEMPORARY_MARK, _REPLACED_MARK))


def makedirs(path: str, *, private: bool = False) -> None:
    """Create a directory and its parents; one already there is fine. ``private``: the
    directories it creates have mode 0700 (on a local file system, or one of Hadoop's that
    has permissions)."""
    local = _local(path)
    if local is not None:
        if not private:
            os.makedirs(local, exist_ok=True)
            return
        missing = []
        while local and not os.path.isdir(local):
            missing.append(local)
            local = os.path.dirname(local)
        for folder in reversed(missing):  # os.makedirs gives its mode to the last one only
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                if not os.path.isdir(folder):
                    raise
        return
    fs = _remote(path)
    if hasattr(fs, "makedirs") and private:
        fs.makedirs(path, private=True)
    elif hasattr(fs, "makedirs"):
        fs.makedirs(path)
    elif not fs.exists(path):
        fs.mkdirs(path)


def restrict(path: str) -> None:
    """Make a tree that another writer made (Spark's, on the executors) its owner's alone:
    directories 0700, files 0600. Local file systems only; elsewhere what lies under a
    private directory is as private as the directory (see the README's checkpoints)."""
    local = _local(path)
    if local is None:
        return
    for directory, _, names in os.walk(local):
        os.chmod(directory, 0o700)
        for name in names:
            file_path = os.path.join(directory, name)
            if not os.path.islink(file_path):
                os.chmod(file_path, 0o600)


def exists(path: str) -> bool:
    local = _local(path)
    return os.path.lexists(local) if local is not None else bool(_remote(path).exists(path))


def exists_all(paths: list[str]) -> list[bool]:
    """``exists`` of each path; one round trip where the file system of the first groups
    operations (a Spark Connect server's files reached through it)."""
    own = _own(paths[0], "exists_all") if paths else None
    return list(own(paths)) if own is not None else [exists(path) for path in paths]


def is_directory(path: str) -> bool:
    local = _local(path)
    return os.path.isdir(local) if local is not None else bool(_remote(path).is_directory(path))


def modified_time(path: str) -> float:
    """When ``path`` was last written, in seconds since the epoch (OSError if it is not there)."""
    local = _local(path)
    return os.stat(local).st_mtime if local is not None else float(_remote(path).last_updated(path))


def list_names(directory: str) -> list[str]:
    """The names directly in ``directory`` (none if it does not exist)."""
    local = _local(directory)
    if local is not None:
        try:
            return os.listdir(local)
        except FileNotFoundError:
            return []
    fs = _remote(directory)
    if hasattr(fs, "list_names"):
        return list(fs.list_names(directory))
    prefix = directory.rstrip("/") + "/"
    found = FileSystems.match([prefix + "*"])[0].metadata_list
    return sorted({m.path[len(prefix):].split("/")[0] for m in found if m.path.startswith(prefix)})


def read_bytes(path: str) -> bytes:
    """A small file's content (FileNotFoundError if it is not there)."""
    local = _local(path)
    if local is not None:
        with open(local, "rb") as handle:
            return handle.read()
    own = _own(path, "read_bytes")
    if own is not None:
        return bytes(own(path))
    if not _remote(path).exists(path):
        raise FileNotFoundError(path)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read()


@contextlib.contextmanager
def staging_directory(final: str, *, create: bool = True) -> Iterator[str]:
    """A new temporary directory beside ``final`` (created with its parents unless
    ``create`` is False, for writers that create it themselves, or only once they have
    something to write), removed on leaving with whatever was not committed out of it."""
    temp = temporary_beside(final)
    if create:
        makedirs(temp)
    try:
        yield temp
    except BaseException:
        _remove_after_failure(temp)
        raise
    remove(temp, missing_ok=True)  # committed (renamed away) or never created


def commit(temporary: str, final: str) -> None:
    """Rename a written temporary (a file, or a directory where none is) to its final path,
    replacing a file that is there."""
    local, local_final = _local(temporary), _local(final)
    if local is not None and local_final is not None:
        os.replace(local, local_final)
        # A rename is an entry in its folder: until the folder is synced, a power loss can
        # undo it even though the file's own bytes were synced (journal entries, manifests).
        target_folder = os.path.dirname(os.path.abspath(local_final))
        _sync_folder(target_folder)
        source_folder = os.path.dirname(os.path.abspath(local))
        if source_folder != target_folder:
            _sync_folder(source_folder)
        return
    fs = _remote(temporary)
    if hasattr(fs, "replace"):
        fs.replace(temporary, final)
    else:
        if fs.exists(final) and not fs.is_directory(final):
            fs.delete([final])
        fs.rename([temporary], [final])


def _sync_folder(folder: str) -> None:
    """fsync a local folder, so that the renames in it survive a power loss."""
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    except OSError as error:
        # Some file systems cannot sync a folder (EINVAL: FUSE mounts, some network file
        # systems); their renames are as durable as they make them, nothing more to do.
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(descriptor)


def commit_directory(new_dir: str | None, final_dir: str) -> None:
    """Put ``new_dir`` (or nothing) at ``final_dir`` so that readers never see a mix.

    An existing ``final_dir`` is renamed aside to a hidden name before the new one is
    renamed in, then deleted: a reader sees the old files, then none, then the new ones.
    """
    own = _own(final_dir, "commit_directory")
    if own is not None:
        own(new_dir, final_dir)  # the same steps, where the files are
        return
    directory, name = _split(final_dir)
    aside = join(directory, _REPLACED_MARK + name)
    if exists(aside):  # left by a run that failed between the two renames
        remove(aside, missing_ok=True)
    if exists(final_dir):
        commit(final_dir, aside)
    if new_dir is not None:
        commit(new_dir, final_dir)
    remove(aside, missing_ok=True)  # there only if final_dir was


def write_bytes(path: str, data: bytes, *, private: bool = False) -> None:
    """Write a small file whole or not at all: to a temporary, synced, then committed.
    ``private``: created with mode 0600 on a local file system."""
    own = _own(path, "write_bytes")
    if own is not None:
        own(path, data, private=private)  # the same steps, where the file is
        return
    temp = temporary_beside(path)
    try:
        local = _local(temp)
        if local is not None:
            # A new name of our own (O_EXCL), never a link planted there (O_NOFOLLOW).
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            with os.fdopen(os.open(local, flags, 0o600 if private else 0o666), "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        else:
            with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                handle.write(data)
        commit(temp, path)
    except BaseException:
        _remove_after_failure(temp)
        raise


def _remove_after_failure(temp: str) -> None:
    """Remove a temporary a failed write leaves; if that fails too, say so naming it and
    let the write's own error be the one raised."""
    try:
        remove(temp, missing_ok=True)
    except Exception as error:
        _LOG.warning("could not remove %s after a failed write: %s", temp, error)


def _gone_already(function: Any, path: str, error: Any) -> None:
    """``rmtree``'s error handler: an entry another process removed first is fine; any
    other error (a permission error, a busy mount) is raised."""
    exception = error if isinstance(error, BaseException) else error[1]
    if isinstance(exception, FileNotFoundError):
        return
    if isinstance(exception, OSError) and exception.errno is not None and exception.filename != path:
        # rmtree reports names relative to the folder it is in: name the whole path
        raise type(exception)(exception.errno, exception.strerror, path) from exception
    raise exception


def create_new(path: str, data: bytes) -> bool:
    """Write a small file whole, only if nothing is at ``path``; False if something was.
    The one step that decides between writers who race for the same name (a lease): on a
    local file system a hard link of a written temporary (atomic, and readers never see
    the file half-written, mode 0600); elsewhere the file system's create-if-absent."""
    local = _local(path)
    if local is None:
        fs = _remote(path)
        if hasattr(fs, "create_new"):
            return bool(fs.create_new(path, data))
        if fs.exists(path):  # a file system without create-if-absent: as near as it allows
            return False
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            handle.write(data)
        return True
    temp = temporary_beside(local)
    try:
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600), "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, local)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp)


def remove(path: str, *, missing_ok: bool = False) -> None:
    """Remove a file or a directory tree. ``missing_ok``: a path already gone is fine (the
    caller's leftovers, which an earlier attempt may have removed); otherwise
    FileNotFoundError. Any other error (permission denied, a file system that refused) is
    raised, naming the path, never swallowed."""
    local = _local(path)
    if local is None:
        fs = _remote(path)
        own = getattr(fs, "remove_tree", None)
        if own is not None:
            own(path, missing_ok=missing_ok)
            return
        if not fs.exists(path):
            if missing_ok:
                return
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
        if hasattr(fs, "remove"):
            fs.remove(path)
        else:
            fs.delete([path])
        return
    if os.path.isdir(local) and not os.path.islink(local):
        if sys.version_info >= (3, 12):
            shutil.rmtree(local, onexc=_gone_already)
        else:
            shutil.rmtree(local, onerror=_gone_already)
        return
    try:
        os.remove(local)
    except FileNotFoundError:
        if not missing_ok:
            raise
