"""The streaming benchmark's Structured Streaming peer: hand-written PySpark over one file per batch."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
from streaming_idle import IdleFigure, by_difference
from streaming_peer import Peer, Run
from streaming_script import Script
from workloads import EPOCH_MS, WINDOW_SECONDS, Bench, Event

__all__ = ["StructuredPeer", "write_batches"]


def write_batches(batches: list[list[Event]], directory: str) -> None:
    """One JSON-lines file per arrival batch, with increasing modification times.

    Spark's file source takes new files oldest first; distinct mtimes make that the batch
    order whatever the file system's timestamp resolution.
    """
    os.makedirs(directory, exist_ok=True)
    base = time.time() - len(batches) - 10
    for index, batch in enumerate(batches):
        path = os.path.join(directory, f"batch-{index:05d}.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(
                json.dumps(
                    {"key": key, "score": score, "event_ms": event_ms}, separators=(",", ":")
                )
                + "\n"
                for key, score, event_ms in batch
            )
        os.utime(path, (base + index, base + index))


def batch_seconds(progress: list[Any], *, with_data: bool) -> list[float]:
    """How long each micro-batch with data (or each without) took, from the query's progress."""
    return [
        p["durationMs"].get("triggerExecution", 0) / 1000
        for p in progress
        if (p["numInputRows"] > 0) == with_data
    ]


class StructuredPeer(Peer):
    describe = (
        "PySpark Structured Streaming: JSON files, maxFilesPerTrigger=1 -> withWatermark -> "
        "groupBy(window(1 minute), key).agg(count, sum), update mode -> foreachBatch collect; "
        "last update per window"
    )

    def __init__(self, bench: Bench) -> None:
        from pyspark.sql import functions as F

        self.F = F
        self.bench = bench
        self.inputs: dict[int, str] = {}  # id(script) -> its directory of batch files
        self.runs = 0

    def input_dir(self, script: Script) -> str:
        directory = self.inputs.get(id(script))
        if directory is None:
            directory = tempfile.mkdtemp(prefix="structured-in-", dir=self.bench.workdir)
            write_batches(script.batches, directory)
            self.inputs[id(script)] = directory
        return directory

    def execute(
        self, directory: str, out_of_orderness_ms: int
    ) -> tuple[list[tuple[int, list[Any]]], list[Any], float]:
        """Run the query over every file of ``directory``: (batch id, rows) per micro-batch,
        the query's progress reports, and the seconds until its first batch started."""
        F = self.F
        spark = self.bench.spark
        self.runs += 1
        checkpoint = os.path.join(self.bench.workdir, f"structured-checkpoint-{self.runs}")
        updates: list[tuple[int, list[Any]]] = []

        def collect_batch(frame: Any, batch_id: int) -> None:
            updates.append((batch_id, frame.collect()))

        started = time.perf_counter()
        events = (
            spark.readStream.schema("key STRING, score INT, event_ms LONG")
            .option("maxFilesPerTrigger", 1)
            .json(directory)
            .withColumn("ts", F.timestamp_millis("event_ms"))
            .withWatermark("ts", f"{out_of_orderness_ms} milliseconds")
        )
        totals = (
            events.groupBy(F.window("ts", f"{WINDOW_SECONDS} seconds"), "key")
            .agg(F.count("*").alias("count"), F.sum("score").alias("total"))
            .select("key", F.unix_millis("window.start").alias("window_ms"), "count", "total")
        )
        query = (
            totals.writeStream.outputMode("update")
            .foreachBatch(collect_batch)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        progress = list(query.recentProgress)
        wall = time.perf_counter() - started
        in_batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
        return updates, progress, wall - in_batches

    def prepare(self, script: Script) -> tuple[str, int]:
        return self.input_dir(script), script.out_of_orderness_ms

    def run(self, prepared: tuple[str, int]) -> Run:
        directory, out_of_orderness_ms = prepared
        started = time.perf_counter()
        updates, progress, outside = self.execute(directory, out_of_orderness_ms)
        final: dict[tuple[str, int], tuple[int, int]] = {}
        for _, rows in sorted(updates, key=lambda update: update[0]):
            for row in rows:
                final[(row.key, row.window_ms)] = (row["count"], row.total)
        rows_out = [
            (key, window_ms, count, total) for (key, window_ms), (count, total) in final.items()
        ]
        seconds = time.perf_counter() - started
        with_data = [p for p in progress if p["numInputRows"] > 0]
        dropped = sum(
            operator.get("numRowsDroppedByWatermark", 0)
            for p in progress
            for operator in p.get("stateOperators", [])
        )
        data_seconds = batch_seconds(progress, with_data=True)
        empty_seconds = batch_seconds(progress, with_data=False)
        detail = (
            f"structured: {len(progress)} micro-batches ({len(with_data)} with data, mean "
            f"{statistics.fmean(data_seconds) if data_seconds else 0:.3f} s; {len(empty_seconds)} without, "
            f"mean {statistics.fmean(empty_seconds) if empty_seconds else 0:.3f} s); "
            f"{outside:.2f} s outside micro-batches (query start, stop); "
            f"{sum(len(rows) for _, rows in updates):,} updated rows collected; "
            f"{dropped} rows dropped by the watermark"
        )
        return Run(rows_out, seconds, len(progress), details=[detail])

    def idle(self, count: int) -> list[IdleFigure]:
        """A file with one event, then ``count`` empty files: one empty micro-batch each.

        Spark's watermark only moves with data, so these batches do not move it (sparkbeam's
        watermark-only steps do); each still runs the stateful aggregation over every state
        partition, reading and committing its state store, and calls foreachBatch.
        """
        seed = [[("user0000", 1, EPOCH_MS)]]
        base_dir = tempfile.mkdtemp(prefix="structured-idle0-", dir=self.bench.workdir)
        write_batches(seed, base_dir)
        idle_dir = tempfile.mkdtemp(prefix="structured-idle-", dir=self.bench.workdir)
        write_batches(seed + [[] for _ in range(count)], idle_dir)
        (_, progress, _), per_step = by_difference(
            lambda: self.execute(base_dir, 60_000), lambda: self.execute(idle_dir, 60_000), count
        )
        empty = batch_seconds(progress, with_data=False)
        note = f"{len(empty)} empty micro-batches ran for {count} empty files"
        return [
            IdleFigure(
                "structured",
                "empty micro-batches (one empty file each)",
                count,
                statistics.median(empty) if empty else None,
                statistics.fmean(empty) if empty else None,
                per_step,
                None,
                note,
            )
        ]
