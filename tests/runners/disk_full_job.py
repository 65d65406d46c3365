"""A stream whose keyed state spills to a local disk that fills up, for ``test_disk_full.py``.

    python disk_full_job.py WORK_DIR [LOCAL_DIR]

``spill_job``'s stream (its files, its 1 MiB of storage memory, a ``GroupByKey`` whose state
grows by about 0.6 MB a step, a checkpoint every other step) with ``spark.local.dir`` at
LOCAL_DIR, where Spark's block manager puts what does not fit in memory and the shuffles'
files: the test runs it first on a small file system that fills up during the stream, then
again without LOCAL_DIR on the same WORK_DIR, which resumes from the last checkpoint. The
input is written once (a second run finds it). Prints ``RESULT <json>`` (each key's count
and sum, and what was expected) or ``FAILED <json>`` (the exception's type and message).
"""

from __future__ import annotations

import json
import os
import sys

from tests.runners import spill_job

FILES = 8


def main(work: str, local_dir: str | None = None) -> None:
    spill_job.FILES = FILES
    inputs = os.path.join(work, "in")
    expected_path = os.path.join(work, "expected.json")
    if not os.path.exists(inputs):
        os.makedirs(work, exist_ok=True)
        with open(expected_path, "w") as handle:
            json.dump(spill_job.write_input(inputs), handle)
    with open(expected_path) as handle:
        expected = json.load(handle)
    p, totals = spill_job.stream(work, [] if local_dir is None else [f"spark.local.dir={local_dir}"])
    try:
        result = p.run()
    except Exception as error:
        print("FAILED " + json.dumps({"type": type(error).__name__, "message": str(error)}), flush=True)
        return
    got = dict(result.emissions(totals).values())
    print("RESULT " + json.dumps({"got": got, "expected": expected}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
