"""The key that authenticates a stream's checkpoints, kept outside the checkpoint directory.

Where it comes from, first found:

1. ``--checkpoint_key_file=PATH``;
2. the ``SPARKBEAM_CHECKPOINT_KEY_FILE`` environment variable;
3. the user's own key, ``$XDG_CONFIG_HOME/sparkbeam/checkpoint-key`` (``~/.config/...``
   without ``XDG_CONFIG_HOME``), created on first use: a new random 256-bit key in a file
   of mode 0600, in a folder of mode 0700.

A key file holds 64 hexadecimal digits (whitespace around them is ignored). It is read
without following a symbolic link, and refused unless it belongs to this user (or root)
and no one else can read or write it: whoever can read it can forge checkpoints, whoever
can write it can swap it. A named file that does not exist is refused, not created: on a
cluster where the driver may restart on another machine, every machine must name the same
key, and a silently new one would refuse the checkpoint only later.
"""

from __future__ import annotations

import os
import secrets
import stat

__all__ = ["ENVIRONMENT_VARIABLE", "KeyFileError", "default_key_path", "load_key"]

ENVIRONMENT_VARIABLE = "SPARKBEAM_CHECKPOINT_KEY_FILE"
_KEY_BYTES = 32
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MAKE = "(umask 077; python -c 'import secrets; print(secrets.token_hex(32))' > {path})"


class KeyFileError(ValueError):
    """The checkpoint key file is missing, unsafe or not a key."""


def default_key_path() -> str:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "sparkbeam", "checkpoint-key")


def load_key(given: str | None = None) -> tuple[bytes, str]:
    """The checkpoint key and the file it came from (see the module docs)."""
    if given:
        return _read(given, "--checkpoint_key_file"), given
    named = os.environ.get(ENVIRONMENT_VARIABLE)
    if named:
        return _read(named, ENVIRONMENT_VARIABLE), named
    path = default_key_path()
    _private_folder(os.path.dirname(path))
    try:
        return _read(path, "the user's checkpoint key"), path
    except FileNotFoundError:
        pass
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    except FileExistsError:  # another run made it meanwhile
        return _read(path, "the user's checkpoint key"), path
    with os.fdopen(handle, "w") as key_file:
        key_file.write(secrets.token_hex(_KEY_BYTES) + "\n")
        key_file.flush()
        os.fsync(key_file.fileno())
    return _read(path, "the user's checkpoint key"), path


def _private_folder(folder: str) -> None:
    """Create the key's folder 0700, or check that the one there is this user's alone."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        found = os.lstat(folder)
    except OSError as error:
        msg = f"cannot create the folder of the checkpoint key, {folder}: {error}; pass --checkpoint_key_file=PATH instead"
        raise KeyFileError(msg) from None
    if not stat.S_ISDIR(found.st_mode):
        msg = f"the folder of the checkpoint key, {folder}, is not a directory (a link?); remove it or pass --checkpoint_key_file=PATH"
        raise KeyFileError(msg)
    _check_owner_and_mode(folder, found, "folder", "700")


def _check_owner_and_mode(path: str, found: os.stat_result, what: str, mode: str) -> None:
    owners = {0, os.geteuid()} if hasattr(os, "geteuid") else None
    if owners is not None and found.st_uid not in owners:
        msg = f"the checkpoint key {what} {path} belongs to another user (uid {found.st_uid}); use a key {what} of your own"
        raise KeyFileError(msg)
    if found.st_mode & 0o077:
        msg = (
            f"the checkpoint key {what} {path} can be read or written by other users (mode "
            f"{stat.S_IMODE(found.st_mode):o}): anyone who reads the key can forge checkpoints; chmod {mode} {path}"
        )
        raise KeyFileError(msg)


def _read(path: str, origin: str) -> bytes:
    try:
        handle = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        if origin == "the user's checkpoint key":
            raise
        msg = f"{origin}: the checkpoint key file {path} does not exist; make one with {_MAKE.format(path=path)}"
        raise KeyFileError(msg) from None
    except OSError as error:
        msg = f"{origin}: cannot open the checkpoint key file {path} ({error}; a symbolic link is not followed)"
        raise KeyFileError(msg) from None
    with os.fdopen(handle, "rb") as key_file:
        found = os.fstat(key_file.fileno())
        if not stat.S_ISREG(found.st_mode):
            msg = f"{origin}: the checkpoint key file {path} is not a regular file"
            raise KeyFileError(msg)
        _check_owner_and_mode(path, found, "file", "600")
        text = key_file.read(4096)
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        msg = f"{origin}: {path} is not a checkpoint key (64 hexadecimal digits); make one with {_MAKE.format(path=path)}"
        raise KeyFileError(msg)
    return key
