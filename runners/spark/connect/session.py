"""Which runs go through Spark Connect, and the Connect session they use.

A run goes through Spark Connect when ``--spark_remote=sc://host:port`` names a server,
else when Spark's own ``SPARK_REMOTE`` does, else when this thread has an active Connect
``SparkSession`` (one the user made with ``SparkSession.builder.remote(...)``).

The session is made with Connect's own builder (``pyspark.sql.connect.session``), which
leaves this process's classic PySpark alone: PySpark's generic builder would mark the
whole process as a Connect client. For the same reason the backend uses Connect's own
``functions`` module, never ``pyspark.sql.functions``, which picks its implementation from
that process-wide mark.

Runs at one URL share one client session, made at the first and kept for the process's
life: the server starts Python workers per client session (each session's UDFs are
isolated), and starting them again for every run cost about 10 s of a loaded 2-core
machine's first stage.

A server that cannot be reached is refused before the first step, naming the setting
that chose it (``--spark_remote`` or ``SPARK_REMOTE``): a TCP probe first, since Connect's
client retries an unreachable server for minutes, then one request for its version.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import attrs

from sparkbeam.runners.core.lowering.settings import RunSettings

__all__ = [
    "MIN_SERVER_VERSION",
    "ConnectTarget",
    "connect_session",
    "connect_target",
    "host_port",
    "made_active",
    "release_sessions",
]

#: Spark's default Connect port, when a URL gives none
DEFAULT_PORT = 15002
#: the oldest server whose Python APIs the backend uses (mapInArrow, localCheckpoint)
MIN_SERVER_VERSION = (4, 0)
#: seconds the probe waits for the server's port
PROBE_SECONDS = 10.0

#: URL -> the client session of the runs at that URL (see the module docs)
_SESSIONS: dict[str, Any] = {}


@attrs.frozen
class ConnectTarget:
    """Where a Connect run goes: a URL and the setting that named it, or a session."""

    url: str | None
    #: what chose it, as the user named it: "--spark_remote", "SPARK_REMOTE", or "the
    #: active Spark Connect session"
    named_by: str
    session: Any = None


def _active_connect_session() -> Any:
    # Only a process that made a Connect session has imported its module: importing it
    # otherwise would need the client's requirements (sparkbeam[connect]) for nothing.
    module = sys.modules.get("pyspark.sql.connect.session")
    if module is None:
        return None
    return module.SparkSession.getActiveSession()


def connect_target(settings: RunSettings) -> ConnectTarget | None:
    """Where the run goes through Spark Connect, or None for a classic session."""
    if settings.spark_remote:
        return ConnectTarget(settings.spark_remote, "--spark_remote")
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        # Checked as --spark_remote is; PySpark's own "local" form starts a server in this
        # process, which the runner does not do behind the user's back.
        RunSettings.from_options({"spark_remote": remote})
        if settings.spark_master:
            msg = "SPARK_REMOTE and --spark_master both name where Spark runs: unset one (a Connect server has its own master)"
            raise ValueError(msg)
        return ConnectTarget(remote, "SPARK_REMOTE")
    session = _active_connect_session()
    if session is not None:
        return ConnectTarget(None, "the active Spark Connect session", session)
    return None


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url.split(";", 1)[0].replace("sc://", "http://", 1))
    return parts.hostname or "localhost", parts.port or DEFAULT_PORT


def _shown(url: str) -> str:
    """The URL without its parameters, which may hold a token."""
    return url.split("/;", 1)[0]


def connect_session(target: ConnectTarget) -> Any:
    """The Connect session of ``target``, refused with a message naming its setting when
    the server cannot be reached, or runs a Spark older than ``MIN_SERVER_VERSION``."""
    if target.session is not None:
        return _checked(target.session, target)
    try:
        from pyspark.sql.connect.session import SparkSession
    except ImportError as error:
        msg = f"{target.named_by} asks for Spark Connect, whose client needs more than PySpark: pip install 'sparkbeam[connect]' ({error})"
        raise ImportError(msg) from None
    url = target.url or ""
    kept = _SESSIONS.get(url)
    if kept is not None and not kept.is_stopped:
        return _checked(kept, target)
    host, port = host_port(url)
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            pass
    except OSError as error:
        msg = (
            f"{target.named_by}={_shown(url)}: no Spark Connect server answers at {host}:{port} ({error}); "
            "start one (PySpark's sbin/start-connect-server.sh) or fix the URL"
        )
        raise ConnectionError(msg) from None
    session = _checked(_made_quietly(SparkSession, url), target)
    if not _SESSIONS:
        atexit.register(release_sessions)
    _SESSIONS[url] = session
    return session


def release_sessions() -> None:
    """Release the kept sessions while the interpreter still runs: left to the session's
    ``__del__`` at shutdown, closing its gRPC channel waits on threads already gone, and the
    process hangs at exit instead of ending (seen with the example run against a server).
    Also called before stopping a server this process started (the tests' fixture): a
    session released after its server is gone retries for about ten minutes."""
    for url in list(_SESSIONS):
        session = _SESSIONS.pop(url)
        with contextlib.suppress(Exception):
            session.stop()


@contextlib.contextmanager
def made_active(session: Any) -> Iterator[None]:
    """``session`` as this thread's active Connect session meanwhile, the previous one put
    back after: PySpark binds the DataFrame a ``localCheckpoint`` returns to the active
    session (``SparkSession.active()``), whichever made it."""
    session_class = type(session)
    previous = getattr(session_class._active_session, "session", None)
    session_class._active_session.session = session
    try:
        yield
    finally:
        session_class._active_session.session = previous


def _made_quietly(session_class: Any, url: str) -> Any:
    """A new client session of ``url`` that does not become the thread's active Connect
    session nor the process's default one: Connect's builder makes it both where none was,
    and the active one would then choose Spark Connect for the user's later runs that name
    no server (``connect_target``)."""
    with session_class._lock:
        previous_active = getattr(session_class._active_session, "session", None)
        previous_default = session_class._default_session
        session = session_class.builder.remote(url).create()
        session_class._active_session.session = previous_active
        session_class._default_session = previous_default
    return session


def _checked(session: Any, target: ConnectTarget) -> Any:
    where = f"{target.named_by}={_shown(target.url)}" if target.url else target.named_by
    try:
        version = session.version
    except Exception as error:
        msg = f"{where}: the Spark Connect server did not answer: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        raise ConnectionError(msg) from None
    numbers = tuple(int(part) for part in version.split("-", 1)[0].split(".")[:2] if part.isdigit())
    if numbers < MIN_SERVER_VERSION:
        wanted = ".".join(map(str, MIN_SERVER_VERSION))
        msg = f"{where}: the server runs Spark {version}; sparkbeam's Spark Connect backend needs Spark {wanted} or newer"
        raise RuntimeError(msg)
    return session
