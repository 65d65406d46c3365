"""The read-back of a keyed stage's checkpointed state (#27), two ways on the same files.

After a checkpoint that cuts the lineage, a stream reads each keyed stage's state back from
the chain of part files the checkpoint left (a base, then deltas:
``runners/spark/state_checkpoints.py``), shuffles every record into the partition it was
written from and merges base and deltas. This builds #27's state (a day-long window of N
keys through ``CombinePerKey(sum)``, hash buckets, ``--partitions`` partitions, each stepped
by the engine as an executor steps it), writes a base after the first step and a delta after
each 3 small steps of 1,000 events, then reads the chain back, alternately:

``one pass``         ``read_chain`` as it is: each task checks its part of a file and keys
                     its pieces for the shuffle still pickled; the merge unpickles them;
``record by record`` as it was before: each part file read by an RDD of its own, every record
                     unpickled and tagged, the files united, then PySpark's ``partitionBy``
                     in a Python pass of its own (every record unpickled, keyed and pickled
                     again), then the merge.

Each read-back is persisted as the backend keeps it and materialised by a count in the JVM
(no Python pass of its own); both give the same records (checked). Per chain (the base
alone, as the first cut reads it, and the base with two deltas): median wall seconds over
the rounds and the ratio.

    python benchmarks/read_back.py --keys 300000 1000000

The machine is shared: read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import state_at_scale

STAGE = 1
STEPS_PER_CHECKPOINT = 3


def _states(keys: int, partitions: int) -> list[list[list[Any]]]:
    """Each partition's records after the first step and after each small step."""
    from sparkbeam.runners.core.grouping.grouping_step import GroupingRun
    from sparkbeam.runners.core.lowering.step_values import StepParams
    from sparkbeam.runners.core.state.keyed_buckets import BucketedPartition
    from sparkbeam.runners.spark.state_chunks import pack_bucket, unpack_bucket
    from sparkbeam.utils.windowed_value import WindowedValue
    from sparkbeam.window import IntervalWindow

    window = IntervalWindow(0, state_at_scale.DAY)
    states: list[list[Any]] = [[] for _ in range(partitions)]
    history: list[list[list[Any]]] = []
    for step, batch in enumerate(state_at_scale.batches(keys)[: 1 + 2 * STEPS_PER_CHECKPOINT]):
        # The watermark moves a minute a step, far from the day's end: nothing fires.
        params = StepParams(step, step * 60_000_000, (step + 1) * 60_000_000, step * 60_000_000, 0, False)
        placed: list[list[Any]] = [[] for _ in range(partitions)]
        for key, value, second in batch:
            # Which keys share a partition does not matter here (the stream: portable_hash).
            placed[zlib.crc32(key.encode()) % partitions].append((key, WindowedValue(value, second * 1_000_000, (window,))))
        for index in range(partitions):
            partition = BucketedPartition(pack_bucket, unpack_bucket)
            partition.read([*states[index], *placed[index]])
            run = GroupingRun(state_at_scale._engine(), params)
            list(run.finish(partition.run(params, run.run_keys)))
            states[index] = list(partition.records())
        history.append([list(state) for state in states])
    return history


def _record_by_record(sc: Any, directories: list[str], sealer: Any, partitions: int) -> Any:
    """The read-back before: a Python pass of its own to key every record for the shuffle."""
    from pyspark.rdd import portable_hash

    from sparkbeam.runners.spark import state_checkpoints

    pieces, paths = [], []
    for position, directory in enumerate(directories):
        parts = state_checkpoints.part_paths(directory, partitions, STAGE)
        paths.append(parts)
        for index, path in enumerate(parts):
            lines = sc.textFile(path, minPartitions=1, use_unicode=False)
            pieces.append(lines.mapPartitions(functools.partial(state_checkpoints.opened_part, sealer, path, STAGE, index, position)))
    tagged = pieces[0] if len(pieces) == 1 else sc.union(pieces)
    placed = tagged.partitionBy(partitions, portable_hash)
    return placed.mapPartitionsWithIndex(functools.partial(state_checkpoints.merge_partition, STAGE, paths), preservesPartitioning=True)


def _one_pass(sc: Any, directories: list[str], sealer: Any, partitions: int) -> Any:
    from pyspark.rdd import portable_hash

    from sparkbeam.runners.spark import state_checkpoints

    return state_checkpoints.read_chain(sc, STAGE, directories, sealer, portable_hash, partitions)


def _timed(rdd: Any) -> float:
    from pyspark import StorageLevel

    started = time.perf_counter()
    rdd.persist(StorageLevel.MEMORY_AND_DISK)
    rdd._jrdd.count()  # the JVM's count: the read-back's own passes and nothing else
    seconds = time.perf_counter() - started
    rdd.unpersist()
    return seconds


def _content(rdd: Any) -> list[list[Any]]:
    return [sorted((b.depth, b.prefix, b.version, b.payload) for _, b in part) for part in rdd.glom().collect()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[300_000])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    from sparkbeam.runners.spark import state_checkpoints
    from sparkbeam.runners.spark.sealing import Sealer

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import sparkbeam
    # As the stream benchmark's session (state_at_scale._session), without the progress bar.
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.hadoop.cloneConf", "true")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    sc = session.sparkContext
    sealer = Sealer(os.urandom(32), scope="read-back benchmark")
    ways = {"one pass": _one_pass, "record by record": _record_by_record}
    print(f"{'keys':>9} {'chain':>16} {'way':>16} {'p50 s':>7} {'min s':>7} {'MB':>6}  load")
    for keys in args.keys:
        work = tempfile.mkdtemp(prefix="read-back-")
        try:
            history = _states(keys, args.partitions)
            directories = []
            for at in range(0, len(history), STEPS_PER_CHECKPOINT):
                state = sc.parallelize(history[at], args.partitions).flatMap(lambda records: records)
                since = None if at == 0 else at - STEPS_PER_CHECKPOINT + 1
                directories.append(os.path.join(work, f"ckpt-{at}"))
                state_checkpoints.write_state(sc, state, directories[-1], sealer, since)
            del history
            for chain in (directories[:1], directories):
                megabytes = sum(os.path.getsize(os.path.join(d, f)) for d in chain for f in os.listdir(d)) / 1e6
                contents = {name: _content(way(sc, chain, sealer, args.partitions)) for name, way in ways.items()}
                if contents["one pass"] != contents["record by record"]:
                    msg = "the two read-backs differ"
                    raise SystemExit(msg)
                seconds: dict[str, list[float]] = {name: [] for name in ways}
                for _ in range(args.rounds):
                    for name, way in ways.items():
                        seconds[name].append(_timed(way(sc, chain, sealer, args.partitions)))
                label = "base" if len(chain) == 1 else f"base+{len(chain) - 1} deltas"
                for name in ways:
                    print(f"{keys:>9,} {label:>16} {name:>16} {statistics.median(seconds[name]):>7.3f} {min(seconds[name]):>7.3f} {megabytes:>6.1f}  {state_at_scale._load()}")
                ratio = statistics.median(seconds["one pass"]) / statistics.median(seconds["record by record"])
                print(f"{keys:>9,} {label:>16} {'ratio':>16} {ratio:>7.2f}x (one pass / record by record, medians; same records)")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    sc.stop()


if __name__ == "__main__":
    main()
