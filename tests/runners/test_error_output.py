"""What a user sees when their ``Map`` raises: a short error on the terminal, the rest in a file.

``failing_job.py`` runs in its own process, as a user runs a script (``python job.py``) or
submits it (``spark-submit job.py``), in batch and as a stream. Its output must be at most
about 30 lines: the user's exception, the transform's label and the line that applied it,
the element, the user's own frame on the executor, and the path of Spark's log, which
holds the executors' traces. ``--verbose_errors`` prints those traces instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

JOB = os.path.join(os.path.dirname(__file__), "failing_job.py")
MAX_LINES = 30


def source_line(text: str) -> int:
    """The line of failing_job.py that contains ``text``."""
    with open(JOB) as handle:
        (number,) = [n for n, line in enumerate(handle, 1) if text in line]
    return number


def run(tmp_path, mode: str, *flags: str, submit: bool = False) -> tuple[int, str]:
    """Run the job; its exit status and everything it printed."""
    if mode == "batch":
        source = tmp_path / "numbers.txt"
        source.write_text("\n".join(str(n) for n in range(20)) + "\n")
    else:
        source = tmp_path / "incoming"
        source.mkdir()
        for part in range(2):
            (source / f"part-{part}.txt").write_text("\n".join(str(n) for n in range(part * 10, part * 10 + 10)) + "\n")
    command = [sys.executable, JOB, mode, str(source), str(tmp_path / "out" / "numbers"), *flags]
    if submit:
        import pyspark

        spark_submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
        command = [spark_submit, "--master", "local[2]", *command[1:]]
    completed = subprocess.run(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # the terminal shows both (spark-submit merges them anyway)
        text=True,
        timeout=400,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    )
    return completed.returncode, completed.stdout


def check_short_error(returncode: int, stderr: str) -> None:
    assert returncode == 1, stderr
    lines = stderr.splitlines()
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines:\n{stderr}"
    assert "ValueError: cannot handle 13" in lines
    assert f"in transform 'Explode' (applied at {JOB}:{source_line('Explode')}) while processing '13'" in lines
    # The user's own frame on the executor, with its source line.
    frame = lines.index(f'  File "{JOB}", line {source_line("raise ValueError")}, in explode')
    assert lines[frame + 1].strip() == 'raise ValueError(f"cannot handle {number}")'
    # Nothing of Spark's or Py4J's own traces; where to find them instead.
    for noise in ("py4j", "Py4J", "org.apache.spark", "sparkbeam-user-error", "TaskSetManager", "PythonException"):
        assert noise not in stderr
    (log,) = re.findall(r"Spark's log, with the executors' traces: (\S+) \(--verbose_errors prints them here\)", stderr)
    with open(log) as handle:
        spark_log = handle.read()
    assert "ValueError: cannot handle 13" in spark_log
    assert "org.apache.spark" in spark_log


def test_a_failing_map_in_a_batch_run_prints_a_short_error(tmp_path):
    check_short_error(*run(tmp_path, "batch"))


def test_a_failing_map_in_a_stream_submitted_with_spark_submit_prints_a_short_error(tmp_path):
    check_short_error(*run(tmp_path, "stream", submit=True))


def test_verbose_errors_print_spark_s_traces_on_the_terminal_of_a_spark_submit_run(tmp_path):
    returncode, stderr = run(tmp_path, "batch", "--verbose_errors", submit=True)
    assert returncode == 1
    assert "ValueError: cannot handle 13" in stderr
    assert "org.apache.spark.api.python.PythonException" in stderr  # the executor's trace
    assert "Spark's log, with the executors' traces" not in stderr
    assert len(stderr.splitlines()) > MAX_LINES
