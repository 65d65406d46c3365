"""A watched folder's large file is read as a stream of lines, numbered exactly (#27).

``intake_job.py`` runs a text stream in a JVM of a 128 MiB heap (its own process: a heap's
size is fixed when its JVM starts) over a 40 MB file of 25,000 lines: read whole, as the
source did before (``wholetext``, split with ``posexplode``), it failed with
``OutOfMemoryError``; each line now passes through on its own. The session asks Spark to
split files at 4 MiB, which would cut that file in ten parts; the source keeps each file
whole, so that every line's number counts from its file's start. Two small files arrive in
the same micro-batch, more files than the session's parallelism, so that two of them share a
task, each numbered from its own first line. The numbering itself (the write-ahead log's
task's ``LineNumbers``) is checked on rows alone first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparkbeam.io.streaming import StreamReadSpec
from sparkbeam.runners.spark.stream_rows import LINE, ORIGIN, RAW, UNDECODED, LineNumbers
from tests.runners import intake_job


def _numbered(spec, rows):
    kept = []
    lines = LineNumbers(spec)
    for origin, raw, undecoded in rows:
        record = {ORIGIN: origin, RAW: raw, UNDECODED: undecoded}
        if lines.number(record):
            kept.append((origin, record[LINE], raw))
    return kept


def test_each_file_of_a_task_is_numbered_from_its_own_first_line_and_csv_skips_its_header_and_blank_lines():
    spec = StreamReadSpec(owner="ReadFromCsvStream", format="csv", element="row", path="in", options=(("header", "true"),))
    rows = [
        ("a", "user,score", None),
        ("a", "ann,3", None),
        ("a", "  ", None),  # Spark's readers skip a line of spaces
        ("a", "\t", None),  # and keep one of tabs
        ("b", "us\ufffdr,score", b"us\xe9r,score"),  # a header that is not UTF-8 is reported
        ("b", "", None),
        ("b", "bob,4", None),
    ]
    assert _numbered(spec, rows) == [("a", 2, "ann,3"), ("a", 4, "\t"), ("b", 1, "us\ufffdr,score"), ("b", 3, "bob,4")]
    text = StreamReadSpec(owner="ReadFromTextStream", format="text", element="line", path="in")
    assert [line for _, line, _ in _numbered(text, rows)] == [1, 2, 3, 4, 1, 2, 3]


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_file_larger_than_the_heap_streams_through_with_exact_line_numbers(tmp_path):
    command = [sys.executable, intake_job.__file__, str(tmp_path / "work")]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540, check=False)
    assert finished.returncode == 0, finished.stderr[-4000:]
    (line,) = [line for line in finished.stdout.splitlines() if line.startswith("RESULT ")]
    report = json.loads(line.removeprefix("RESULT "))
    sizes = report["sizes"]
    assert os.path.getsize(tmp_path / "work" / "in" / "big.txt") > 8 * intake_job.SPLIT_BYTES
    expected = sorted(
        [name, n, n] for name, count in sizes.items() for n in range(intake_job.EVERY, count + 1, intake_job.EVERY)
    )
    # Every line that is not UTF-8 names its file and its own number, in every part the
    # big file would have been split into and in the files sharing a task.
    assert report["letters"] == expected
    assert {name for name, _, _ in expected} == {"big.txt", "small-b.txt"}
    # and every other line arrived
    assert report["good"] == [sum(sizes.values()) - len(expected)]
