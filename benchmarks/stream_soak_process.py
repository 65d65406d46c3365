"""Running one stream soak job: a process of stream_soak_jobs.py, its directories, its end.

The job runs in a process group of its own, so that a signal to the group reaches Spark's
JVM and its Python workers with the driver.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time

# A sibling module: run as a file, a benchmark has its own directory on sys.path.
import measuring

__all__ = ["round_paths", "run_for", "run_until_max_steps", "start_job", "tail"]


def start_job(arguments: list[str], stderr_path: str) -> subprocess.Popen:
    """``stream_soak_jobs.py ARGUMENTS`` in a new process group, its stderr appended to a file."""
    with open(stderr_path, "a", encoding="utf-8") as stderr:
        stderr.write(f"\n== {datetime.datetime.now().isoformat()} {' '.join(arguments)}\n")
        stderr.flush()
        return subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_soak_jobs.py"), *arguments],
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,  # os.killpg then takes Spark's JVM and workers down with the driver
        )


def tail(path: str, lines: int = 30) -> str:
    """The last lines of a job's stderr, for a failure's message."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return "".join(handle.readlines()[-lines:])


def round_paths(directory: str, input_dir: str) -> dict[str, str]:
    """Where a job's runs in ``directory`` read, write, checkpoint, log their timeline and stderr."""
    os.makedirs(directory, exist_ok=True)
    return {"in": input_dir, "out": f"{directory}/out", "ck": f"{directory}/ck", "log": f"{directory}/timeline.jsonl", "stderr": f"{directory}/stderr.log"}


def run_until_max_steps(arguments: list[str], stderr_path: str, planned_seconds: float) -> tuple[bool, float, float, str]:
    """Runs a job that stops by ``max_steps``, sampling its CPU; SIGINT only if it overruns
    1.5 times the plan + 240 s, SIGKILL a minute later. (ok, seconds, CPU seconds, stopped by)."""
    started = time.monotonic()
    process = start_job(arguments, stderr_path)
    cpu = measuring.TreeCpu(process.pid)
    deadline, stopped_by = started + planned_seconds * 1.5 + 240, "max_steps"
    while process.poll() is None:
        cpu.sample()
        if time.monotonic() > deadline and stopped_by == "max_steps":
            stopped_by = "SIGINT at the deadline"
            os.killpg(process.pid, signal.SIGINT)
            deadline += 60
        elif time.monotonic() > deadline:
            stopped_by = "SIGKILL after SIGINT"
            os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1.0)
    ok = process.returncode == 0 and stopped_by == "max_steps"
    if not ok:
        print(f"   FAILURE: the {arguments[0]} ended with status {process.returncode} ({stopped_by}):\n{tail(stderr_path)}")
    return ok, time.monotonic() - started, cpu.seconds, stopped_by


def run_for(arguments: list[str], stderr_path: str, seconds: float) -> tuple[bool, float, float, str]:
    """Runs a job for ``seconds`` of wall-clock time, sampling its CPU, then interrupts its
    driver (SIGINT; SIGKILL to the group if it has not ended two minutes later).
    (ok, seconds, CPU seconds, how it stopped): ok when it ran the whole time."""
    started = time.monotonic()
    process = start_job(arguments, stderr_path)
    cpu = measuring.TreeCpu(process.pid)
    stopped_by, kill_at = "itself, before the time was up", 0.0
    while process.poll() is None:
        cpu.sample()
        now = time.monotonic()
        if now - started >= seconds and not kill_at:
            stopped_by, kill_at = "SIGINT when the time was up", now + 120
            os.kill(process.pid, signal.SIGINT)
        elif kill_at and now > kill_at:
            stopped_by = "SIGKILL: SIGINT did not stop it"
            os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1.0)
    ok = stopped_by == "SIGINT when the time was up"
    if not ok:
        print(f"   FAILURE: the {arguments[0]} ended with status {process.returncode} ({stopped_by}):\n{tail(stderr_path)}")
    return ok, time.monotonic() - started, cpu.seconds, stopped_by
