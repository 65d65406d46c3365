"""A text stream over files larger than its JVM's heap, in its own process (a heap's size is
fixed when its JVM starts), for ``test_stream_intake.py``.

    python intake_job.py WORK_DIR

The folder holds ``big.txt``, LINES lines of WIDTH bytes (HEAP_MB's heap could not hold its
lines at once, nor its text whole), and two small files, all read in one micro-batch with
more files than the session's parallelism, so that Spark puts two of them in one task. The
session asks Spark to split files at SPLIT_BYTES, which would cut ``big.txt`` into many
parts. Every EVERY-th line of each file is not UTF-8 and reaches the dead letters with its
file, line number and bytes; each line's text starts with its own number. Prints one line
``RESULT <json>``: the files' sizes in lines, the good lines counted, and each dead letter's
file, line and the number its bytes give.
"""

from __future__ import annotations

import json
import os
import sys

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions

LINES = 25_000
WIDTH = 1_600
EVERY = 997
SMALL = (5, 3_000)  # the small files' lines
HEAP_MB = 128
SPLIT_BYTES = 4 << 20


def line(n: int, width: int) -> bytes:
    """Line ``n`` (from 1): its number, padding to ``width`` bytes; not UTF-8 every EVERY-th."""
    head = f"{n:09d} ".encode()
    tail = b"\xff" if n % EVERY == 0 else b"."
    return head + b"x" * (width - len(head) - 1) + tail


def write_input(directory: str) -> dict[str, int]:
    os.makedirs(directory)
    sizes = {"big.txt": LINES, "small-a.txt": SMALL[0], "small-b.txt": SMALL[1]}
    for name, count in sizes.items():
        with open(os.path.join(directory, name), "wb") as handle:
            width = WIDTH if name == "big.txt" else 20
            for start in range(1, count + 1, 10_000):
                handle.write(b"".join(line(n, width) + b"\n" for n in range(start, min(count, start + 9_999) + 1)))
    return sizes


def main(work: str) -> None:
    from pyspark.sql import SparkSession

    directory = os.path.join(work, "in")
    sizes = write_input(directory)
    (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", f"{HEAP_MB}m")
        # Spark's memory manager refuses a heap under 450 MiB unless told its size
        .config("spark.testing.memory", str(512 << 20))
        .config("spark.sql.files.maxPartitionBytes", str(SPLIT_BYTES))
        .getOrCreate()
    )
    p = beam.Pipeline(options=PipelineOptions(available_now=True, checkpoint_dir=os.path.join(work, "ck"), state_partitions=2, quiet=True))
    good, bad = p | "Read" >> beam.io.ReadFromTextStream(directory).with_exception_handling()
    counted = beam.capture(good | beam.Map(lambda text: ("good", 1)) | beam.CombinePerKey(sum))
    letters = beam.capture(bad | beam.Map(lambda b: (os.path.basename(b.file), b.line, int(b.data[:9]))))
    result = p.run()
    report = {
        "sizes": sizes,
        "good": [wv.value[1] for wv in result.emissions(counted)],
        "letters": sorted(wv.value for wv in result.emissions(letters)),
    }
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
