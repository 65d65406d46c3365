"""The per-user cache folders of the tools (Maven jars, Prism, the JVM class archive).

What a cache holds runs as this user's code (jars and a class archive in our JVMs, a binary),
so a cache folder must be this user's and closed to others: created 0700 when missing, and
refused on every use otherwise, naming the setting that moves it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def cache_root(setting: str, name: str) -> Path:
    """The folder the environment variable ``setting`` names, else
    ``$XDG_CACHE_HOME/sparkbeam/<name>`` (``~/.cache/sparkbeam/<name>``)."""
    configured = os.environ.get(setting)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparkbeam" / name


class CacheFolderError(RuntimeError):
    """A cache folder is not a directory of this user's closed to others."""


def private_folder(
    folder: Path, what: str, setting: str, error: type[Exception] = CacheFolderError
) -> Path:
    """``folder`` (with its parents) created 0700 if missing; raises ``error`` unless it is a
    directory of this user's that no one else can write."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        msg = (
            f"{what} {folder} is not a directory of this user's closed to others "
            f"(owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}); remove it or set {setting}"
        )
        raise error(msg)
    return folder
