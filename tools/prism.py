"""Beam's portable reference runner, Prism, built from source for the tests and benchmarks.

Prism is the runner Beam's own Python SDK uses locally by default (``PrismRunner``); Beam
ships it as a Go program. Beam's runner would download a release binary from a site these
machines do not reach, so this module builds it instead, at the installed apache-beam's
version, from Beam's Go module (``go install github.com/apache/beam/sdks/v2/go/cmd/prism@v<version>``)::

    from tools.prism import prism_binary, PrismServer
    binary = prism_binary()                       # built once per version, then reused
    with PrismServer(binary) as prism:            # one job server on a loopback port
        options = prism.pipeline_flags()          # --runner=PrismRunner --job_endpoint=... LOOPBACK

    python tools/prism.py                         # builds (or finds) it and prints its path

The binary goes to ``$SPARKBEAM_PRISM_CACHE`` or ``$XDG_CACHE_HOME/sparkbeam/prism/<version>/prism``
(``~/.cache/...``), a folder of this user's closed to others (0700, checked on every use: the
binary is code we run). A clean machine builds again (a minute or a few: Go fetches Beam's
module and its dependencies from the Go module proxy, then compiles); a cached one is reused.
Needs ``go`` on PATH, of the version Beam's ``go.mod`` asks for (Beam 2.77: Go 1.26).

Pipelines reach it as Beam's ``PrismRunner`` with ``--job_endpoint`` (so that Beam does not
start, or download, a Prism of its own) and ``--environment_type=LOOPBACK``: the SDK worker
runs in the submitting Python process, no Docker.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.private_cache import cache_root, private_folder

__all__ = ["PRISM_PACKAGE", "PrismBuildError", "PrismServer", "beam_version", "cache_folder", "prism_binary"]

PRISM_PACKAGE = "github.com/apache/beam/sdks/v2/go/cmd/prism"


class PrismBuildError(RuntimeError):
    """Prism could not be built or started (the message says what to install or set)."""


def beam_version() -> str:
    """The installed apache-beam's version (Prism is built at the same one)."""
    try:
        return importlib.metadata.version("apache-beam")
    except importlib.metadata.PackageNotFoundError:
        msg = "Beam's Prism runner is built at the installed apache-beam's version, and apache-beam is not installed: pip install apache-beam"
        raise PrismBuildError(msg) from None


def cache_folder(version: str) -> Path:
    """Where Prism ``version`` is kept: ``<cache>/<version>``, both 0700 and this user's."""
    return _private(_private(cache_root("SPARKBEAM_PRISM_CACHE", "prism")) / version)


def _private(folder: Path) -> Path:
    """``folder`` created 0700 if missing; refused unless it is a directory of this user's
    that no one else can write (another user's binary would run as us)."""
    return private_folder(folder, "the Prism cache", "SPARKBEAM_PRISM_CACHE", PrismBuildError)


def prism_binary(version: str | None = None, *, log: Any = None) -> Path:
    """Prism's binary at ``version`` (default: the installed apache-beam's), from the cache
    or built now with ``go install``; ``log`` (a callable) hears when a build starts and ends."""
    version = version or beam_version()
    folder = cache_folder(version)
    binary = folder / "prism"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go")
    if go is None:
        msg = (
            f"building Beam's Prism runner {version} needs Go (the `go` command) on PATH, "
            f"version 1.26 or newer for Beam 2.77 (see Beam's sdks/go.mod); install Go and retry"
        )
        raise PrismBuildError(msg)
    # A private GOBIN per build, renamed into place: a racing build or a killed one never
    # leaves a half-written binary where the next run would execute it.
    work = Path(tempfile.mkdtemp(prefix="build-", dir=folder))
    try:
        environment = {**os.environ, "GOBIN": str(work)}
        if log is not None:
            log(f"building Prism {version} with {go} into {folder} (first use on this machine)")
        started = time.perf_counter()
        completed = subprocess.run(
            [go, "install", f"{PRISM_PACKAGE}@v{version}"],
            env=environment, capture_output=True, text=True, check=False,
        )
        if completed.returncode != 0:
            tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-15:])
            msg = f"`go install {PRISM_PACKAGE}@v{version}` failed (exit {completed.returncode}):\n{tail}"
            raise PrismBuildError(msg)
        os.replace(work / "prism", binary)
        if log is not None:
            size = binary.stat().st_size / 1e6
            log(f"built Prism {version} in {time.perf_counter() - started:.0f} s: {binary} ({size:.0f} MB)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return binary


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class PrismServer:
    """One Prism job server on a loopback port, shared by every pipeline submitted to it."""

    def __init__(self, binary: str | os.PathLike[str], *, log_path: str | os.PathLike[str] | None = None) -> None:
        self.binary = Path(binary)
        self.log_path = Path(log_path) if log_path is not None else None
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"localhost:{self.port}"

    def pipeline_flags(self) -> list[str]:
        """Beam pipeline flags that submit to this server with the SDK worker in-process.

        A day's ``--job_server_timeout``: Beam opens a job's state and message streams with
        that deadline (300 s by default) before it runs the job, so any longer run (1M events
        on a busy machine) would end in DEADLINE_EXCEEDED instead of its result."""
        return [
            "--runner=PrismRunner",
            f"--job_endpoint={self.endpoint}",
            "--environment_type=LOOPBACK",
            "--job_server_timeout=86400",
        ]

    def start(self, timeout: float = 60.0) -> PrismServer:
        self.port = _free_port()
        with contextlib.ExitStack() as files:
            # The child keeps its own copy of the log's descriptor: ours closes at once.
            log: Any = files.enter_context(open(self.log_path, "ab")) if self.log_path is not None else subprocess.DEVNULL
            self.process = subprocess.Popen(
                [str(self.binary), "--job_port", str(self.port), "--serve_http=false", "--log_level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                msg = f"Prism ({self.binary}) exited with {self.process.returncode} at start" + (
                    f"; its log: {self.log_path}" if self.log_path else ""
                )
                raise PrismBuildError(msg)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return self
            time.sleep(0.1)
        self.stop()
        msg = f"Prism ({self.binary}) did not listen on port {self.port} within {timeout:.0f} s"
        raise PrismBuildError(msg)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> PrismServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build (or find) Beam's Prism runner in sparkbeam's per-user cache.")
    parser.add_argument("--version", default=None, help="Beam version (default: the installed apache-beam's)")
    args = parser.parse_args(argv)
    try:
        binary = prism_binary(args.version, log=lambda line: print(line, file=sys.stderr))
    except PrismBuildError as error:
        print(error, file=sys.stderr)
        return 1
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
