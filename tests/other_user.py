"""Run part of a test as another local user: a forked child that drops to an unprivileged uid.

The tests run as root on CI; a child process forked from the test switches to another uid
with ``os.setgid``/``os.setuid`` (no supplementary groups) and runs a function of the test,
whose JSON-able result (or exception type and message) comes back through a pipe — never
a pickle, since the other user's process writes it. A fork rather than a new interpreter:
the interpreter and the code under test may sit where that uid cannot read (``/root``),
and the child needs nothing it has not imported already.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: two unprivileged uids (nobody, and one that no account uses)
FIRST_UID, SECOND_UID = 65534, 65533

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="switching a child process to another uid (os.setuid) needs root; CI runs the tests as root",
)


class InChild(Exception):
    """What the function raised in the other user's process: ``kind`` is its type's name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _child(uid: int, function: Callable[..., Any], args: tuple[Any, ...], write_end: int) -> None:
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        caught = _Warnings()
        logging.getLogger("sparkbeam").addHandler(caught)
        try:
            answer: dict[str, Any] = {"value": function(*args)}
        except Exception as error:
            answer = {"error": [type(error).__name__, str(error)]}
        answer["warnings"] = caught.messages
        data = json.dumps(answer).encode()
        while data:
            data = data[os.write(write_end, data):]
    finally:
        os._exit(0)


def run_as(uid: int, function: Callable[..., Any], *args: Any, timeout: float = 60.0) -> tuple[Any, list[str]]:
    """``function(*args)`` run as ``uid``: what it returned and the warnings sparkbeam logged
    meanwhile; raises InChild with what it raised."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(uid, function, args, write_end)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                msg = f"the process run as uid {uid} did not finish within {timeout} s"
                raise TimeoutError(msg)
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if not chunks:
        msg = f"the process run as uid {uid} ended without an answer"
        raise RuntimeError(msg)
    answer = json.loads(b"".join(chunks))
    if "error" in answer:
        raise InChild(*answer["error"])
    return answer["value"], answer["warnings"]


@contextlib.contextmanager
def shared_temp_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A new folder that every user may create names in, sticky as ``/tmp`` is, made the
    temporary directory of this process (and of the children it forks)."""
    # the system's temporary directory: the test process's own (tests/conftest.py) is private
    base = os.environ.get("SPARKBEAM_TESTS_SYSTEM_TEMP") or tempfile.gettempdir()
    shared = tempfile.mkdtemp(prefix="sparkbeam-test-users-", dir=base)
    os.chmod(shared, 0o777 | stat.S_ISVTX)
    monkeypatch.setattr(tempfile, "tempdir", shared)
    try:
        yield shared
    finally:
        shutil.rmtree(shared)
