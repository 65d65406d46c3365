"""A real Spark standalone cluster: a master and a worker as processes of their own, started
from the launch classes that pip's PySpark ships, as the README's cluster section does.

The batch example runs on it through ``--spark_master=spark://...``; a stream with a
checkpoint runs through ``--spark_master``, is stopped with Ctrl-C (SIGINT) after a few
steps, and resumes through ``spark-submit --master spark://...`` to the end. Outputs are
checked against plain Python, and the master's own record says both applications ran on
it. The commands are the README's (``test_the_readme_shows_these_commands``).
"""

from __future__ import annotations

import collections
import contextlib
import csv
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sparkbeam.examples import hourly_team_score
from tests.runners.test_stream_recovery import (
    committed,
    dead_letters_written,
    steps_with_data,
    totals,
    write_input,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

HERE = os.path.dirname(__file__)
README = os.path.join(HERE, "..", "..", "README.md")

# The commands, as the README shows them (with its ports and paths).
MASTER = '"{spark_home}/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 --port {port} --webui-port {webui}'
WORKER = (
    '"{spark_home}/bin/spark-class" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 2 --memory 2g '
    "--webui-port {worker_webui} --work-dir {work} spark://127.0.0.1:{port}"
)
BATCH = "python -m sparkbeam.examples.hourly_team_score --spark_master=spark://127.0.0.1:{port} --output {out}/scores"
STREAM_FLAGS = "--input={incoming} --output={out} --checkpoint_dir={ck} --available_now --timeline_log={log}"
STREAM = "python {job} " + STREAM_FLAGS + " --spark_master=spark://127.0.0.1:{port}"
SUBMIT = '"{spark_home}/bin/spark-submit" --master spark://127.0.0.1:{port} {job} ' + STREAM_FLAGS
README_VALUES = {
    "spark_home": "$SPARK_HOME", "port": 7077, "webui": 8080, "worker_webui": 8081, "work": "/tmp/spark-work",
    "out": "/data/out", "job": "my_stream.py", "incoming": "/data/incoming", "ck": "/data/ck", "log": "/data/timeline.jsonl",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(template: str, **values) -> list[str]:
    """A README command as an argument list, run with this interpreter."""
    import shlex

    words = shlex.split(template.format(**values))
    return [sys.executable if word == "python" else word for word in words]


def master_state(webui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One master and one worker for the module; their ports and the master's web UI."""
    import pyspark

    base = tmp_path_factory.mktemp("standalone")
    values = {
        "spark_home": os.path.dirname(pyspark.__file__),
        "port": free_port(),
        "webui": free_port(),
        "worker_webui": free_port(),
        "work": str(base / "work"),
    }
    # The master's and the worker's JVMs take the options of the drivers the tests start (C1
    # alone, tests/conftest.py); the executors take theirs from the tests' spark-defaults.conf.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "")}
    processes = []
    try:
        for name, template in (("master", MASTER), ("worker", WORKER)):
            with open(base / f"{name}.log", "w") as log:
                processes.append(subprocess.Popen(command(template, **values), stdout=log, stderr=log, env=env))
            if name == "master":
                wait_for(lambda: master_state(values["webui"])["status"] == "ALIVE", base / "master.log")
        wait_for(lambda: master_state(values["webui"])["aliveworkers"] == 1, base / "worker.log")
        yield values
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def wait_for(condition, log, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, ValueError):
            pass  # not listening yet, or not serving its JSON status yet
        time.sleep(0.5)
    pytest.fail(f"the standalone cluster did not come up in {seconds}s:\n{log.read_text()[-3000:]}")


def run(argv: list[str], cwd, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    )


def applications(cluster) -> list[str]:
    state = master_state(cluster["webui"])
    return [app["name"] for app in state["completedapps"] + state["activeapps"]]


def test_the_batch_example_runs_on_the_standalone_cluster(cluster, tmp_path):
    before = len(applications(cluster))
    completed = run(command(BATCH, **cluster, out=tmp_path / "out"), cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line for path in glob.glob(str(tmp_path / "out" / "scores-*-of-*.txt")) for line in Path(path).read_text().splitlines()]
    expected: collections.Counter = collections.Counter()
    with open(hourly_team_score.SAMPLE_DATA) as handle:
        for _user, team, score, millis, _ in csv.reader(handle):
            expected[(int(millis) // 3_600_000, team)] += int(score)
    assert len(rows) == len(expected) == 48  # 8 teams x 6 hours
    assert sum(int(row.split()[-1]) for row in rows) == sum(expected.values())
    assert len(applications(cluster)) == before + 1  # it ran on the cluster, not on a local Spark


def test_a_stream_stopped_on_the_cluster_resumes_through_spark_submit(cluster, tmp_path):
    expected = write_input(str(tmp_path / "incoming"))
    paths = {"incoming": tmp_path / "incoming", "out": tmp_path / "out", "ck": tmp_path / "ck", "log": tmp_path / "log.jsonl"}
    job = os.path.join(HERE, "cluster_stream_job.py")
    before = len(applications(cluster))

    # Through --spark_master, stopped with Ctrl-C once a step has read data.
    process = subprocess.Popen(
        command(STREAM, **cluster, **paths, job=job),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    deadline = time.monotonic() + 400
    while steps_with_data(str(paths["log"])) < 1:
        if process.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"the stream ended or stalled before reading data:\n{process.communicate()[0].decode()[-3000:]}")
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGINT)
    output = process.communicate(timeout=120)[0].decode()
    assert process.returncode == 130, output[-3000:]
    assert re.search(rf"stopped on SIGINT after step \d+, checkpoint written; run again with --checkpoint_dir={paths['ck']}", output)

    # Resumed through spark-submit, to the end.
    completed = run(command(SUBMIT, **cluster, **paths, job=job), cwd=tmp_path)
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-3000:]
    lines = committed(str(paths["out"]), "totals")
    assert totals(lines) == expected
    assert all(times == 1 for times in lines.values())  # each window's total written once
    assert sum(committed(str(paths["out"]), "bad").values()) == dead_letters_written()
    assert len(applications(cluster)) == before + 2


def test_the_readme_shows_these_commands():
    with open(README) as handle:
        readme = handle.read()
    for template in (MASTER, WORKER, BATCH, STREAM, SUBMIT):
        assert template.format(**README_VALUES) in readme
