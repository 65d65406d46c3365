"""The runner on local-cluster[2,1,1024]: executors are separate processes, so nothing may
lean on the driver's Python state (functions, DoFns and engine state all travel pickled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster


def test_batch_example_a_stream_and_a_requirements_file_on_a_local_cluster():
    script = os.path.join(os.path.dirname(__file__), "cluster_job.py")
    completed = subprocess.run(
        [sys.executable, script, "local-cluster[2,1,1024]"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    (line,) = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    report = json.loads(line.removeprefix("RESULT "))
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
