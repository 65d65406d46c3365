"""Test fixtures: one local SparkSession per test process, and the oracle helpers.

Spark takes seconds to start, so the session is started once per test process (UI off, two
shuffle partitions) and every Spark-backed test in it shares it: the suite runs on two
pytest-xdist workers, each with its own session. Executors run this interpreter. The JVMs
the tests start compile with C1 alone (see ``FAST_JVM`` below).

Before anything is collected, the run stops if the test extra of setup.cfg is not
installed (``tests/dependencies.py``): a missing declared dependency is an error, never a
reason to skip.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# Every JVM the tests start compiles with the client compiler alone: the session below and the
# drivers the tests run as processes (stream jobs, notebook kernels, spark-submit) through
# SPARK_SUBMIT_OPTS, their executor processes (local-cluster, standalone) through a
# spark-defaults.conf. The tests' JVMs live for minutes and run small jobs, where the
# optimising compiler's work does not pay back: about a fifth to a third less CPU for the
# same tests. The xdist workers and the tests' processes inherit both.
FAST_JVM = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", FAST_JVM)
if "SPARK_CONF_DIR" not in os.environ:
    _conf_dir = tempfile.mkdtemp(prefix="sparkbeam-tests-spark-conf-")
    with open(os.path.join(_conf_dir, "spark-defaults.conf"), "w") as _defaults:
        _defaults.write(f"spark.executor.extraJavaOptions {FAST_JVM}\n")
    os.environ["SPARK_CONF_DIR"] = _conf_dir
    atexit.register(shutil.rmtree, _conf_dir, ignore_errors=True)

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


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sparkbeam-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
