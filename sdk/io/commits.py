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

The functions work on local paths (or a mount every executor shares), through ``os``.
Other file systems (``hdfs://``, ``s3a://``, through Hadoop's FileSystem API) would be
backed here, behind the same functions, so no writer has to change.

>>> temporary_beside("/out/scores-step-00000007").startswith("/out/.sparkbeam-temp-scores-step-00000007-")
True
>>> is_temporary(".sparkbeam-temp-scores-1f3a"), is_temporary("scores-00000-of-00001")
(True, False)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator

__all__ = [
    "TEMPORARY_MARK",
    "commit",
    "commit_directory",
    "is_temporary",
    "remove",
    "staging_directory",
    "temporary_beside",
    "write_bytes",
]

#: how every temporary file or directory's name starts (hidden from readers' globs)
TEMPORARY_MARK = ".sparkbeam-temp-"
#: how a directory being replaced is named while the new one is renamed in
_REPLACED_MARK = ".sparkbeam-replaced-"


def temporary_beside(final: str) -> str:
    """A new hidden path in ``final``'s directory, unique to this attempt (the rename that
    commits it then stays within one directory, hence one file system)."""
    directory, name = os.path.split(final)
    return os.path.join(directory, f"{TEMPORARY_MARK}{name}-{uuid.uuid4().hex}")


def is_temporary(name: str) -> bool:
    """Whether a file name is a temporary of this module (a leftover if nothing is writing)."""
    return os.path.basename(name).startswith((TEMPORARY_MARK, _REPLACED_MARK))


@contextlib.contextmanager
def staging_directory(final: str) -> Iterator[str]:
    """A new temporary directory beside ``final`` (created with its parents), removed on
    leaving with whatever was not committed out of it."""
    temp = temporary_beside(final)
    os.makedirs(temp)
    try:
        yield temp
    finally:
        remove(temp)


def commit(temporary: str, final: str) -> None:
    """Rename a written temporary (a file, or a directory where none is) to its final path,
    replacing a file that is there."""
    os.replace(temporary, final)


def commit_directory(new_dir: str | None, final_dir: str) -> None:
    """Put ``new_dir`` (or nothing) at ``final_dir`` so that readers never see a mix.

    An existing ``final_dir`` is renamed aside to a hidden name before the new one is
    renamed in, then deleted: a reader sees the old files, then none, then the new ones.
    """
    aside = os.path.join(os.path.dirname(final_dir), _REPLACED_MARK + os.path.basename(final_dir))
    if os.path.lexists(aside):  # left by a run that failed between the two renames
        shutil.rmtree(aside)
    if os.path.lexists(final_dir):
        os.replace(final_dir, aside)
    if new_dir is not None:
        os.replace(new_dir, final_dir)
    shutil.rmtree(aside, ignore_errors=True)


def write_bytes(path: str, data: bytes) -> None:
    """Write a small file whole or not at all: to a temporary, synced, then committed."""
    temp = temporary_beside(path)
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        commit(temp, path)
    except BaseException:
        remove(temp)
        raise


def remove(path: str) -> None:
    """Remove a leftover file or directory; one already gone is fine."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
