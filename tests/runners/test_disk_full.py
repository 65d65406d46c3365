"""A local disk of Spark's that fills up during a stream fails the step cleanly, and the run
resumes from its last checkpoint (#27, bad input: "a state store that runs out of local disk").

Keyed state that does not fit in the executors' memory spills to their local directories
(``backend.KEPT``, MEMORY_AND_DISK), as do the shuffles' files. Here ``disk_full_job.py``
streams with ``spark.local.dir`` on a small file system of its own (a tmpfs mounted in a
user and mount namespace of the job's: ``unshare``, no privileges needed where the kernel
allows unprivileged user namespaces), which fills up after the first checkpoint: the run
stops with a short ``ClusterFailureError`` naming the full disk and the checkpoint to resume
from. The same job run again on the same checkpoint directory, with room, resumes and every
key's count and sum is exact: nothing lost, nothing counted twice.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.runners import disk_full_job

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

CHECKOUT = str(pathlib.Path(__file__).resolve().parents[2])
#: room for the state of the first steps (about 0.6 MB a step, held twice during a step, and
#: the shuffles'), not for all eight
LOCAL_DISK = "8m"


def _namespaces_work() -> str | None:
    """Why a tmpfs cannot be mounted in a namespace of our own here, or None."""
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt 2>&1 || mount -t tmpfs -o size=1m tmpfs /tmp"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"this kernel does not let an unprivileged process mount a tmpfs in its own namespaces: {(probe.stderr or probe.stdout).strip()[:200]}"
    return None


def _run(work: pathlib.Path, local_dir: pathlib.Path | None) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))}
    job = [sys.executable, disk_full_job.__file__, str(work)]
    if local_dir is None:
        command = job
    else:
        local_dir.mkdir()
        mount = f"mount -t tmpfs -o size={LOCAL_DISK} tmpfs '{local_dir}' && exec \"$@\""
        command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, "sh", *job, str(local_dir)]
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=840, check=False)
    assert finished.returncode == 0, finished.stderr[-4000:]
    (line,) = [line for line in finished.stdout.splitlines() if line.startswith(("RESULT ", "FAILED "))]
    kind, _, payload = line.partition(" ")
    return {"kind": kind, **json.loads(payload)}


def test_a_full_local_disk_stops_the_stream_cleanly_and_it_resumes_exactly(tmp_path):
    why_not = _namespaces_work()
    if why_not is not None:
        pytest.skip(why_not)
    work = tmp_path / "work"
    full = _run(work, tmp_path / "small-disk")
    assert full["kind"] == "FAILED", "the stream fit in the small disk: make the disk smaller or the state larger"
    assert full["type"] == "ClusterFailureError"
    message = full["message"]
    assert message.startswith("the run stopped: a local disk of Spark's is full (No space left on device)"), message
    assert "spark.local.dir" in message
    checkpoint = str(work / "ck")
    assert f"run again with --checkpoint_dir={checkpoint} to resume at step " in message, message
    assert "\tat " not in message and len(message) < 700
    # it stopped after a checkpoint, so the resumed run starts from one
    assert any(name.endswith(".json") for name in os.listdir(work / "ck" / "checkpoints"))

    resumed = _run(work, None)
    assert resumed["kind"] == "RESULT", resumed
    assert resumed["got"] == resumed["expected"]
    assert len(resumed["got"]) == disk_full_job.spill_job.KEYS
    assert all(count == disk_full_job.FILES for count, _ in resumed["got"].values())
