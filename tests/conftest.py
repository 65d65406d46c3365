"""Test fixtures: one local SparkSession per test process, and the oracle helpers.

Spark takes seconds to start, so the session is started once per test process (UI off, two
shuffle partitions) and every Spark-backed test in it shares it: the suite runs on two
pytest-xdist workers, each with its own session. Executors run this interpreter.

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
