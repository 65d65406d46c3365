"""Test fixtures: one local SparkSession per test process, and the oracle helpers.

Spark takes seconds to start, so the session is started once per test process (UI off, two
shuffle partitions) and every Spark-backed test in it shares it: the suite runs on two
pytest-xdist workers, each with its own session. Executors run this interpreter. The JVMs
the tests start compile with C1 alone (``SPARK_SUBMIT_OPTS``, see below).

Before anything is collected, the run stops if the test extra of setup.cfg is not
installed (``tests/dependencies.py``): a missing declared dependency is an error, never a
reason to skip.
"""

from __future__ import annotations

import os
import sys

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# Every Spark driver the tests start (the session below, the stream jobs and notebook kernels
# they run as processes, spark-submit) runs its JVM with the client compiler alone: the
# tests' JVMs live for minutes and run small jobs, where the optimising compiler's work
# does not pay back (about a fifth to a third less CPU for the same tests).
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


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
