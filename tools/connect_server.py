"""A local Spark Connect server from pip's PySpark, for the tests (and by hand).

    from tools.connect_server import ConnectServer
    with ConnectServer(workdir) as server:   # loopback only, a port the kernel chose free
        server.url                           # 'sc://127.0.0.1:PORT'

    python tools/connect_server.py           # starts one and prints its URL until Ctrl-C
    python tools/connect_server.py --kafka   # the same with Spark's Kafka connector (tools/kafka_broker.py)

The server is Spark's own ``org.apache.spark.sql.connect.service.SparkConnectServer`` run by
PySpark's ``bin/spark-submit`` as a child process (what ``sbin/start-connect-server.sh
--wait`` runs, without its pid and log files under ``$SPARK_HOME``): ``local[2]``, UI off,
two shuffle partitions, its gRPC port bound to 127.0.0.1 alone, its Python workers this
interpreter (so that they import sparkbeam from where the tests do). Its log is a file in
``workdir``. The JVM dies with the process that started it (``PR_SET_PDEATHSIG``), so a
crashed test leaves no server behind.

Why a child process and not ``SparkSession.builder.remote("local[*]")``: that starts the
server inside this process's JVM and marks the whole process as a Connect client
(``SPARK_CONNECT_MODE_ENABLED``), after which PySpark's classic session, which the other
tests of the same process share, no longer works; and it binds the server to every
interface, on the fixed port 15002, which two test processes cannot share.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["ConnectServer", "ConnectServerError"]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServerError(RuntimeError):
    """The server did not start; the message quotes the end of its log."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.setsid()  # a Ctrl-C in the terminal reaches the tests, which stop the server


def _spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


class ConnectServer:
    """One Spark Connect server in ``workdir``, started by ``start()``."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        master: str = "local[2]",
        conf: dict[str, str] | None = None,
        python_path: tuple[str, ...] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.master = master
        self.conf = dict(conf or {})
        #: folders put first on the server's Python workers' ``sys.path``: where the code of
        #: the pipelines it runs lives (a Connect server runs each session's Python workers in
        #: a folder of that session's own, so the client's working directory is not on it)
        self.python_path = tuple(python_path)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        #: seconds from start() until the port accepted a connection
        self.started_in: float | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "connect-server.log"

    def command(self) -> list[str]:
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            **self.conf,
        }
        command = [str(_spark_submit()), "--class", SERVER_CLASS, "--name", "sparkbeam-tests-connect", "--master", self.master]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return command

    def start(self, timeout: float = 240.0) -> ConnectServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        if self.python_path:
            env["PYTHONPATH"] = os.pathsep.join([*self.python_path, *filter(None, [env.get("PYTHONPATH")])])
        # A client's own settings must not leak into the server it starts.
        for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "PYSPARK_GATEWAY_PORT"):
            env.pop(name, None)
        began = time.monotonic()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent
            )
        while time.monotonic() - began < timeout:
            if self.process.poll() is not None:
                self.process = None
                msg = f"the Spark Connect server exited while starting; the end of its log ({self.log}):\n{self._log_tail()}"
                raise ConnectServerError(msg)
            if _accepts("127.0.0.1", self.port):
                self.started_in = time.monotonic() - began
                return self
            time.sleep(0.25)
        self.stop()
        msg = f"the Spark Connect server did not listen on 127.0.0.1:{self.port} within {timeout:.0f} s; the end of its log ({self.log}):\n{self._log_tail()}"
        raise ConnectServerError(msg)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the server's process group (its JVM and Python workers), then SIGKILL."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        group = os.getpgid(process.pid)
        os.killpg(group, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            process.wait()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextlib.contextmanager
def server_for(url: str | None, prefix: str = "sparkbeam-connect-bench-") -> Iterator[str]:
    """The Connect server at ``url`` for the block, or, without one, a loopback server
    started here for it: this process's client sessions of it are released while it still
    answers (released after it stops, each would retry for minutes at exit), then it stops."""
    if url is not None:
        yield url
        return
    import tempfile

    server = ConnectServer(tempfile.mkdtemp(prefix=prefix)).start()
    try:
        yield server.url
    finally:
        from sparkbeam.runners.spark.connect.session import release_sessions

        release_sessions()
        server.stop()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="Start a loopback Spark Connect server from pip's PySpark until Ctrl-C.")
    parser.add_argument(
        "--kafka", action="store_true",
        help="with Spark's Kafka connector on its class path (fetched by tools/maven_jars.py into the user's cache)",
    )
    arguments = parser.parse_args()
    conf = {}
    if arguments.kafka:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tools.kafka_broker import connector_jars

        conf["spark.jars"] = connector_jars().spark_conf()
        print(f"spark.jars={conf['spark.jars']}", flush=True)
    with ConnectServer(tempfile.mkdtemp(prefix="sparkbeam-connect-"), conf=conf) as server:
        print(f"{server.url} (started in {server.started_in:.1f} s; log: {server.log}); Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
