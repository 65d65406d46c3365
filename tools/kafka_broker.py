"""A real Apache Kafka broker for the tests and benchmarks, and Spark's Kafka connector, from Maven Central.

    from tools.kafka_broker import KafkaBroker, connector_jars
    jars = connector_jars()                     # for spark.jars: the connector and what PySpark lacks
    with KafkaBroker(workdir, jars) as broker:  # KRaft, one node, loopback, ephemeral ports
        broker.bootstrap                        # '127.0.0.1:PORT'; broker.sasl_bootstrap for SASL/PLAIN

    python tools/kafka_broker.py               # prints the jars and starts a broker until Ctrl-C

What is fetched (by ``tools/maven_jars.py``, into its per-user cache, again on a clean machine):

- Spark's connector, ``org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark's version>``.
  Spark publishes it with each release; when Maven Central does not serve the installed
  PySpark's version yet, the newest served one of ``FALLBACK_CONNECTOR`` (or
  ``$SPARKBEAM_TEST_KAFKA_CONNECTOR``) is used and ``connector_jars`` says so: sparkbeam then
  refuses it unless ``SPARKBEAM_KAFKA_CONNECTOR_VERSION`` names it (see README, "Kafka").
  Only the jars PySpark's own ``jars/`` folder lacks go on ``spark.jars``.
- The broker, ``org.apache.kafka:kafka_2.13`` at the version of the ``kafka-clients`` that
  connector depends on, so that the tests talk to the broker Spark's clients were built for,
  with ``slf4j-simple`` for its log (a file in its work folder).

The broker runs as ``java -cp <jars> kafka.Kafka server.properties`` after formatting its log
folder with ``kafka.tools.StorageTool``. It listens on 127.0.0.1 only: PLAINTEXT, SASL_PLAINTEXT
(PLAIN, user ``sparkbeam``/``sparkbeam-secret``) and its controller, on ports the kernel chose
free a moment before. Records are kept forever (the tests write old timestamps). The JVM dies
with the process that started it (``PR_SET_PDEATHSIG``), so a crashed test leaves no broker.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.maven_jars import MavenFetchError, cache_root, fetch

__all__ = [
    "FALLBACK_CONNECTOR",
    "QUIET",
    "SASL_PASSWORD",
    "SASL_USER",
    "ConnectorJars",
    "KafkaBroker",
    "connector_jars",
]

_LOG = logging.getLogger(__name__)

#: The newest connector Maven Central served (2026-11) while PySpark 4.3.0 was already on PyPI.
FALLBACK_CONNECTOR = "4.2.0"
SASL_USER = "sparkbeam"
SASL_PASSWORD = "sparkbeam-secret"
#: librdkafka's own log lines (a refused connection while the broker starts...) off stderr
QUIET = {"log_level": 0}
_JAR_VERSION = re.compile(r"^(?P<name>.+?)-(?P<version>\d+\.[^-]*(?:-[A-Za-z0-9.]+)?)\.jar$")


def _artifact(jar: Path) -> str:
    match = _JAR_VERSION.match(jar.name)
    return match.group("name") if match else jar.stem


def _version(jars: Sequence[Path], artifact: str) -> str | None:
    for jar in jars:
        match = _JAR_VERSION.match(jar.name)
        if match and match.group("name") == artifact:
            return match.group("version")
    return None


class ConnectorJars(list):
    """The jars for ``spark.jars`` (a list of paths), with the connector's and its clients' versions."""

    def __init__(self, jars: Sequence[Path], version: str, clients_version: str, spark_version: str) -> None:
        super().__init__(jars)
        self.version = version
        self.clients_version = clients_version
        self.spark_version = spark_version

    @property
    def matches_spark(self) -> bool:
        return self.version == self.spark_version

    def spark_conf(self) -> str:
        return ",".join(str(jar) for jar in self)


def _pyspark() -> tuple[str, set[str]]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return pyspark.__version__, {_artifact(jar) for jar in jars.glob("*.jar")}


@contextlib.contextmanager
def _one_fetch_at_a_time() -> Any:
    """The test workers all start their sessions at once: on a clean machine one Maven
    fetches while the others wait and then find the cache filled (Maven 3.8 does not lock
    its local repository against another Maven writing the same files)."""
    root = cache_root()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = open(root / ".kafka.lock", "a")  # noqa: SIM115 (closed below, after the fetch)
    except OSError as error:
        msg = f"cannot use the Maven jar cache {root}: {error}; set SPARKBEAM_MAVEN_CACHE to a folder of yours"
        raise MavenFetchError(msg) from error
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def connector_jars() -> ConnectorJars:
    """Spark's Kafka connector for the installed PySpark (or the fallback, see module docs)."""
    with _one_fetch_at_a_time():
        return _connector_jars()


def _connector_jars() -> ConnectorJars:
    spark_version, shipped = _pyspark()
    wanted = [spark_version]
    fallback = os.environ.get("SPARKBEAM_TEST_KAFKA_CONNECTOR", FALLBACK_CONNECTOR)
    if fallback != spark_version:
        wanted.append(fallback)
    failure: MavenFetchError | None = None
    for version in wanted:
        try:
            jars = fetch([f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"])
        except MavenFetchError as error:
            if not any(words in str(error) for words in ("Could not find artifact", "was not found in")):
                raise  # no network, no Maven: not a reason to take another version
            failure = error
            continue
        if version != spark_version:
            _LOG.warning(
                "Maven Central serves no Kafka connector for PySpark %s; using spark-sql-kafka-0-10 %s "
                "(accepted by sparkbeam only with SPARKBEAM_KAFKA_CONNECTOR_VERSION=%s)",
                spark_version, version, version,
            )
        clients = _version(jars, "kafka-clients")
        if clients is None:
            msg = f"spark-sql-kafka-0-10 {version} brought no kafka-clients jar: {[jar.name for jar in jars]}"
            raise MavenFetchError(msg)
        extra = [jar for jar in jars if _artifact(jar) not in shipped]
        return ConnectorJars(extra, version, clients, spark_version)
    msg = f"Maven Central serves no Kafka connector for PySpark {spark_version} (tried {', '.join(wanted)}): {failure}"
    raise MavenFetchError(msg)


def broker_jars(clients_version: str) -> list[Path]:
    """The broker of ``clients_version`` and a logger for it."""
    with _one_fetch_at_a_time():
        jars = fetch([f"org.apache.kafka:kafka_2.13:{clients_version}"])
        slf4j = _version(jars, "slf4j-api") or "1.7.36"
        return jars + fetch([f"org.slf4j:slf4j-simple:{slf4j}"], transitive=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class KafkaBroker:
    """One KRaft node (broker and controller) in ``workdir``, started by ``start()``."""

    def __init__(self, workdir: str | os.PathLike[str], clients_version: str, *, java: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.clients_version = clients_version
        self.java = java or shutil.which("java") or "java"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = self.sasl_port = self.controller_port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    def _properties(self) -> str:
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{SASL_USER}" password="{SASL_PASSWORD}" user_{SASL_USER}="{SASL_PASSWORD}";'
        )
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
                f"log.dirs={self.workdir / 'data'}",
                "num.partitions=1",
                "auto.create.topics.enable=false",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                # the tests write records stamped in the past: time-based retention would delete them
                "log.retention.ms=-1",
                "",
            ]
        )

    def start(self, timeout: float = 120.0) -> KafkaBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port, self.sasl_port, self.controller_port = _free_port(), _free_port(), _free_port()
        config = self.workdir / "server.properties"
        config.write_text(self._properties())
        classpath = os.pathsep.join(str(jar) for jar in broker_jars(self.clients_version))
        jvm = [self.java, "-Xmx512m", "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
        data = self.workdir / "data"
        if not (data / "meta.properties").exists():
            cluster = "-"
            while cluster.startswith("-"):  # StorageTool would take it for an option (Kafka's own ids never start so)
                cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            formatted = subprocess.run(
                [*jvm, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)],
                capture_output=True, text=True, check=False,
            )
            if formatted.returncode != 0:
                msg = f"formatting the Kafka broker's log folder failed:\n{formatted.stdout}{formatted.stderr}"
                raise RuntimeError(msg)
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [*jvm, "-cp", classpath, "kafka.Kafka", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
            )
        self._wait_until_serving(timeout)
        return self

    def _wait_until_serving(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                msg = f"the Kafka broker exited with {self.process.returncode}; its log:\n{self.log_tail()}"
                raise RuntimeError(msg)
            with contextlib.suppress(Exception):
                metadata = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET}).list_topics(timeout=2)
                if metadata.brokers:
                    return
            time.sleep(0.3)
        self.stop()
        msg = f"the Kafka broker did not serve {self.bootstrap} within {timeout:.0f} s; its log:\n{self.log_tail()}"
        raise RuntimeError(msg)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL); its log folder stays for ``start()`` again."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL: the broker goes away as if its machine did."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- for tests and benchmarks -------------------------------------------------------
    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})

    def create_topic(self, name: str, partitions: int = 1, **config: str) -> str:
        """A new topic (``message.timestamp.type='LogAppendTime'`` and such as ``config``)."""
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config={k.replace("_", "."): v for k, v in config.items()})
        admin = self.admin()  # kept while its futures are pending: a dropped client cancels them
        for future in admin.create_topics([topic], operation_timeout=30).values():
            future.result()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until every partition has its leader
            metadata = admin.list_topics(name, timeout=5).topics.get(name)
            if metadata is not None and metadata.error is None and len(metadata.partitions) == partitions and all(
                p.leader >= 0 for p in metadata.partitions.values()
            ):
                return name
            time.sleep(0.1)
        msg = f"topic {name} has no leader for every partition after 30 s"
        raise RuntimeError(msg)

    def producer(self, **config: Any) -> Any:
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, **QUIET, **config})

    def consumer(self, **config: Any) -> Any:
        from confluent_kafka import Consumer

        settings = {"bootstrap.servers": self.bootstrap, "group.id": f"sparkbeam-tests-{uuid.uuid4().hex}", **QUIET}
        return Consumer({**settings, "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})


def main() -> int:
    import tempfile

    logging.basicConfig(level=logging.INFO)
    jars = connector_jars()
    print(f"spark.jars={jars.spark_conf()}")
    with tempfile.TemporaryDirectory(prefix="sparkbeam-kafka-") as workdir, KafkaBroker(workdir, jars.clients_version) as broker:
        print(f"Kafka {jars.clients_version} serving {broker.bootstrap} (SASL/PLAIN: {broker.sasl_bootstrap}); Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
