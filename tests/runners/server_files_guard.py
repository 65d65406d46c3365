"""Runs a Spark Connect stream as if its server were on another machine, and proves it.

The tests' Connect server runs on this machine, so a stream's directories would be reached
directly; ``through_server`` makes the runner take the server for one elsewhere
(``server_files.server_is_elsewhere``), so every file operation the client makes under
the stream's directories goes through the server (``runners/spark/connect/server_files.py``).
Meanwhile every direct access of this process to a path under ``watched`` (Python's audit
events for opening, listing, creating, renaming, linking, removing and changing files, and
``os.stat``/``os.lstat``, which ``os.path.exists``/``isdir`` call) is recorded and refused:
a client on another machine would have found nothing there. Evidence that the operations
went through the server: ``jobs`` counts the server's file jobs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from sparkbeam.runners.spark.connect import server_files

#: path prefixes the client must not touch directly while a guard is on
_WATCHED: list[str] = []
#: the direct accesses met (event and path)
FOUND: list[str] = []
#: a file each access met is also appended to at once (a killed process leaves it there)
_RECORD: list[str] = []
_HOOKED = False


class DirectAccessError(RuntimeError):
    """The client touched a watched directory directly."""


def _hits(value: Any) -> str | None:
    if isinstance(value, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(value))
        if any(path.startswith(prefix) for prefix in _WATCHED):
            return path
    return None


def _refuse(what: str, path: str) -> None:
    FOUND.append(f"{what} {path}")
    watched = _WATCHED[:]
    _WATCHED.clear()  # the record's own writing is not one
    try:
        for record in _RECORD:
            with open(record, "a") as handle:
                handle.write(f"{what} {path}\n")
    finally:
        _WATCHED[:] = watched
    raise DirectAccessError(f"the client touched {path} directly ({what})")


def _audit(event: str, arguments: tuple[Any, ...]) -> None:
    if not _WATCHED or not (event == "open" or event.startswith(("os.", "shutil."))):
        return
    for argument in arguments:
        path = _hits(argument)
        if path is not None:
            _refuse(event, path)


def _guarded(function: Any) -> Any:
    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _WATCHED and _hits(path) is not None:
            _refuse(function.__name__, str(_hits(path)))
        return function(path, *args, **kwargs)

    stat.__wrapped__ = function  # type: ignore[attr-defined]
    return stat


@contextlib.contextmanager
def through_server(*watched: str, record: str | None = None) -> Iterator[list[int]]:
    """Within it, Connect streams reach their directories through the server, and direct
    access to a path starting with one of ``watched`` fails (and is recorded in ``FOUND``,
    and appended to the file ``record``). Yields a one-item list: the server's file jobs
    run meanwhile."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)  # for the process's life: inert while nothing is watched
        _HOOKED = True
    jobs = [0]
    elsewhere, run = server_files.server_is_elsewhere, server_files.ServerFileSystem.run
    stat, lstat = os.stat, os.lstat

    def counted(self: Any, *operations: Any) -> Any:
        jobs[0] += 1
        return run(self, *operations)

    server_files.server_is_elsewhere = lambda target: True
    server_files.ServerFileSystem.run = counted
    os.stat, os.lstat = _guarded(stat), _guarded(lstat)
    _RECORD[:] = [] if record is None else [record]
    _WATCHED[:] = list(watched)
    try:
        yield jobs
    finally:
        _WATCHED.clear()
        _RECORD.clear()
        os.stat, os.lstat = stat, lstat
        server_files.server_is_elsewhere = elsewhere
        server_files.ServerFileSystem.run = run
