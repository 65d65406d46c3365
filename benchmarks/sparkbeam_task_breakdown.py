"""Where a Spark task's Python time goes: sparkbeam against hand-written RDD code, phase by phase.

A diagnostic for batch_windowed_scores.py. It replays, in this one process and without
Spark, the Python work that the executors and the driver do for the benchmark's workload:
the same functions sparkbeam's Spark backend runs in its ``mapPartitions`` (runners/spark/
backend.py, stage_records.py and batch_grouping.py, batch path), and PySpark's own pieces around them
(``ExternalMerger``, ``portable_hash``, its cloudpickle serializer).
Each phase is timed in CPU seconds of this process, so the figures hold on a busy machine,
where wall-clock timings do not::

    python benchmarks/sparkbeam_task_breakdown.py --events 1000000

It leaves out what the JVM does (reading the file for the RDD code, moving shuffle blocks,
scheduling); sparkbeam's lines are read from bytes in memory (its executors read the file
from the page cache). It calls private sparkbeam functions: when the Spark
backend's batch path changes, this replay must follow it.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from batch_windowed_scores import add_pairs, parse_line, stamp_line, window_pair
from workloads import CountAndSumLogic, generate_events

# portable_hash refuses str keys unless hashing is deterministic, as on PySpark's workers.
os.environ.setdefault("PYTHONHASHSEED", "0")


class Phases:
    """CPU seconds per named phase, summed over the tasks that ran it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.streamed = 0.0

    def run(self, phase: str, work: Callable[[], Any]) -> Any:
        # Each phase holds a whole split's objects in a list, where Spark streams them; the
        # cyclic GC would rescan those lists over and over, a cost the real task does not pay.
        gc.collect()
        gc.disable()
        try:
            started = time.process_time()
            result = work()
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.process_time() - started
        finally:
            gc.enable()
        return result

    def run_streamed(self, work: Callable[[], Any]) -> None:
        """The map side again as Spark runs it, one generator chain with the GC on: a check on the phases."""
        gc.collect()
        started = time.process_time()
        work()
        self.streamed += time.process_time() - started

    def count(self, name: str, amount: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + amount


class _NoCounter:
    """Stands in for a Spark accumulator."""

    def add(self, amount: int) -> None:
        pass


def _merged(aggregator: Any, items: Iterable, combiners: bool) -> list:
    from pyspark.shuffle import ExternalMerger

    # A memory limit no run reaches: spilling to disk is not what is measured here.
    merger = ExternalMerger(aggregator, memory_limit=1 << 20)
    if combiners:
        merger.mergeCombiners(iter(items))
    else:
        merger.mergeValues(iter(items))
    return list(merger.items())


def _shuffle_write(items: Iterable, partitions: int, partition_fn: Callable[[Any], int] | None = None) -> list[bytes]:
    """What ``partitionBy`` does on the map side: bucket by ``partition_fn`` (PySpark's
    ``portable_hash`` by default), pickle each bucket."""
    from pyspark.rdd import portable_hash
    from pyspark.serializers import CPickleSerializer

    serializer = CPickleSerializer()
    hashed = partition_fn or portable_hash
    buckets: list[list] = [[] for _ in range(partitions)]
    for key, value in items:
        buckets[hashed(key) % partitions].append((key, value))
    return [serializer.dumps(bucket) for bucket in buckets]


def _range_lines(split: bytes) -> Iterator[str]:
    """A split's lines as sparkbeam's ReadFromText reads a byte range of its file on an
    executor (runners/spark/textio.py): a block at a time, a few C calls per block."""
    from sparkbeam.runners.core.sources.text_lines import TextRange, read_ranges

    def open_split(path: str, compression: str) -> io.BytesIO:
        return io.BytesIO(split)

    return chain.from_iterable(read_ranges((TextRange("split", 0, len(split)),), open_split))


def _shuffle_read(blobs: list[bytes]) -> list:
    from pyspark.serializers import CPickleSerializer

    serializer = CPickleSerializer()
    return [item for blob in blobs for item in serializer.loads(blob)]


def _to_driver(items: list) -> bytes:
    """How a task sends its partition back for ``collect``: PySpark's batched cloudpickle."""
    from pyspark.serializers import AutoBatchedSerializer, CPickleSerializer

    stream = io.BytesIO()
    AutoBatchedSerializer(CPickleSerializer()).dump_stream(iter(items), stream)
    return stream.getvalue()


def _on_driver(blob: bytes) -> list:
    from pyspark.serializers import AutoBatchedSerializer, CPickleSerializer

    return list(AutoBatchedSerializer(CPickleSerializer()).load_stream(io.BytesIO(blob)))


def sparkbeam_phases(splits: list[list[bytes]], partitions: int) -> Phases:
    from pyspark.serializers import AutoBatchedSerializer, CPickleSerializer

    import sparkbeam as beam
    from sparkbeam import window
    from sparkbeam.runners.core.elements.metrics import step_scoped
    from sparkbeam.runners.core.grouping.holds import HoldPolicy
    from sparkbeam.runners.core.loop.timeline import StepEmissions
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.runners.spark import batch_grouping, stage_records, worker

    class CountAndSum(CountAndSumLogic, beam.CombineFn):
        pass

    # The benchmark's pipeline, planned as the runner plans it; its stages are then driven by hand.
    pipeline = beam.Pipeline()
    # Captured, as in the benchmark: that makes the grouping stage emit its panes.
    beam.capture(
        pipeline
        | "Read" >> beam.io.ReadFromText("events.csv")
        | "Stamp" >> beam.Map(stamp_line, window.TimestampedValue)
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "CountAndSum" >> beam.CombinePerKey(CountAndSum())
    )
    read_stage, group_stage = plan_stages(lower(pipeline)).stages
    (read_output,) = read_stage.head.outputs  # type: ignore[union-attr]
    op = group_stage.grouping
    if op is None or op.combine_fn is None:
        msg = "sparkbeam no longer plans CombinePerKey as a grouping stage with a CombineFn; update this replay"
        raise RuntimeError(msg)
    fn = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    (group_output,) = op.outputs

    # What SparkBackend runs on the batch path: the grouping runs the read stage's body in
    # its map side's pass (batch_grouping._precombine_body), over the lines as values.
    def stamp_and_precombine(lines: Iterable[str]) -> list[tuple]:
        return list(
            batch_grouping._precombine_body(read_stage, None, None, read_output, op, fn, holds, _NoCounter(), True, lines)
        )

    def merge(received: list) -> list:
        return list(batch_grouping._merge_partials(op, fn, holds, 1 << 20, received))

    def output_elements(merged: list) -> list:
        panes = batch_grouping._panes(op, fn, holds, merged)
        return list(worker.run_bare_body(group_stage, None, None, group_output, panes))

    def map_task(phases: Phases, raw: list[bytes]) -> list[bytes]:
        # The lines of the split's byte range, read in Python (textio._range_lines).
        split = b"\n".join(raw) + b"\n"
        lines = phases.run(READ, lambda: list(_range_lines(split)))
        combined = phases.run(FUSED, lambda: stamp_and_precombine(lines))
        blobs = phases.run(SHUFFLE_WRITE, lambda: _shuffle_write(combined, partitions, batch_grouping.compact_key_hash))
        phases.count("records shuffled", len(combined))
        phases.run_streamed(
            lambda: _shuffle_write(
                stamp_and_precombine(_range_lines(split)),
                partitions,
                batch_grouping.compact_key_hash,
            )
        )
        return blobs

    def reduce_task(phases: Phases, blobs: list[bytes]) -> bytes:
        received = phases.run(SHUFFLE_READ, lambda: _shuffle_read(blobs))
        merged = phases.run(MERGE, lambda: merge(received))
        panes = phases.run(OUTPUT, lambda: output_elements(merged))
        # As SparkBackend.collect sends them: plain tuples, rebuilt on the driver.
        return phases.run(TO_DRIVER, lambda: _to_driver(list(stage_records.as_plain_tuples(panes))))

    def on_driver(phases: Phases, blobs: list[bytes]) -> None:
        # As SparkBackend.collect reads them: WindowedValues again, the GC paused meanwhile.
        elements = stage_records.ElementsToTheDriver(AutoBatchedSerializer(CPickleSerializer()))
        received = phases.run(UNPICKLE, lambda: [wv for blob in blobs for wv in elements.load_stream(io.BytesIO(blob))])
        # As StepLoop records a captured PCollection's elements, and as the benchmark reads them.
        emissions = phases.run(EMISSIONS, lambda: list(StepEmissions(list(received), 0, 0)))
        phases.run(
            ROWS,
            lambda: [(e.value[0], e.window.start.micros // 1000, *e.value[1]) for e in emissions],
        )

    return _run_tasks(splits, partitions, map_task, reduce_task, on_driver)


def rdd_phases(splits: list[list[bytes]], partitions: int) -> Phases:
    from pyspark.shuffle import Aggregator

    # reduceByKey(add_pairs) is combineByKey with the identity as createCombiner.
    aggregator = Aggregator(lambda value: value, add_pairs, add_pairs)

    def map_task(phases: Phases, raw: list[bytes]) -> list[bytes]:
        lines = phases.run(READ, lambda: [line.decode() for line in raw])
        pairs = phases.run(PARSE, lambda: [window_pair(parse_line(line)) for line in lines])
        combined = phases.run(COMBINE, lambda: _merged(aggregator, pairs, False))
        blobs = phases.run(SHUFFLE_WRITE, lambda: _shuffle_write(combined, partitions))
        phases.count("records shuffled", len(combined))
        phases.run_streamed(
            lambda: _shuffle_write(
                _merged(
                    aggregator, (window_pair(parse_line(line.decode())) for line in raw), False
                ),
                partitions,
            )
        )
        return blobs

    def reduce_task(phases: Phases, blobs: list[bytes]) -> bytes:
        received = phases.run(SHUFFLE_READ, lambda: _shuffle_read(blobs))
        merged = phases.run(MERGE, lambda: _merged(aggregator, received, True))
        return phases.run(TO_DRIVER, lambda: _to_driver(merged))

    def on_driver(phases: Phases, blobs: list[bytes]) -> None:
        received = phases.run(
            UNPICKLE, lambda: [item for blob in blobs for item in _on_driver(blob)]
        )
        phases.run(
            ROWS,
            lambda: [
                (key, window_ms, count, total) for (key, window_ms), (count, total) in received
            ],
        )

    return _run_tasks(splits, partitions, map_task, reduce_task, on_driver)


def _run_tasks(
    splits: list[list[bytes]],
    partitions: int,
    map_task: Callable[[Phases, list[bytes]], list[bytes]],
    reduce_task: Callable[[Phases, list[bytes]], bytes],
    on_driver: Callable[[Phases, list[bytes]], None],
) -> Phases:
    """Every map task, then every reduce task on the blocks the map tasks wrote for it, then the driver."""
    phases = Phases()
    blocks: list[list[bytes]] = [[] for _ in range(partitions)]
    for raw in splits:
        for partition, blob in enumerate(map_task(phases, raw)):
            blocks[partition].append(blob)
            phases.count("bytes shuffled", len(blob))
    results = []
    for partition_blocks in blocks:
        results.append(reduce_task(phases, partition_blocks))
        phases.count("bytes to the driver", len(results[-1]))
    on_driver(phases, results)
    return phases


READ = "read lines (a byte range / utf-8 decode)"
PARSE = "parse, timestamp, assign window"
COMBINE = "key, combine before the shuffle"
FUSED = "parse..combine (sparkbeam: one pass)"
SHUFFLE_WRITE = "shuffle write (hash, pickle)"
SHUFFLE_READ = "shuffle read (unpickle)"
MERGE = "merge after the shuffle"
OUTPUT = "output elements"
TO_DRIVER = "results to the driver (pickle)"
UNPICKLE = "driver: unpickle results"
EMISSIONS = "driver: captured emissions"
ROWS = "driver: rows for the comparison"

PHASE_ORDER = (
    READ,
    PARSE,
    COMBINE,
    FUSED,
    SHUFFLE_WRITE,
    SHUFFLE_READ,
    MERGE,
    OUTPUT,
    TO_DRIVER,
    UNPICKLE,
    EMISSIONS,
    ROWS,
)


def report(events: int, sparkbeam: Phases, rdd: Phases) -> str:
    lines = [
        f"{'phase':<34} {'sparkbeam s':>11} {'µs/event':>9} {'rdd s':>8} {'µs/event':>9} {'ratio':>7}",
        "-" * 83,
    ]
    for phase in PHASE_ORDER:
        ours, theirs = sparkbeam.seconds.get(phase), rdd.seconds.get(phase)
        if phase == FUSED:  # the RDD code's two phases it does in one
            theirs = rdd.seconds.get(PARSE, 0.0) + rdd.seconds.get(COMBINE, 0.0)
        ratio = f"{ours / theirs:.1f}x" if ours is not None and theirs else "-"
        lines.append(
            f"{phase:<34} {_cell(ours, 11)} {_cell(ours, 9, events)} {_cell(theirs, 8)} "
            f"{_cell(theirs, 9, events)} {ratio:>7}"
        )
    total_ours, total_theirs = sum(sparkbeam.seconds.values()), sum(rdd.seconds.values())
    lines.append("-" * 83)
    lines.append(
        f"{'total Python CPU':<34} {_cell(total_ours, 11)} {_cell(total_ours, 9, events)} "
        f"{_cell(total_theirs, 8)} {_cell(total_theirs, 9, events)} {total_ours / total_theirs:>6.1f}x"
    )
    map_phases = (READ, PARSE, COMBINE, FUSED, SHUFFLE_WRITE)
    lines.append(
        f"{'check: map side streamed, GC on':<34} {_cell(sparkbeam.streamed, 11)} "
        f"{_cell(sparkbeam.streamed, 9, events)} {_cell(rdd.streamed, 8)} {_cell(rdd.streamed, 9, events)} "
        f"{sparkbeam.streamed / rdd.streamed:>6.1f}x"
    )
    lines.append(
        f"{'  (sum of its phases above)':<34} {_cell(_sum(sparkbeam, map_phases), 11)} {'':>9} "
        f"{_cell(_sum(rdd, map_phases), 8)}"
    )
    for name in ("records shuffled", "bytes shuffled", "bytes to the driver"):
        lines.append(f"{name:<34} {sparkbeam.counts[name]:>11,} {'':>9} {rdd.counts[name]:>8,}")
    return "\n".join(lines)


def _sum(phases: Phases, names: tuple[str, ...]) -> float:
    return sum(phases.seconds.get(name, 0.0) for name in names)


def _cell(seconds: float | None, width: int, per_events: int | None = None) -> str:
    if seconds is None:
        return f"{'-':>{width}}"
    if per_events is not None:
        return f"{seconds / per_events * 1e6:>{width}.2f}"
    return f"{seconds:>{width}.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument(
        "--partitions",
        type=int,
        default=2,
        help="input splits and shuffle partitions (default 2, as on 2 cores)",
    )
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    events = generate_events(args.events, args.seed)
    raw = [f"{key},{score},{event_ms}".encode() for key, score, event_ms in events]
    # Contiguous splits of the file, as textFile makes them.
    size = -(-len(raw) // args.partitions)
    splits = [raw[start : start + size] for start in range(0, len(raw), size)]
    ours = sparkbeam_phases(splits, args.partitions)
    theirs = rdd_phases(splits, args.partitions)
    print(
        f"{args.events:,} events in {len(splits)} splits, {args.partitions} shuffle partitions; "
        "CPU seconds summed over all tasks, then the driver"
    )
    print(report(args.events, ours, theirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
