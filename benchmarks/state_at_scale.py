"""Keyed state at scale (#27): what a small step costs when the state holds many keys.

The workload (issue #27): a first step opens one day-long window for N distinct keys, then
small steps of 1,000 events each, half on existing keys, through
``WindowInto(FixedWindows(86400)) | CombinePerKey(sum)``.

Three parts:

``partition``  one state partition's step as an executor runs it, no Spark: the state carried
               as whole chunks (before #27: every key unpickled, stepped and pickled again
               each step) against hash buckets (``runners/core/state/keyed_buckets.py``: only the
               buckets the step touches). Both include the round trip Spark makes of the
               records between steps (pickled into its cache, read back). Per small step:
               median wall and CPU seconds, keys unpickled, and ratio.
``stream``     the real stream: a watched folder read with ``ReadFromCsvStream(...,
               max_files_per_trigger=1)`` and ``--available_now`` on sparkbeam, beside
               Structured Streaming doing ``groupBy(window(ts, '1 day'), key).sum(value)``
               with the RocksDB state store, same files; median small-step seconds of each
               and their ratio; every key's sum checked against plain Python.
``index``      one state partition of N live keys in hash buckets, as ``partition``, stepped
               by the code of each of several source trees (``--trees``: e.g. a worktree of
               main and one of a branch), each in a process of its own, the trees' steps
               interleaved round by round: a watermark step with nothing due (no elements,
               the watermark moves a minute, far from the day's end) and a small step (1,000
               events); CPU and wall of the step (read, run, hand on) and of the step with
               Spark's copy of the records between steps (pickled and back). Per tree and
               size: medians, and the ratio to the first tree.

    python benchmarks/state_at_scale.py partition --keys 10000 500000
    python benchmarks/state_at_scale.py stream --keys 10000 1000000
    python benchmarks/state_at_scale.py index --keys 100000 1000000 --trees ../wt-main .

The machine is shared: read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

DAY = 86400
SMALL_STEPS = 10
SMALL_EVENTS = 1000


# -- the events -------------------------------------------------------------------------------
def batches(keys: int, seed: int = 27) -> list[list[tuple[str, int, int]]]:
    """(key, value, event second) per batch: the first opens the day for ``keys`` keys, each
    small one has SMALL_EVENTS events, half on existing keys, half on new ones."""
    rng = random.Random(seed)
    first = [(f"k{i}", rng.randint(1, 9), rng.randrange(0, 3600)) for i in range(keys)]
    out = [first]
    fresh = keys
    for step in range(SMALL_STEPS):
        small = []
        for _ in range(SMALL_EVENTS // 2):
            small.append((f"k{rng.randrange(fresh)}", rng.randint(1, 9), 3600 + step * 60 + rng.randrange(60)))
        for _ in range(SMALL_EVENTS // 2):
            small.append((f"k{fresh}", rng.randint(1, 9), 3600 + step * 60 + rng.randrange(60)))
            fresh += 1
        out.append(small)
    return out


def oracle(all_batches: list[list[tuple[str, int, int]]]) -> dict[str, int]:
    sums: dict[str, int] = {}
    for batch in all_batches:
        for key, value, _ in batch:
            sums[key] = sums.get(key, 0) + value
    return sums


# -- part 1: one partition's step -------------------------------------------------------------
class _Sum:
    """CombineFn logic for the engine (a sparkbeam CombineFn, built lazily below)."""


def _engine() -> Any:
    from sparkbeam.combine import CombineFn
    from sparkbeam.runners.core.grouping.grouping import build_grouping_engine
    from sparkbeam.window import FixedWindows
    from sparkbeam.windowing import Windowing

    class Sum(CombineFn):
        def create_accumulator(self) -> int:
            return 0

        def add_input(self, accumulator: int, value: int) -> int:
            return accumulator + value

        def add_inputs(self, accumulator: int, values: Any) -> int:
            return accumulator + sum(values)

        def merge_accumulators(self, accumulators: Any) -> int:
            return sum(accumulators)

        def extract_output(self, accumulator: int) -> int:
            return accumulator

    return build_grouping_engine(Windowing(FixedWindows(DAY)), combine_fn=Sum())


def _spark_round_trip(records: list[Any]) -> list[Any]:
    # What PySpark does with a result RDD's records between steps: pickled in batches into
    # its cache, unpickled by the next step's task.
    return pickle.loads(pickle.dumps(records, pickle.HIGHEST_PROTOCOL))


def partition_part(sizes: list[int], stores: list[str]) -> None:
    from sparkbeam.runners.core.grouping.grouping_step import GroupingRun, group_partition
    from sparkbeam.runners.core.grouping.records import KeyedState, Summary
    from sparkbeam.runners.core.lowering.step_values import StepParams
    from sparkbeam.runners.core.state.keyed_buckets import BucketedPartition
    from sparkbeam.runners.spark.state_chunks import (
        pack_bucket,
        pack_state,
        unpack_bucket,
        unpack_state,
    )
    from sparkbeam.utils.windowed_value import WindowedValue
    from sparkbeam.window import IntervalWindow

    window = IntervalWindow(0, DAY)

    def params(step: int) -> StepParams:
        # The watermark moves a minute a step, far from the day's end: nothing is due.
        return StepParams(step, step * 60_000_000, (step + 1) * 60_000_000, step * 60_000_000, 0, False)

    def elements(batch: list[tuple[str, int, int]]) -> list[tuple[str, WindowedValue]]:
        return [(key, WindowedValue(value, second * 1_000_000, (window,))) for key, value, second in batch]

    def whole(state: list[Any], batch: list[Any], step: int) -> tuple[list[Any], int]:
        engine = _engine()
        out = list(group_partition(engine, unpack_state([*state, *batch]), params(step)))
        kept = [(key, record) for key, record in out if type(record) is KeyedState]
        (summary,) = [record.summary for _, record in out if type(record) is Summary]
        return list(pack_state(kept)), summary.state_keys

    def bucketed(state: list[Any], batch: list[Any], step: int) -> tuple[list[Any], int]:
        partition = BucketedPartition(pack_bucket, unpack_bucket)
        partition.read([*state, *batch])
        run = GroupingRun(_engine(), params(step))
        report = partition.run(params(step), run.run_keys)
        list(run.finish(report))
        return list(partition.records()), partition.keys_read

    print(f"{'keys':>9} {'store':>9} {'first s':>8} {'small p50 s':>11} {'cpu p50 s':>9} {'keys read':>10} {'state MB':>8}")
    for size in sizes:
        data = batches(size)
        rows = {}
        for name, step_fn in (("chunks", whole), ("buckets", bucketed)):
            if name not in stores:
                continue
            started = time.perf_counter()
            state, _ = step_fn([], elements(data[0]), 0)
            state = _spark_round_trip(state)
            first = time.perf_counter() - started
            walls, cpus, reads = [], [], []
            for step, batch in enumerate(data[1:], start=1):
                new = elements(batch)
                wall0, cpu0 = time.perf_counter(), time.process_time()
                state, read = step_fn(state, new, step)
                state = _spark_round_trip(state)
                walls.append(time.perf_counter() - wall0)
                cpus.append(time.process_time() - cpu0)
                reads.append(read)  # chunks: every key kept
            megabytes = sum(len(getattr(record, "payload", b"")) for _, record in state) / 1e6  # the index has none
            median = statistics.median(walls)
            rows[name] = median
            print(
                f"{size:>9,} {name:>9} {first:>8.2f} {median:>11.4f} {statistics.median(cpus):>9.4f} "
                f"{int(statistics.median(reads)):>10,} {megabytes:>8.1f}"
            )
        if len(rows) == 2:
            print(f"{size:>9,} {'ratio':>9} chunks/buckets small step: {rows['chunks'] / rows['buckets']:.1f}x")


# -- part 3: one partition's steps, one source tree against another --------------------------
_TREE_CHILD = """
import importlib.util, sys
tree = sys.argv[1]
roots = {"sparkbeam": tree + "/sdk", "sparkbeam.runners": tree + "/runners", "sparkbeam.transforms": tree + "/transforms"}

class _Tree:  # the packages from this tree, as its editable install would map them
    @staticmethod
    def find_spec(name, path=None, target=None):
        root = roots.get(name)
        if root is None:
            return None
        return importlib.util.spec_from_file_location(name, root + "/__init__.py", submodule_search_locations=[root])

sys.meta_path.insert(0, _Tree)
sys.path.insert(0, sys.argv[2])
import state_at_scale
state_at_scale.index_child(int(sys.argv[3]))
"""


def index_child(size: int) -> None:
    """A tree's process: builds the partition's state, says ``ready``, then runs one
    round (a watermark step with nothing due, a small step) for each ``go`` line read,
    answering with a line of ``json`` figures."""
    import json

    import sparkbeam
    from sparkbeam.runners.core.grouping.grouping_step import GroupingRun
    from sparkbeam.runners.core.lowering.step_values import StepParams
    from sparkbeam.runners.core.state.keyed_buckets import BucketedPartition
    from sparkbeam.runners.spark.state_chunks import pack_bucket, unpack_bucket
    from sparkbeam.utils.windowed_value import WindowedValue
    from sparkbeam.window import IntervalWindow

    window = IntervalWindow(0, DAY)
    data = batches(size)

    def params(step: int) -> StepParams:
        return StepParams(step, step * 60_000_000, (step + 1) * 60_000_000, step * 60_000_000, 0, False)

    def step(blob: bytes, batch: list[tuple[str, int, int]], number: int) -> tuple[bytes, dict[str, float]]:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        state = pickle.loads(blob)  # the next task reads the cached records
        new = [(key, WindowedValue(value, second * 1_000_000, (window,))) for key, value, second in batch]
        wall1, cpu1 = time.perf_counter(), time.process_time()
        partition = BucketedPartition(pack_bucket, unpack_bucket)
        partition.read([*state, *new])
        run = GroupingRun(_engine(), params(number))
        report = partition.run(params(number), run.run_keys)
        list(run.finish(report))
        out = list(partition.records())
        wall2, cpu2 = time.perf_counter(), time.process_time()
        blob = pickle.dumps(out, pickle.HIGHEST_PROTOCOL)  # the task's output, cached
        wall3, cpu3 = time.perf_counter(), time.process_time()
        figures = {
            "step_wall": wall2 - wall1, "step_cpu": cpu2 - cpu1, "copied_wall": wall3 - wall0, "copied_cpu": cpu3 - cpu0,
            "touched": partition.touched, "records": len(out),
        }
        return blob, figures

    blob, _ = step(pickle.dumps([]), data[0], 0)
    print("ready", sparkbeam.__file__, flush=True)
    number = 1
    for line in sys.stdin:
        if line.strip() != "go" or number > SMALL_STEPS:
            break
        idle_blob, idle = step(blob, [], number)
        blob, small = step(idle_blob, data[number], number + 1)
        print(json.dumps({"idle": idle, "small": small}), flush=True)
        number += 1


def index_part(sizes: list[int], trees: list[str]) -> None:
    import json
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    names = [os.path.basename(os.path.abspath(tree)) for tree in trees]
    print(
        f"{'keys':>9} {'tree':>22} {'step':>6} {'cpu p50 s':>9} {'wall p50 s':>10} {'+copy cpu s':>11} {'+copy wall s':>12} "
        f"{'buckets read':>12} {'cpu vs ' + names[0]:>12}"
    )
    for size in sizes:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _TREE_CHILD, os.path.abspath(tree), here, str(size)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )
            for tree in trees
        ]
        figures: list[list[dict[str, Any]]] = [[] for _ in trees]
        try:
            for tree, child in zip(trees, children):  # built one after the other, not side by side
                line = child.stdout.readline() if child.stdout else ""
                if not line.startswith("ready") or not line.split()[1].startswith(os.path.abspath(tree) + os.sep):
                    msg = f"the process of tree {tree} for {size} keys did not start with its own sparkbeam: {line!r}"
                    raise RuntimeError(msg)
            for number in range(SMALL_STEPS):
                # interleaved, the first tree first in even rounds and last in odd ones
                order = list(range(len(trees))) if number % 2 == 0 else list(reversed(range(len(trees))))
                for which in order:
                    child = children[which]
                    assert child.stdin is not None and child.stdout is not None
                    child.stdin.write("go\n")
                    child.stdin.flush()
                    figures[which].append(json.loads(child.stdout.readline()))
        finally:
            for child in children:
                if child.stdin:
                    child.stdin.close()
                child.wait()
        for kind in ("idle", "small"):
            first_cpu = None
            for name, found in zip(names, figures):
                rows = [entry[kind] for entry in found]
                p50 = {field: statistics.median(row[field] for row in rows) for field in rows[0]}
                first_cpu = first_cpu or p50["step_cpu"]
                print(
                    f"{size:>9,} {name:>22} {kind:>6} {p50['step_cpu']:>9.4f} {p50['step_wall']:>10.4f} {p50['copied_cpu']:>11.4f} "
                    f"{p50['copied_wall']:>12.4f} {int(p50['touched']):>12,} {p50['step_cpu'] / first_cpu:>11.2f}x"
                )


# -- part 2: the stream, beside Structured Streaming with RocksDB ------------------------------
def _write_files(all_batches: list[list[tuple[str, int, int]]], directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    base = time.time() - len(all_batches) - 10
    for index, batch in enumerate(all_batches):
        path = os.path.join(directory, f"batch-{index:05d}.csv")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("key,value,second\n")  # a header: both engines' CSV reads take one
            handle.writelines(f"{key},{value},{second}\n" for key, value, second in batch)
        os.utime(path, (base + index, base + index))  # Spark takes new files oldest first


class _PeakRss:
    """Peak resident memory, sampled twice a second while a run lasts, of this process (the
    Python driver; it also holds the benchmark's events and expected sums, so read its growth
    over the run) and of the JVM it started (in ``local[2]`` the driver and the executors)."""

    def __init__(self) -> None:
        import threading

        import psutil

        self.me = psutil.Process()
        self.start = self.python = self.me.memory_info().rss
        self.jvm = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        while not self.done.wait(0.5):
            try:
                self.python = max(self.python, self.me.memory_info().rss)
                jvms = [child for child in self.me.children(recursive=True) if child.name() == "java"]
                self.jvm = max(self.jvm, sum(child.memory_info().rss for child in jvms))
            except psutil.Error:
                continue  # a process ended between the listing and the reading

    def __enter__(self) -> _PeakRss:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()

    def columns(self) -> str:
        return f"{self.python / 2**20:>8.0f} {(self.python - self.start) / 2**20:>+7.0f} {self.jvm / 2**20:>7.0f}"


def _load() -> str:
    return "/".join(f"{load:.1f}" for load in os.getloadavg())


def _counting_writes(checkpoints: str, written: list[tuple[int, bool]]) -> Any:
    """``state_checkpoints.write_state`` recording the bytes each checkpoint puts on disk
    for a stage's state, and whether it is a base; with ``checkpoints == "full"``, every
    checkpoint writes a base (what sparkbeam did before incremental checkpoints, read back
    whole after it as before)."""
    import glob

    from sparkbeam.runners.spark import state_checkpoints

    original_write, original_needs = state_checkpoints.write_state, state_checkpoints.needs_base

    def write_state(sc: Any, state: Any, path: str, sealer: Any, since: int | None) -> int:
        size = original_write(sc, state, path, sealer, since)
        written.append((sum(os.path.getsize(part) for part in glob.glob(os.path.join(path, "part-*"))), since is None))
        return size

    state_checkpoints.write_state = write_state
    if checkpoints == "full":
        state_checkpoints.needs_base = lambda *_: True
    return lambda: (setattr(state_checkpoints, "write_state", original_write), setattr(state_checkpoints, "needs_base", original_needs))


def _sparkbeam_run(
    directory: str, work: str, checkpoints: str = "incremental", interval: int = 10
) -> tuple[list[float], dict[str, int], list[tuple[int, bool]], _PeakRss]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from step_probe import probe_steps

    import sparkbeam as beam
    from sparkbeam.window import FixedWindows

    spark = _session()  # the run uses the active session
    checkpoint_dir = os.path.join(work, f"sb-checkpoint-{checkpoints}")
    flags = ["--available_now", f"--checkpoint_dir={checkpoint_dir}", "--quiet", "--state_partitions=2", f"--checkpoint_interval={interval}"]
    p = beam.Pipeline(options=beam.PipelineOptions(flags))
    sums = (
        p
        | beam.io.ReadFromCsvStream(
            directory, schema="key STRING, value INT, second LONG", timestamp=lambda row: row.second, max_files_per_trigger=1
        )
        | beam.Map(lambda row: (row.key, row.value))
        | beam.WindowInto(FixedWindows(DAY))
        | beam.CombinePerKey(sum)
    )
    captured = beam.capture(sums)
    written: list[tuple[int, bool]] = []
    undo = _counting_writes(checkpoints, written)
    try:
        with _PeakRss() as rss, probe_steps(spark.sparkContext) as probe, _steps_told(probe):
            result = p.run()
    finally:
        undo()
    emitted = [wv.value for wv in result.emissions(captured)]
    got = {key: total for key, total in emitted}
    return probe.seconds, got, written, rss


@contextlib.contextmanager
def _steps_told(probe: Any) -> Iterator[None]:
    """Each step's seconds on stderr as it ends (with the load average): a run of millions
    of keys takes many minutes, and one stopped before its end still says how far it got."""
    from sparkbeam.runners.core.loop.steps import StepLoop

    timed = StepLoop.run_step

    def run_step(loop: Any) -> None:
        timed(loop)
        print(f"  sparkbeam step {len(probe.seconds) - 1}: {probe.seconds[-1]:.2f} s, load {_load()}", file=sys.stderr, flush=True)

    StepLoop.run_step = run_step  # type: ignore[method-assign]
    try:
        yield
    finally:
        StepLoop.run_step = timed  # type: ignore[method-assign]


def _session() -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.hadoop.cloneConf", "true")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )


def _structured_run(directory: str, work: str) -> tuple[list[float], dict[str, int], list[int], _PeakRss]:
    from pyspark.sql import functions as F

    spark = _session()
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    frame = (
        spark.readStream.schema("key STRING, value INT, second LONG")
        .option("maxFilesPerTrigger", 1)
        .option("header", True)
        .csv(directory)
        .withColumn("ts", F.col("second").cast("timestamp"))
        .withWatermark("ts", "0 seconds")
        .groupBy(F.window("ts", "1 day"), "key")
        .agg(F.sum("value").alias("total"))
    )
    query = (
        frame.writeStream.outputMode("update")
        .format("memory")
        .queryName("state_at_scale")
        .option("checkpointLocation", os.path.join(work, "ss-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with _PeakRss() as rss:
        query.awaitTermination()
    batches_run = [p for p in query.recentProgress if p["numInputRows"] > 0]
    seconds = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in batches_run]
    # What each batch's commit copied into the checkpoint folder (RocksDB's new SST files
    # and the snapshot's metadata), as its state operator reports it.
    copied = [
        sum(int(op.get("customMetrics", {}).get("rocksdbBytesCopied", 0)) for op in p.get("stateOperators", [])) for p in batches_run
    ]
    # Update mode: each key's row again whenever its sum changes; sums only grow here.
    latest = {row.key: row.total for row in spark.sql("SELECT key, max(total) AS total FROM state_at_scale GROUP BY key").collect()}
    return seconds, latest, copied, rss


def _structured_row(size: int, directory: str, work: str, expected: dict[str, int]) -> float:
    """Structured Streaming's run on the files, its row printed; its median small batch."""
    ss_seconds, ss_got, copied, ss_rss = _structured_run(directory, work)
    ss_small = statistics.median(ss_seconds[1:]) if len(ss_seconds) > 1 else float("nan")
    ss_ok = "yes" if ss_got == expected else f"NO ({len(ss_got)} keys)"
    # every batch commits a RocksDB version: the median over the small batches
    ss_bytes = statistics.median(copied[1:]) / 1e6 if len(copied) > 1 else float("nan")
    print(
        f"{size:>9,} {'structured, RocksDB':>24} {ss_seconds[0]:>8.2f} {ss_small:>11.3f} {'':>10} {'':>10} {'':>7} "
        f"{ss_bytes:>13.2f} {'':>5} {ss_ok:>8} {ss_rss.columns()}  {_load()}",
        flush=True,
    )
    return ss_small


def stream_part(sizes: list[int], checkpoints: list[str], interval: int, structured: bool, structured_first: bool = False) -> None:
    """Per size: sparkbeam with each way of checkpointing (``incremental``: bases and deltas;
    ``full``: a base every time, as before), a checkpoint every ``interval`` steps, and
    Structured Streaming with RocksDB; per kind of small step (it writes a checkpoint after
    it, it reads the state back from the one before it, neither) the median, and the bytes
    of keyed state each checkpoint wrote."""
    print(
        f"{'keys':>9} {'engine':>24} {'first s':>8} {'small p50 s':>11} {'writes ckpt':>10} {'after ckpt':>10} {'plain':>7} "
        f"{'state MB/ckpt':>13} {'bases':>5} {'checked':>8} {'py MB':>8} {'py +MB':>7} {'jvm MB':>7}  load 1/5/15 min"
    )
    for size in sizes:
        data = batches(size)
        expected = oracle(data)
        work = tempfile.mkdtemp(prefix="state-at-scale-")
        try:
            directory = os.path.join(work, "in")
            _write_files(data, directory)
            smalls = {}
            print(f"{size:>9,} files written, load {_load()}", flush=True)
            if structured and structured_first:
                ss_small = _structured_row(size, directory, work, expected)
            for mode in checkpoints:
                sb_seconds, got, written, rss = _sparkbeam_run(directory, work, mode, interval)
                ok = "yes" if got == expected else f"NO ({len(got)} keys)"
                small = sb_seconds[1 : 1 + SMALL_STEPS]
                # a step's time includes the checkpoint written after it; the step after a
                # checkpoint reads the state back from its files (the lineage cut) after
                # every other checkpoint (StreamRun._cuts_lineage), so "after ckpt" mixes both
                kinds: dict[str, list[float]] = {"writes": [], "after ckpt": [], "plain": []}
                for step, seconds in enumerate(sb_seconds[: 1 + SMALL_STEPS]):
                    if step > 0:
                        kind = "writes" if (step + 1) % interval == 0 else "after ckpt" if step % interval == 0 else "plain"
                        kinds[kind].append(seconds)
                p50 = {kind: statistics.median(found) if found else float("nan") for kind, found in kinds.items()}
                smalls[mode] = statistics.median(small) if small else float("nan")
                # the first checkpoint is every key's (a base either way): the others are the small steps'
                later = [size_ for size_, _ in written[1:]] or [0]
                print(
                    f"{size:>9,} {'sparkbeam, ' + mode:>24} {sb_seconds[0]:>8.2f} {smalls[mode]:>11.3f} "
                    f"{p50['writes']:>10.3f} {p50['after ckpt']:>10.3f} {p50['plain']:>7.3f} "
                    f"{statistics.median(later) / 1e6:>13.2f} {sum(base for _, base in written):>5} {ok:>8} {rss.columns()}  {_load()}",
                    flush=True,
                )
            if len(smalls) == 2:
                print(f"{size:>9,} {'ratio full/incremental':>24} {'':>8} {smalls['full'] / smalls['incremental']:>11.2f}")
            if not structured:
                continue
            if not structured_first:
                ss_small = _structured_row(size, directory, work, expected)
            ratio = smalls[checkpoints[0]] / ss_small
            print(f"{size:>9,} {'ratio sparkbeam/SS':>24} {'':>8} {ratio:>11.2f}")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["partition", "stream", "index"])
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--stores", nargs="+", choices=["chunks", "buckets"], default=["chunks", "buckets"])
    parser.add_argument("--target", type=int, default=None, help="keys per bucket to aim at (keyed_buckets.TARGET_KEYS)")
    parser.add_argument(
        "--checkpoints", nargs="+", choices=["incremental", "full"], default=["incremental", "full"],
        help="stream: sparkbeam's checkpoints as bases and deltas, and/or a base every time (as before #27 item 2)",
    )
    parser.add_argument("--checkpoint_interval", type=int, default=3, help="stream: steps between sparkbeam's checkpoints")
    parser.add_argument("--no_structured", action="store_true", help="stream: leave out Structured Streaming")
    parser.add_argument(
        "--structured_first", action="store_true",
        help="stream: run Structured Streaming before sparkbeam (a long run stopped in sparkbeam's steps still has its peer)",
    )
    parser.add_argument("--trees", nargs="+", default=["."], help="index: source trees to compare (the first is the reference)")
    args = parser.parse_args()
    if args.target is not None:
        from sparkbeam.runners.core.state import keyed_buckets

        keyed_buckets.TARGET_KEYS, keyed_buckets.MAX_KEYS = args.target, 2 * args.target
    if args.part == "partition":
        partition_part(args.keys, args.stores)
    elif args.part == "index":
        index_part(args.keys, args.trees)
    else:
        stream_part(args.keys, args.checkpoints, args.checkpoint_interval, not args.no_structured, args.structured_first)


if __name__ == "__main__":
    main()
