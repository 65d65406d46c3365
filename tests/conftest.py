"""Test fixtures: one local SparkSession per test process, and the oracle helpers.

Spark takes seconds to start, so the session is started once per test process (UI off, two
shuffle partitions) and every Spark-backed test in it shares it: the suite runs on two
pytest-xdist workers, each with its own session. Executors run this interpreter. The JVMs
the tests start compile with C1 alone (see ``FAST_JVM`` below).

Kafka tests (marker ``kafka``) share one broker per test process, started from Maven
Central's jars by ``tools/kafka_broker.py`` when the first of them runs; a process that
collected any of them starts its session with Spark's Kafka connector. That is every xdist
worker of the default run (each collects the whole suite): four jars on the session's class
path cost nothing measurable, where a separate driver for the Kafka tests would cost a
second Spark start (seconds of a 2-core machine) and could not use the ``spark`` fixture.

HDFS tests (marker ``hdfs``) share one HDFS mini-cluster per test process, also from Maven
Central's jars (``tools/hdfs_cluster.py``), started when the first of them runs; the
session needs nothing added for them.

Tests marked ``prism`` share one Prism job server per test process (Beam's portable
reference runner, built from Beam's Go module by ``tools/prism.py`` and cached per user).

Before anything is collected, the run stops if the test extra of setup.cfg is not
installed (``tests/dependencies.py``): a missing declared dependency is an error, never a
reason to skip.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import sys
import tempfile
import warnings

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# Every JVM the tests start compiles with the client compiler alone: the session below and the
# drivers the tests run as processes (stream jobs, notebook kernels, spark-submit) through
# SPARK_SUBMIT_OPTS, their executor processes (local-cluster, standalone) through the
# executors' Java options, passed to every PySpark driver by PYSPARK_SUBMIT_ARGS. The tests'
# JVMs live for minutes and run small jobs, where the optimising compiler's work does not pay
# back: about a fifth to a third less CPU for the same tests. pytest_configure adds a class
# archive (tools/jvm_archive.py), which saves most of each JVM's start. The xdist workers and
# the tests' processes inherit both. (Not through a spark-defaults.conf in SPARK_CONF_DIR:
# that folder is on the JVMs' class path, and a non-empty folder there turns the archive off.)
FAST_JVM = "-XX:TieredStopAtLevel=1"
_OWN_JVM_OPTIONS = not any(name in os.environ for name in ("SPARK_SUBMIT_OPTS", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS"))


def _set_jvm_options(options: str) -> None:
    import shlex

    os.environ["SPARK_SUBMIT_OPTS"] = options
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--conf {shlex.quote(f'spark.executor.extraJavaOptions={options}')} pyspark-shell"


if _OWN_JVM_OPTIONS:
    _set_jvm_options(FAST_JVM)

# Beam's Pipeline makes a folder in the temporary directory for every pipeline and removes it
# only when the pipeline runs (``apache_beam/pipeline.py``); the oracle and translation tests
# build many Beam pipelines they never run. So whatever a test process puts in the temporary
# directory without a place of its own goes into a private folder of that process, removed
# when it ends: a test run leaves nothing behind, and removes nothing another run wrote.
# pytest's own ``tmp_path`` folders stay under the system's (kept for a failure's inspection,
# and reachable by the other users of tests/other_user.py).
SYSTEM_TEMP = tempfile.gettempdir()
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", SYSTEM_TEMP)
os.environ.setdefault("SPARKBEAM_TESTS_SYSTEM_TEMP", SYSTEM_TEMP)
tempfile.tempdir = tempfile.mkdtemp(prefix="sparkbeam-tests-tmp-")
atexit.register(shutil.rmtree, tempfile.tempdir, ignore_errors=True)

# Checkpoints are sealed with a key kept outside them (runners/spark/checkpoint_key.py): the
# tests and the stream jobs they start share one key of the test run, not the user's own.
if "SPARKBEAM_CHECKPOINT_KEY_FILE" not in os.environ:
    import secrets

    _key_dir = tempfile.mkdtemp(prefix="sparkbeam-tests-key-")
    _key_file = os.path.join(_key_dir, "checkpoint-key")
    with os.fdopen(os.open(_key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as _key:
        _key.write(secrets.token_hex(32))
    os.environ["SPARKBEAM_CHECKPOINT_KEY_FILE"] = _key_file
    atexit.register(shutil.rmtree, _key_dir, ignore_errors=True)


def pytest_configure(config):
    from tests.dependencies import unmet_test_requirements

    problem = unmet_test_requirements()
    if problem is not None:
        raise pytest.UsageError(problem)
    # Once per run, in the process that starts the xdist workers (or the only one), before
    # any JVM: the class archive, built on first use and cached (tools/jvm_archive.py).
    if _OWN_JVM_OPTIONS and not hasattr(config, "workerinput") and os.environ.get("SPARKBEAM_TESTS_JVM_ARCHIVE") != "0":
        from tools.jvm_archive import archive_options, build_archive

        _set_jvm_options(f"{FAST_JVM} {archive_options(build_archive())}".strip())


# Whether this run collected tests marked ``objectstore`` or ``kafka``: then the session below
# starts with Hadoop's s3a connector or Spark's Kafka connector on its class path (jars are
# fixed when a session starts; tests/runners/test_object_store.py and tools/kafka_broker.py).
_HADOOP_AWS_WANTED = False
_KAFKA_COLLECTED = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    global _HADOOP_AWS_WANTED, _KAFKA_COLLECTED
    # Tests marked ``full`` or ``kafka_full``, or listed in tests/full_matrix.py, run in
    # tests/full_matrix.sh (tests/kafka_full.sh for the Kafka ones), which set
    # SPARKBEAM_FULL_MATRIX=1: the README's test command stays within its time. (First among
    # the hooks, so that ``-m full`` sees the marks added here.)
    from tests.full_matrix import FULL_MATRIX

    for item in items:
        if item.nodeid in FULL_MATRIX or item.get_closest_marker("kafka_full"):
            item.add_marker(pytest.mark.full)
    if os.environ.get("SPARKBEAM_FULL_MATRIX") != "1":
        later = pytest.mark.skip(reason="in the full matrix: tests/full_matrix.sh")
        for item in items:
            if item.get_closest_marker("full"):
                item.add_marker(later)
    _HADOOP_AWS_WANTED = any(item.get_closest_marker("objectstore") for item in items)
    # The slowest files first (``--dist loadfile`` with ``--no-loadscope-reorder`` hands files
    # to the workers in this order): a file of two minutes started last keeps one worker busy
    # while the other has nothing left. Within a file the order is unchanged.
    from tests.slow_files import SLOW_FILES

    rank = {path: index for index, path in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    _KAFKA_COLLECTED = any(item.get_closest_marker("kafka") for item in items)


@pytest.fixture(scope="session")
def kafka_jars():
    """Spark's Kafka connector and the jars PySpark lacks for it (tools/kafka_broker.py),
    fetched from Maven Central once and cached. When Maven Central serves no connector of
    the installed PySpark's version yet, the fallback's version is the one sparkbeam is told
    to accept (SPARKBEAM_KAFKA_CONNECTOR_VERSION), here and in the jobs the tests start."""
    from tools.kafka_broker import connector_jars

    jars = connector_jars()
    if not jars.matches_spark:
        os.environ["SPARKBEAM_KAFKA_CONNECTOR_VERSION"] = jars.version
    return jars


@pytest.fixture(scope="session")
def kafka(tmp_path_factory, kafka_jars):
    """One Kafka broker (KRaft, loopback, ephemeral ports) for this test process's Kafka
    tests; stopped at the end (and killed with the process if it dies first)."""
    from tools.kafka_broker import KafkaBroker

    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), kafka_jars.clients_version).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def connect_server(request, tmp_path_factory):
    """One Spark Connect server for this test process (tools/connect_server.py: pip's
    PySpark, a child process on 127.0.0.1 at a free port, so that each xdist worker has its
    own and the classic session below keeps working beside it), started when the first test
    asks for it (about 14 s on the 2-core machine) and stopped at the end. In a process that
    collected Kafka tests it starts with Spark's Kafka connector, as the classic session does."""
    from sparkbeam.runners.spark.connect.session import release_sessions
    from tools.connect_server import ConnectServer

    # The tests' pipelines use helpers of the tests package (Nexmark's models, the examples'
    # drivers), which the server's Python workers import from this checkout, as a user's
    # server imports their code's modules.
    checkout = str(pathlib.Path(__file__).resolve().parents[1])
    conf = {}
    if _KAFKA_COLLECTED:
        from tools.maven_jars import MavenFetchError

        try:
            conf["spark.jars"] = request.getfixturevalue("kafka_jars").spark_conf()
        except MavenFetchError as error:
            warnings.warn(f"the tests' Spark Connect server starts without Spark's Kafka connector: {error}", stacklevel=1)
    server = ConnectServer(tmp_path_factory.mktemp("connect-server"), conf=conf, python_path=(checkout,)).start()
    yield server
    release_sessions()  # while the server answers: released after it, each retried for minutes at exit
    server.stop()


@pytest.fixture(params=["classic", "connect"])
def spark_session_kind(request):
    """The pipeline options that run a test on each kind of Spark session: the classic
    session (the ``spark`` fixture), and Spark Connect (``--spark_remote`` at the
    ``connect_server`` fixture's server). A test taking it runs once on each."""
    if request.param == "classic":
        request.getfixturevalue("spark")
        return {}
    return {"spark_remote": request.getfixturevalue("connect_server").url}


@pytest.fixture(scope="session")
def hdfs():
    """One HDFS mini-cluster (a NameNode and a DataNode on loopback, tools/hdfs_cluster.py)
    for this test process's HDFS tests; stopped, its data removed, at the end (and killed
    with the process if it dies first). PySpark's own jars hold the HDFS client."""
    from tools.hdfs_cluster import HdfsCluster

    cluster = HdfsCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def prism(tmp_path_factory):
    """One Prism job server (Beam's portable reference runner, tools/prism.py) for this test
    process, built at the installed apache-beam's version on first use and cached per user.
    Skips only when it is not built yet and `go` is missing: every other failure fails."""
    from tools.prism import PrismServer, beam_version, cache_folder, prism_binary

    if shutil.which("go") is None and not (cache_folder(beam_version()) / "prism").exists():
        pytest.skip("Beam's Prism runner is built from source by tools/prism.py, and `go` is not on PATH")
    server = PrismServer(prism_binary(), log_path=tmp_path_factory.mktemp("prism") / "prism.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(request):
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("sparkbeam-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
    )
    jars = []
    if _HADOOP_AWS_WANTED:
        from tools.object_store import hadoop_aws_jars

        jars.extend(str(jar) for jar in hadoop_aws_jars())
    if _KAFKA_COLLECTED:
        # Jars are fixed when a session starts: a worker that will run Kafka tests starts its
        # one session with the connector (four jars on the class path; no cost otherwise).
        # Without Maven or Maven Central the other tests still run: the Kafka tests fail on
        # the kafka_jars fixture's own error.
        from tools.maven_jars import MavenFetchError

        try:
            jars.append(request.getfixturevalue("kafka_jars").spark_conf())
        except MavenFetchError as error:
            warnings.warn(f"the tests' SparkSession starts without Spark's Kafka connector: {error}", stacklevel=1)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
