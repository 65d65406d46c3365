"""The streaming jobs that benchmarks/stream_soak.py starts, each in a process of its own.

``python stream_soak_jobs.py kill|rate|memory ARGS...`` runs one job: stream_soak.py kills
the first over and over and reads what the other two leave behind (see its docstring).
They live apart from the soak's driver so that a job's process imports only what it runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import measuring

SCHEMA = "user STRING, team STRING, score INT, ts DOUBLE"
TEAMS = [f"team{i}" for i in range(5)]
JOB_CONF = ["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2", "spark.ui.showConsoleProgress=false"]

def format_total(team_total: Any, window: Any = None) -> str:
    team, total = team_total
    return f"{team},{int(window.start)},{total}"


def kill_job(input_dir: str, output_dir: str, checkpoint_dir: str, timeline_log: str) -> None:
    import sparkbeam as beam
    from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
    from sparkbeam.transforms import window

    def with_window(team_total: Any, w: Any = beam.DoFn.WindowParam) -> str:
        return format_total(team_total, w)

    options = beam.PipelineOptions(
        spark_master="local[2]", spark_conf=JOB_CONF, available_now=True, checkpoint_dir=checkpoint_dir,
        checkpoint_interval=3, step_interval=0.2, timeline_log=timeline_log, state_partitions=2,
    )
    with beam.Pipeline(options=options) as p:
        good, bad = p | "ReadScores" >> beam.io.ReadFromJsonStream(
            input_dir, schema=SCHEMA, timestamp="ts",
            watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=20), max_files_per_trigger=1,
        ).with_exception_handling()
        (
            good
            | "TeamScore" >> beam.Map(lambda row: (row.team, row.score))
            | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
            | "Sum" >> beam.CombinePerKey(sum)
            | "Format" >> beam.Map(with_window)
            | "WriteTotals" >> beam.io.WriteToText(f"{output_dir}/totals", file_name_suffix=".txt")
        )
        bad | "Raw" >> beam.Map(lambda record: record.record) | "WriteBad" >> beam.io.WriteToText(f"{output_dir}/bad")


def rate_job(output_dir: str, checkpoint_dir: str, timeline_log: str, rows: str, steps: str, step_interval: str) -> None:
    import sparkbeam as beam
    from sparkbeam.transforms import window

    def with_window(key_value: Any, w: Any = beam.DoFn.WindowParam) -> str:
        return format_total(key_value, w)

    options = beam.PipelineOptions(
        spark_master="local[2]", spark_conf=JOB_CONF, checkpoint_dir=checkpoint_dir, checkpoint_interval=10,
        step_interval=float(step_interval), max_steps=int(steps), timeline_log=timeline_log, state_partitions=2,
    )
    with beam.Pipeline(options=options) as p:
        keyed = (
            p
            | "Rate" >> beam.io.ReadFromRate(rows_per_second=int(rows), num_partitions=2)
            | "Key" >> beam.Map(lambda value: (value % 100, value))
            | "Windows" >> beam.WindowInto(window.FixedWindows(10))
        )
        keyed | "Sum" >> beam.CombinePerKey(sum) | "FormatSum" >> beam.Map(with_window) | "WriteSums" >> beam.io.WriteToText(f"{output_dir}/sums")
        (
            keyed
            | "Count" >> beam.combiners.Count.PerKey()
            | "FormatCount" >> beam.Map(with_window)
            | "WriteCounts" >> beam.io.WriteToText(f"{output_dir}/counts")
        )


def memory_job(output_dir: str, checkpoint_dir: str, timeline_log: str, capture_log: str, samples_log: str,
               rows: str, step_interval: str, retention: str, sample_seconds: str) -> None:
    """Runs until it is interrupted (SIGINT), however many steps that is."""
    import sparkbeam as beam
    from sparkbeam.transforms import window

    def with_window(key_value: Any, w: Any = beam.DoFn.WindowParam) -> str:
        return format_total(key_value, w)

    sampler = MemorySampler(samples_log, float(sample_seconds))
    sampler.start()
    options = beam.PipelineOptions(
        spark_master="local[2]", spark_conf=JOB_CONF, checkpoint_dir=checkpoint_dir, checkpoint_interval=10,
        step_interval=float(step_interval), timeline_log=timeline_log,
        timeline_retention_steps=int(retention), state_partitions=2,
    )
    try:
        with beam.Pipeline(options=options) as p:
            sums = (
                p
                | "Rate" >> beam.io.ReadFromRate(rows_per_second=int(rows), num_partitions=2)
                | "Spread" >> beam.Reshuffle()  # a random key per row: state for none of them may stay
                | "Key" >> beam.Map(lambda value: (value % 100, value))
                | "Windows" >> beam.WindowInto(window.FixedWindows(10))
                | "Sum" >> beam.CombinePerKey(sum)
            )
            beam.capture(sums, log=capture_log)  # kept for the last steps only; every pane in the log
            sums | "Format" >> beam.Map(with_window) | "WriteSums" >> beam.io.WriteToText(f"{output_dir}/sums")
    finally:
        sampler.finish()


class MemorySampler(threading.Thread):
    """In the job's own process: every ``interval`` seconds, once Spark is up, one JSON line of
    the driver's RSS and Python objects, the JVM's RSS, live heap and storage memory, and
    the Python workers' count and PSS (see ``measuring``)."""

    def __init__(self, path: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        from pyspark import SparkContext

        while SparkContext._active_spark_context is None:
            if self.stopped.wait(0.5):
                return
        while True:
            self.sample(SparkContext._active_spark_context)
            if self.stopped.wait(self.interval):
                return

    def finish(self) -> None:
        self.stopped.set()
        self.join()

    def sample(self, spark_context: Any) -> None:
        import gc

        gc.collect()  # count what is alive, not cycles awaiting collection
        tree = measuring.process_tree(os.getpid())
        commands = {pid: measuring.command_line(pid) for pid in tree}
        java = [pid for pid, command in commands.items() if os.path.basename(command.split(" ")[0]) == "java"]
        workers = [pid for pid, command in commands.items() if "pyspark.daemon" in command or "pyspark.worker" in command]
        row: dict[str, Any] = {
            "wall": time.time(),
            "driver_rss_mb": measuring.rss_mb(os.getpid()),
            "python_objects": len(gc.get_objects()),
            "jvm_rss_mb": sum(measuring.rss_mb(pid) or 0.0 for pid in java),
            "workers": len(workers),
            "workers_pss_mb": measuring.pss_mb(workers),
        }
        try:
            row.update(measuring.spark_jvm_memory(spark_context))
        except Exception:  # the context is stopping: the /proc figures still count
            row.update(jvm_heap_mb=None, storage_mb=None)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")


JOBS = {"kill": (kill_job, 4), "rate": (rate_job, 6), "memory": (memory_job, 9)}


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in JOBS or len(argv) - 1 != JOBS[argv[0]][1]:
        expected = ", ".join(f"{name} ({count} arguments)" for name, (_, count) in JOBS.items())
        print(f"usage: stream_soak_jobs.py JOB ARGS...; the jobs are {expected}; got {argv}", file=sys.stderr)
        return 2
    job, _ = JOBS[argv[0]]
    job(*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
