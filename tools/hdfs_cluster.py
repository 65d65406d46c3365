"""An HDFS mini-cluster for the tests and benchmarks: one NameNode and one DataNode on loopback.

    from tools.hdfs_cluster import HdfsCluster
    with HdfsCluster() as cluster:          # data in a new private temporary folder
        cluster.url("ck")                   # 'hdfs://127.0.0.1:PORT/ck'

    python tools/hdfs_cluster.py            # starts one and prints its URL until Ctrl-C

What runs: Hadoop's own ``org.apache.hadoop.test.MiniDFSClusterManager`` (the entry point
Hadoop ships to start a ``MiniDFSCluster`` from the command line), from Maven Central's
``org.apache.hadoop:hadoop-client-minicluster`` at the Hadoop version of the installed
PySpark's jars (``hadoop-client-api-X.jar``: the client Spark talks to HDFS with) and what
it depends on (Hadoop's shaded client jars, snappy), with ``slf4j-simple`` for its log. They
are fetched by ``tools/maven_jars.py`` into its per-user cache (about 110 MB the first
time, then reused). No Spark, no jar of the project's own: the cluster is a JVM of its own.

The NameNode takes a port of its choosing and says it in ``details.json`` once the cluster
is up (the DataNode registered); every listener is on 127.0.0.1. Its name and data
folders are in the work folder (``hdfs.minidfs.basedir``), a ``mkdtemp`` folder removed by
``stop()`` unless one was given. The JVM dies with the process that started it
(``PR_SET_PDEATHSIG``), so a crashed test leaves no cluster. Files are written with one
replica (``dfs.replication=1``: one DataNode).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.maven_jars import fetch
from tools.object_store import pyspark_hadoop_version

__all__ = ["HdfsCluster", "minicluster_coordinates", "minicluster_jars"]

_MAIN = "org.apache.hadoop.test.MiniDFSClusterManager"


def minicluster_coordinates() -> str:
    """``hadoop-client-minicluster`` of PySpark's Hadoop version: the NameNode then speaks
    the protocol version of the client in Spark's JVM."""
    return f"org.apache.hadoop:hadoop-client-minicluster:{pyspark_hadoop_version()}"


def minicluster_jars() -> list[Path]:
    """The mini-cluster, its dependencies and a logger, from the cache or Maven."""
    jars = fetch([minicluster_coordinates()])
    slf4j = next((jar.name.removeprefix("slf4j-api-").removesuffix(".jar") for jar in jars if jar.name.startswith("slf4j-api-")), "1.7.36")
    return jars + fetch([f"org.slf4j:slf4j-simple:{slf4j}"], transitive=False)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class HdfsCluster:
    """One NameNode and one DataNode in a JVM of their own, started by ``start()``."""

    def __init__(self, workdir: str | os.PathLike[str] | None = None, *, java: str | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.java = java or shutil.which("java")
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        #: seconds from ``start()`` to a cluster that serves (the JVM's start included)
        self.start_seconds = 0.0

    @property
    def authority(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, *parts: str) -> str:
        """``hdfs://127.0.0.1:PORT/part/part``."""
        path = "/".join(part.strip("/") for part in parts if part)
        return f"hdfs://{self.authority}/{path}"

    @property
    def log_file(self) -> Path:
        if self.workdir is None:
            msg = "the HDFS mini-cluster has no work folder before start()"
            raise RuntimeError(msg)
        return self.workdir / "cluster.log"

    def start(self, timeout: float = 120.0) -> HdfsCluster:
        if self.java is None:
            msg = "the HDFS mini-cluster needs Java (java on PATH), as Spark does: apt-get install openjdk-17-jre-headless"
            raise RuntimeError(msg)
        started = time.monotonic()
        classpath = os.pathsep.join(str(jar) for jar in minicluster_jars())
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="sparkbeam-hdfs-"))  # 0700
        self.workdir.mkdir(parents=True, exist_ok=True)
        details = self.workdir / "details.json"
        details.unlink(missing_ok=True)
        command = [
            self.java, "-Xmx384m", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            # Hadoop's test code puts what it is not told where under this folder
            f"-Dtest.build.data={self.workdir / 'build'}",
            "-cp", classpath, _MAIN,
            "-format", "-datanodes", "1", "-writeDetails", str(details),
            "-D", f"hdfs.minidfs.basedir={self.workdir / 'data'}",
            "-D", "dfs.replication=1",
        ]
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                command, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                msg = f"the HDFS mini-cluster exited with {self.process.returncode}; its log:\n{self.log_tail()}"
                self.process = None
                raise RuntimeError(msg)
            with contextlib.suppress(OSError, ValueError, KeyError):  # not there, or half written
                self.port = int(json.loads(details.read_text())["namenode_port"])
                self.start_seconds = time.monotonic() - started
                return self
            time.sleep(0.1)
        self.stop()
        msg = f"the HDFS mini-cluster did not start within {timeout:.0f} s; its log:\n{self.log_tail()}"
        raise RuntimeError(msg)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except (OSError, RuntimeError):
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL) and remove a work folder ``start()`` made."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> HdfsCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> int:
    with HdfsCluster() as cluster:
        print(f"HDFS {pyspark_hadoop_version()} serving {cluster.url()} (started in {cluster.start_seconds:.1f} s); Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
