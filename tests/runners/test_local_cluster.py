"""The runner on local-cluster[2,1,1024]: executors are separate processes, so nothing may
lean on the driver's Python state (functions, DoFns and engine state all travel pickled).
One job (``cluster_job.py``) runs everything here in one process, since each local cluster
starts a driver and two executor JVMs: the batch example, a stream, a requirements file, a
bounded source, and metrics updated in executor processes (each successful task counted
once, a failed and retried attempt only in attempted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster

JOB = os.path.join(os.path.dirname(__file__), "cluster_job.py")


def run_cluster_job(*args: str) -> dict:
    """Runs cluster_job.py on local-cluster[2,1,1024] with ``args``; the report it printed."""
    completed = subprocess.run(
        [sys.executable, JOB, "local-cluster[2,1,1024]", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    (line,) = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def report() -> dict:
    return run_cluster_job()


def test_batch_example_a_stream_and_a_requirements_file_on_a_local_cluster(report):
    batch = report["batch"]
    assert batch["rows"] == batch["expected_rows"] == 48  # 8 teams x 6 hours
    assert batch["total"] == batch["expected_total"]
    assert report["streaming_spark"] == report["streaming_engine"]
    assert report["streaming_spark"]  # early and on-time panes were emitted
    assert report["watermarks_monotonic"]
    # --requirements_file reached executors in other processes (through their PYTHONPATH)
    assert report["requirements"] == [0, 3, 6, 9, 12, 15]
    # Read(BoundedSource) with a source defined in __main__: three bundles, three partitions
    assert report["bounded_read"] == {"values": [i * i for i in range(12)], "partitions": 3}


def test_batch_metrics_from_executor_processes(report):
    assert report["metrics"]["batch"] == {
        "Count:elements": [20, 20],
        "Count:values": [[190, 20], [190, 20]],
    }


def test_a_retried_task_is_committed_once_and_its_failed_attempt_only_attempted(report):
    retried = report["metrics"]["retried"]
    committed_seen, attempted_seen = retried["Flaky:seen"]
    assert committed_seen == 10  # the successful attempts: every element once
    # The failed attempt counted element 5 and those before it in its partition.
    assert 11 <= attempted_seen <= 20
    assert retried["Flaky:failures"] == [0, 1]


def test_stream_metrics_per_step_and_in_total(report):
    stream = report["metrics"]["stream"]
    assert stream == report["metrics"]["stream_in_memory"]
    assert stream["totals"]["Count:elements"] == [12, 12]
    assert stream["elements_per_step"] == [4, 4, 4]
