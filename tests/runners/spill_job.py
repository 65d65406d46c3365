"""A stream whose keyed state outgrows the storage memory its Spark session allows, in its own
process (the memory settings are fixed when a session starts), for ``test_state_spill.py``.

    python spill_job.py WORK_DIR

Each of FILES files brings every one of KEYS keys a line ``key,n,padding`` (PADDING bytes of
padding); a ``GroupByKey`` in the global window keeps every line in its keyed state until the
source is exhausted, so the state grows by about KEYS * PADDING bytes a step, well past the
session's storage memory (``spark.testing.memory``: the memory manager's view of the heap).
A checkpoint every other step (its lineage cut reads the state back, cached too). After each
step, what Spark's block manager reports of every RDD the backend kept that holds keyed
state; at the end, each key's count and sum. Prints one line ``RESULT <json>``.
"""

from __future__ import annotations

import json
import os
import random
import sys

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.spark.backend import SparkBackend

KEYS = 300
FILES = 4
PADDING = 2_000
# The memory manager sees a 4 MiB heap, no reserve, and gives storage and execution a
# quarter of it: 1 MiB, against a state that grows by KEYS * PADDING (0.6 MB) a step.
MEMORY = [
    "spark.testing.memory=4194304",
    "spark.testing.reservedMemory=0",
    "spark.memory.fraction=0.25",
]


def write_input(directory: str) -> dict[str, list[int]]:
    os.makedirs(directory)
    expected: dict[str, list[int]] = {}
    for index in range(FILES):
        lines = []
        for key in range(KEYS):
            n = index * KEYS + key
            lines.append(f"k{key},{n},{random.Random(n).randbytes(PADDING // 2).hex()}\n")
            count, total = expected.get(f"k{key}", [0, 0])
            expected[f"k{key}"] = [count + 1, total + n]
        path = os.path.join(directory, f"f{index}.txt")
        with open(path, "w") as handle:
            handle.write("".join(lines))
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    return expected


def count_and_sum(key: str, lines) -> tuple[str, list[int]]:
    numbers = [int(line.split(",")[1]) for line in lines]
    return key, [len(numbers), sum(numbers)]


def kept_state(sc) -> list[dict]:
    """Every persisted RDD holding keyed state, as Spark's block manager reports it (an RDD
    with no block stored, in memory or on disk, is in no storage report)."""
    reports = {info.id(): info for info in sc._jsc.sc().getRDDStorageInfo()}
    kept = []
    for rdd_id, rdd in sc._jsc.getPersistentRDDs().items():
        name = rdd.name() or ""
        if "keyed state" not in name:
            continue
        info = reports.get(rdd_id)
        kept.append(
            {
                "name": name,
                "level": rdd.getStorageLevel().description(),
                "partitions": rdd.getNumPartitions(),
                "cached": info.numCachedPartitions() if info is not None else 0,
                "memory": info.memSize() if info is not None else 0,
                "disk": info.diskSize() if info is not None else 0,
            }
        )
    return kept


def stream(work: str, conf: list[str]) -> tuple[beam.Pipeline, beam.PCollection]:
    """The stream over ``work``/in (checkpoints in ``work``/ck; ``conf``: more Spark settings)
    and the captured count and sum of each key."""
    options = PipelineOptions(
        spark_master="local[2]",
        spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2", *MEMORY, *conf],
        available_now=True,
        checkpoint_dir=os.path.join(work, "ck"),
        checkpoint_interval=2,
        step_interval=0.2,
        state_partitions=2,
    )
    p = beam.Pipeline(options=options)
    lines = p | "Read" >> beam.io.ReadFromTextStream(os.path.join(work, "in"), max_files_per_trigger=1)
    keyed = lines | "Key" >> beam.Map(lambda line: (line.split(",")[0], line))
    grouped = keyed | "Group" >> beam.GroupByKey()
    return p, beam.capture(grouped | "Total" >> beam.MapTuple(count_and_sum))


def main(work: str) -> None:
    expected = write_input(os.path.join(work, "in"))
    p, totals = stream(work, [])
    steps = []
    original = SparkBackend.end_step

    def end_step(backend, step: int) -> None:
        # before the state the step replaced is dropped (its blocks were read in the step)
        if step >= 0:
            steps.append(kept_state(backend.sc))
        original(backend, step)

    SparkBackend.end_step = end_step
    try:
        result = p.run()
    finally:
        SparkBackend.end_step = original
    got = dict(result.emissions(totals).values())
    print("RESULT " + json.dumps({"got": got, "expected": expected, "steps": steps}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
