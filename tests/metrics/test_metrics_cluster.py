"""Metrics on local-cluster[2,1,1024]: updates made in executor processes reach the
driver, each successful task counted once, a failed and retried attempt only in attempted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster


def run_job(*args: str) -> dict:
    script = os.path.join(os.path.dirname(__file__), "cluster_metrics_job.py")
    completed = subprocess.run(
        [sys.executable, script, "local-cluster[2,1,1024]", *args],
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
    return run_job()


def test_batch_metrics_from_executor_processes(report):
    assert report["batch"] == {
        "Count:elements": [20, 20],
        "Count:values": [[190, 20], [190, 20]],
    }


def test_a_retried_task_is_committed_once_and_its_failed_attempt_only_attempted(report):
    retried = report["retried"]
    committed_seen, attempted_seen = retried["Flaky:seen"]
    assert committed_seen == 10  # the successful attempts: every element once
    # The failed attempt counted element 5 and those before it in its partition.
    assert 11 <= attempted_seen <= 20
    assert retried["Flaky:failures"] == [0, 1]


def test_stream_metrics_per_step_and_in_total(report):
    stream = report["stream"]
    assert stream == report["stream_in_memory"]
    assert stream["totals"]["Count:elements"] == [12, 12]
    assert stream["elements_per_step"] == [4, 4, 4]


def test_with_spark_s_rpc_encrypted_a_failed_attempt_reports_over_tls():
    encrypted = run_job("encrypted")
    assert encrypted["listeners"] == [{"encrypted": True, "certificate": True}]
    committed_seen, attempted_seen = encrypted["retried"]["Flaky:seen"]
    assert committed_seen == 10 and 11 <= attempted_seen <= 20
    assert encrypted["retried"]["Flaky:failures"] == [0, 1]
