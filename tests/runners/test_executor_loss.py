"""Executor loss on a real standalone cluster (#27 item 4): a master and two workers from
pip's PySpark; once the stream of ``stream_job.py`` has checkpointed (and so pruned its
write-ahead log), one worker is killed with SIGKILL together with its executor. The driver
is not restarted: Spark rebuilds the lost partitions of the keyed state from their lineage,
which starts at the last checkpoint's files, and the stream ends by itself with exactly the
output plain Python computes (totals, timer counts and running sequences, each once).

The kill loop over random moments is ``benchmarks/executor_loss.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.runners.test_standalone_cluster import command, free_port, master_state
from tests.runners.test_stream_recovery import (
    committed,
    dead_letters_written,
    stateful_outputs_are_exact,
    steps_with_data,
    totals,
    write_input_and_counts,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

HERE = os.path.dirname(__file__)
MASTER = '"{spark_home}/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 --port {port} --webui-port {webui}'
WORKER = (
    '"{spark_home}/bin/spark-class" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 1 --memory 1g '
    "--webui-port {worker_webui} --work-dir {work} spark://127.0.0.1:{port}"
)
STREAM = (
    "python {job} --input={incoming} --output={out} --checkpoint_dir={ck} --available_now --timeline_log={log} "
    "--spark_master=spark://127.0.0.1:{port}"
)
#: steps with data before the kill: after the first checkpoint (every 3 steps), which
#: removes the log of the steps before it, and before the last of the 6 files
KILL_AFTER = 4


def wait_for(condition, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):  # not serving its status yet
            if condition():
                return
        time.sleep(0.5)
    pytest.fail(f"the standalone cluster: {what} not within {seconds:.0f} s")


@pytest.fixture
def two_workers(tmp_path):
    """A master and two one-core workers, each worker in a session of its own (so that a
    SIGKILL to its group takes its executor too); the values and the workers' processes."""
    import pyspark

    values = {"spark_home": os.path.dirname(pyspark.__file__), "port": free_port(), "webui": free_port()}
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "")}
    processes: list[subprocess.Popen] = []

    def spawn(name: str, template: str, **more) -> subprocess.Popen:
        with open(tmp_path / f"{name}.log", "w") as log:
            process = subprocess.Popen(command(template, **values, **more), stdout=log, stderr=log, env=env, start_new_session=True)
        processes.append(process)
        return process

    try:
        spawn("master", MASTER)
        wait_for(lambda: master_state(values["webui"])["status"] == "ALIVE", "the master up")
        workers = [spawn(f"worker-{i}", WORKER, worker_webui=free_port(), work=tmp_path / f"work-{i}") for i in range(2)]
        wait_for(lambda: master_state(values["webui"])["aliveworkers"] == 2, "two workers registered")
        yield values, workers
    finally:
        for process in reversed(processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def test_a_stream_survives_a_worker_and_its_executor_killed_without_a_driver_restart(two_workers, tmp_path):
    values, workers = two_workers
    expected, counts = write_input_and_counts(str(tmp_path / "incoming"))
    paths = {"incoming": tmp_path / "incoming", "out": tmp_path / "out", "ck": tmp_path / "ck", "log": tmp_path / "log.jsonl"}
    process = subprocess.Popen(
        command(STREAM, **values, **paths, job=os.path.join(HERE, "cluster_stream_job.py")),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    try:
        deadline = time.monotonic() + 400
        while steps_with_data(str(paths["log"])) < KILL_AFTER:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the stream ended or stalled before the kill:\n{process.communicate(timeout=60)[0].decode()[-3000:]}")
            time.sleep(0.05)
        os.killpg(workers[0].pid, signal.SIGKILL)  # the worker, its executor and its Python workers
        workers[0].wait()
        assert process.poll() is None  # killed while the stream ran
        output = process.communicate(timeout=600)[0].decode()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, output[-3000:]
    assert totals(committed(str(paths["out"]), "totals")) == expected
    assert all(times == 1 for times in committed(str(paths["out"]), "totals").values())
    stateful_outputs_are_exact(str(paths["out"]), counts)
    assert sum(committed(str(paths["out"]), "bad").values()) == dead_letters_written()
