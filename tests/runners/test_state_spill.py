"""Keyed state larger than the storage memory spills to the executors' local disk (#27 must-work 1).

The backend keeps every RDD it caches at ``backend.KEPT`` (MEMORY_AND_DISK). Under PySpark's
default, MEMORY_ONLY, a state partition that does not fit is not cached at all and every step
that reads it computes it again from its lineage (``spill_job.py`` with MEMORY_ONLY: no
partition of the state cached, at any step). Here a stream's state outgrows a session whose
memory manager allows 1 MiB for storage and execution (``spill_job.MEMORY``; its own process,
as these settings are fixed when a session starts): every partition of the state, and of
what its checkpoints' lineage cut reads back, stays cached, on disk, and the result is exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.runners import spill_job

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def test_keyed_state_larger_than_storage_memory_stays_cached_on_disk_and_the_result_is_exact(tmp_path):
    command = [sys.executable, spill_job.__file__, str(tmp_path / "work")]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540, check=False)
    assert finished.returncode == 0, finished.stderr[-4000:]
    (line,) = [line for line in finished.stdout.splitlines() if line.startswith("RESULT ")]
    report = json.loads(line.removeprefix("RESULT "))
    assert report["got"] == report["expected"]
    assert len(report["got"]) == spill_job.KEYS
    steps = report["steps"]
    assert len(steps) >= spill_job.FILES
    kept = [rdd for step in steps for rdd in step]
    assert {rdd["level"] for rdd in kept} == {"Disk Memory Serialized 1x Replicated"}
    # No partition of the state was dropped, so none was computed again when read.
    assert [(rdd["name"], rdd["cached"]) for rdd in kept] == [(rdd["name"], rdd["partitions"]) for rdd in kept]
    # The state outgrew the 1 MiB the session allows, and what did not fit went to disk; the
    # state the checkpoints' lineage cut read back was kept too.
    assert max(sum(rdd["disk"] for rdd in step) for step in steps) > 2**20
    assert any("read back" in rdd["name"] and rdd["disk"] > 0 for rdd in kept)
