"""Folders of this user's own under the system temporary directory, which no other user can
block, read or redirect.

The temporary directory (``/tmp``) is shared by every local user, so a fixed name in it
belongs to whoever creates it first. sparkbeam keeps what outlives a run there in one
folder per user, ``<tmp>/sparkbeam-<uid>/``, with a folder per purpose inside
(``logs/``: Spark's log files; ``dependencies/``: the archives shipped to executors):

- each folder is created with mode 0700 by ``mkdir`` itself (never more open, not even for
  a moment), and on every use is checked to be a real directory (not a symlink), owned by
  this user, with no access for group or others; the temporary directory itself must keep
  others from renaming it away (not writable by others, or sticky as ``/tmp`` is);
- a folder that fails the check is never used: ``folder_for`` says why, naming it, and the
  run goes on in a new folder of its own (``mkdtemp``), so a folder another user made
  first cannot stop anyone's run;
- files are created with ``O_EXCL | O_NOFOLLOW`` (mode 0600) and opened with
  ``O_NOFOLLOW``, so a planted symlink is refused, never followed.

>>> private_root("/tmp", 1000)
'/tmp/sparkbeam-1000'
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Callable
from typing import IO

__all__ = [
    "UnsafeFolderError",
    "create_private_file",
    "folder_for",
    "open_private_file",
    "private_folder",
    "private_root",
    "remove_older_than",
]

_LOG = logging.getLogger(__name__)

#: flags that keep ``os.open`` from following a symlink in the last component
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class UnsafeFolderError(PermissionError):
    """A folder sparkbeam would keep private is not: another user could read or change it."""


def private_root(temp_dir: str, uid: int) -> str:
    """The per-user folder under ``temp_dir``: named by uid, so users never share one."""
    return os.path.join(temp_dir, f"sparkbeam-{uid}")


def _check_temp_dir(temp_dir: str) -> None:
    """Others may create names in the temporary directory, but must not rename ours away."""
    mode = os.stat(temp_dir).st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        msg = (
            f"the temporary directory {temp_dir} is writable by other users without the sticky bit "
            f"(mode {stat.S_IMODE(mode):04o}), so they could replace sparkbeam's folders in it; "
            "set TMPDIR to a folder of your own"
        )
        raise UnsafeFolderError(msg)


def _check_folder(path: str, uid: int) -> None:
    """A real directory of ``uid``'s with no access for anyone else, or UnsafeFolderError."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        problem = "is a symlink" if stat.S_ISLNK(info.st_mode) else "is not a directory"
    elif info.st_uid != uid:
        problem = f"belongs to uid {info.st_uid}, not to this user (uid {uid})"
    elif stat.S_IMODE(info.st_mode) & 0o077:
        problem = f"has mode {stat.S_IMODE(info.st_mode):04o}, open to other users (it must be 0700: chmod 700 it)"
    else:
        return
    msg = f"sparkbeam's private folder {path} {problem}; it is not used. Remove it, or set TMPDIR to a folder of your own"
    raise UnsafeFolderError(msg)


def _make_private(path: str, uid: int) -> None:
    # mkdir applies the mode at creation (the umask can only take bits away): the folder is
    # never open to others, not even before a chmod. One already there, whoever made it,
    # must pass the same check.
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    _check_folder(path, uid)


def private_folder(purpose: str, *, temp_dir: str | None = None) -> str:
    """``<tmp>/sparkbeam-<uid>/<purpose>``, created private if missing and checked on every
    call (the root too); UnsafeFolderError, naming the folder and what is wrong, if any
    part of it could be read or changed by another user."""
    temp_dir = temp_dir if temp_dir is not None else tempfile.gettempdir()
    uid = os.geteuid()
    _check_temp_dir(temp_dir)
    root = private_root(temp_dir, uid)
    _make_private(root, uid)
    folder = os.path.join(root, purpose)
    _make_private(folder, uid)
    return folder


def folder_for(purpose: str, *, temp_dir: str | None = None) -> tuple[str, bool]:
    """This user's private folder for ``purpose`` and True; or, if that folder fails its
    check, a new folder of this run's own (``mkdtemp``, 0700) and False, after a warning
    that names the refused folder (so another user's folder never stops a run)."""
    try:
        return private_folder(purpose, temp_dir=temp_dir), True
    except UnsafeFolderError as refusal:
        fallback = tempfile.mkdtemp(prefix=f"sparkbeam-{purpose}-", dir=temp_dir)
        _LOG.warning("%s. This run uses %s instead.", refusal, fallback)
        return fallback, False


def create_private_file(path: str) -> IO[bytes]:
    """A new file at ``path``, mode 0600, open for writing; FileExistsError if anything
    (a symlink included) is already there."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    return os.fdopen(descriptor, "wb")


def open_private_file(path: str, mode: str = "rb") -> IO[bytes]:
    """An existing file of this user's, not followed through a symlink: ``rb`` to read,
    ``ab`` to append. UnsafeFolderError if it is not a regular file of this user's with
    no access for others (OSError from ``open`` itself, e.g. ELOOP for a symlink)."""
    flags = os.O_RDONLY if mode == "rb" else os.O_WRONLY | os.O_APPEND
    descriptor = os.open(path, flags | _NOFOLLOW)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
            msg = (
                f"{path} is not a private file of this user's (owner uid {info.st_uid}, mode "
                f"{stat.S_IMODE(info.st_mode):04o}); it is not used. Remove it"
            )
            raise UnsafeFolderError(msg)
        return os.fdopen(descriptor, mode)
    except BaseException:
        os.close(descriptor)
        raise


def remove_older_than(
    folder: str, max_age_seconds: float, ours: Callable[[str], bool], now: float
) -> list[str]:
    """Delete the files in ``folder`` whose names ``ours`` accepts and that were last
    changed more than ``max_age_seconds`` before ``now``; returns the names removed. A file that cannot be
    removed is logged, naming it, and left (cleaning up must not fail a run)."""
    removed = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if not ours(entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime <= max_age_seconds:
                    continue
                os.remove(entry.path)
            except FileNotFoundError:
                continue  # another run removed it first
            except OSError as error:
                _LOG.warning("could not remove the old file %s: %s", entry.path, error)
                continue
            removed.append(entry.name)
    return sorted(removed)
