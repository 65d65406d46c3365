"""Where a Kafka step's time goes: the Kafka benchmark's pipeline over a topic filled beforehand.

    python benchmarks/kafka_step_profile.py                        # 200,000 events, 20,000 a step
    python benchmarks/kafka_step_profile.py --profile /tmp/kprof   # with cProfile on driver and executors

``kafka_stream.py`` measures whether a stream keeps up at a rate; this one takes its
workload (``kafka_stream.py``'s events and pipeline, 4 partitions) with no rate and no
clock in the way, so that runs compare: ``--events`` events are produced first, then each
peer reads the topic from the start with ``available_now`` (Spark's ``availableNow``
trigger) and ``maxOffsetsPerTrigger=--per-step``, i.e. ``--events / --per-step`` steps
(micro-batches) of one second of the benchmark's rate each. Printed per peer: wall time,
steps and their p50/p95 (sparkbeam: the time between its steps' starts; Structured
Streaming: ``triggerExecution``), CPU seconds per million events (the driver's process
tree: JVM and Python workers) and their ratio; with ``--jobs``, the Spark jobs sparkbeam ran
per step and their share of the time, by job description (Spark's UI REST API).

``--profile DIR`` profiles sparkbeam's run: the driver with cProfile (``DIR/driver.prof``),
the executors' Python with PySpark's profiler (``DIR/executors/*.pstats``); both are also
summarised on stdout (top functions by own time). Profiled runs are slower: not figures.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import itertools
import json
import os
import pstats
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_stream import KEYS  # noqa: E402
from measuring import command_line, percentile, process_tree, start_spark  # noqa: E402

from tools.kafka_broker import KafkaBroker, connector_jars  # noqa: E402


def fill(bootstrap: str, topic: str, events: int) -> None:
    """``events`` of ``kafka_stream.py``'s events, as fast as the producer goes."""
    import random

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0, "queue.buffering.max.messages": 2_000_000})
    rng = random.Random(26)
    for _ in range(events):
        key = rng.randrange(KEYS)
        while True:
            try:
                producer.produce(topic, f"user{key:04d},{rng.randrange(1, 100)}".encode(), f"user{key:04d}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        msg = f"the producer did not deliver every event to {topic} within 120 s"
        raise RuntimeError(msg)


class CpuByKind:
    """CPU seconds of the driver's process tree by kind (the driver's Python, its JVM, the
    Python workers), sampled every half second from /proc while the run goes on, so that a
    worker that exits still counts what it used until its last sample."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker.process.pid  # type: ignore[union-attr]
        self.baseline = self._ticks()
        self.threads_before = self.jvm_threads()
        self.last: dict[int, tuple[str, int]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_done, daemon=True)
        self._thread.start()

    def _ours(self) -> list[int]:
        """The driver's process tree without the broker's (a child of this process too)."""
        broker = set(process_tree(self.broker))
        return [pid for pid in process_tree(os.getpid()) if pid not in broker]

    def _ticks(self) -> dict[int, tuple[str, int]]:
        root = os.getpid()
        ticks = {}
        for pid in self._ours():
            try:
                with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            line = command_line(pid)
            kind = "driver" if pid == root else "JVM" if "java" in line.split(" ", 1)[0] else "Python workers"
            ticks[pid] = (kind, int(fields[11]) + int(fields[12]))
        return ticks

    def jvm_threads(self) -> dict[str, int]:
        """CPU ticks of the JVM's live threads by name (digits dropped: a pool's threads together)."""
        import re

        ticks: dict[str, int] = defaultdict(int)
        for pid in self._ours():
            if "java" not in command_line(pid).split(" ", 1)[0]:
                continue
            for task in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{task}/stat", encoding="utf-8") as handle:
                        text = handle.read()
                except OSError:
                    continue
                name = re.sub(r"[0-9]+", "#", text[text.index("(") + 1 : text.rindex(")")])
                fields = text.rsplit(")", 1)[1].split()
                ticks[name] += int(fields[11]) + int(fields[12])
        return dict(ticks)

    def _sample_until_done(self) -> None:
        while not self._done.wait(0.5):
            self.last.update(self._ticks())

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        self.last.update(self._ticks())
        after = self.jvm_threads()
        self.threads = {name: (ticks - self.threads_before.get(name, 0)) / os.sysconf("SC_CLK_TCK") for name, ticks in after.items()}
        seconds: dict[str, float] = defaultdict(float)
        for pid, (kind, ticks) in self.last.items():
            seconds[kind] += (ticks - self.baseline.get(pid, (kind, 0))[1]) / os.sysconf("SC_CLK_TCK")
        self.total = sum(seconds.values())
        for name, thread_seconds in sorted(self.threads.items(), key=lambda item: -item[1])[:8]:
            seconds[f"JVM thread {name}"] = thread_seconds
        return dict(seconds)


def _jobs(spark: Any) -> list[dict[str, Any]]:
    url = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/jobs", timeout=30) as answer:
        return json.load(answer)


def _seconds(text: str) -> float:
    import datetime

    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%Z").timestamp()


def run_sparkbeam(args: argparse.Namespace, spark: Any, broker: KafkaBroker, topic: str, workdir: str) -> dict[str, Any]:
    import sparkbeam as beam
    from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
    from sparkbeam.options.pipeline_options import PipelineOptions
    from sparkbeam.transforms import window

    options = PipelineOptions(
        checkpoint_dir=os.path.join(workdir, "ck"), step_interval=args.step_interval, state_partitions=args.partitions,
        available_now=True, quiet=True, timeline_retention_steps=100_000,
    )
    p = beam.Pipeline(options=options)
    (
        p
        | "Read" >> beam.io.ReadFromKafka(
            {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}, topic,
            value_deserializer="org.apache.kafka.common.serialization.StringDeserializer",
            timestamp_policy="CreateTime", watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=5),
            options={"maxOffsetsPerTrigger": str(args.per_step)},
        )
        | "Parse" >> beam.MapTuple(lambda _, value: (value[:8], int(value[9:])))
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "Sum" >> beam.CombinePerKey(sum)
    )
    jobs_before = {job["jobId"] for job in _jobs(spark)} if args.jobs else set()
    driver = cProfile.Profile() if args.profile else None
    collector = spark.sparkContext.profiler_collector if args.profile else None
    if collector is not None:
        collector.profilers.clear()
    kinds = CpuByKind(broker)
    started = time.monotonic()
    if driver is not None:
        driver.enable()
    result = p.run()
    result.wait_until_finish()
    if driver is not None:
        driver.disable()
    wall = time.monotonic() - started
    records = result.watermarks().for_stage("Read/Read")
    times = [r.processing_time / 1e6 for r in records]
    read = sum(r.elements_in for r in records)
    row = {"read": read, "wall": wall, "kinds": kinds.stop(), "cpu": kinds.total, "steps": [b - a for a, b in itertools.pairwise(times)]}
    if args.jobs:
        row["jobs"] = [job for job in _jobs(spark) if job["jobId"] not in jobs_before]
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        driver_path = os.path.join(args.profile, "driver.prof")
        driver.dump_stats(driver_path)  # type: ignore[union-attr]
        executors = os.path.join(args.profile, "executors")
        collector.dump_profiles(executors)  # type: ignore[union-attr]
        row["profiles"] = (driver_path, sorted(glob.glob(os.path.join(executors, "*.pstats"))))
    return row


def run_structured(args: argparse.Namespace, spark: Any, broker: KafkaBroker, topic: str, workdir: str) -> dict[str, Any]:
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(args.per_step)).load()
    )
    value = F.col("value").cast("string")
    parsed = frame.select(
        F.substring(value, 1, 8).alias("key"), F.substring(value, 10, 4).cast("int").alias("score"), F.col("timestamp")
    )
    totals = parsed.withWatermark("timestamp", "5 seconds").groupBy(F.window("timestamp", "60 seconds"), "key").agg(F.sum("score"))
    kinds = CpuByKind(broker)
    started = time.monotonic()
    query = (
        totals.writeStream.outputMode("update").format("noop")
        .option("checkpointLocation", os.path.join(workdir, "ss-ck")).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    wall = time.monotonic() - started
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    return {
        "read": sum(p["numInputRows"] for p in progress), "wall": wall, "kinds": kinds.stop(), "cpu": kinds.total,
        "steps": [p["durationMs"]["triggerExecution"] / 1000 for p in progress],
    }


def print_jobs(jobs: list[dict[str, Any]], steps: int) -> None:
    """The jobs sparkbeam ran, grouped by description, with their time per step."""
    groups: dict[str, list[float]] = defaultdict(list)
    tasks: dict[str, int] = defaultdict(int)
    for job in jobs:
        if "completionTime" not in job:
            continue
        name = (job.get("description") or job.get("name") or "?").splitlines()[0][:70]
        groups[name].append(_seconds(job["completionTime"]) - _seconds(job["submissionTime"]))
        tasks[name] += job.get("numTasks", 0)
    total = sum(sum(times) for times in groups.values())
    print(f"Spark jobs: {sum(len(t) for t in groups.values())} ({sum(len(t) for t in groups.values()) / max(steps, 1):.1f} per step), {total:.1f} s in all")
    print(f"{'job (description)':<72} {'count':>6} {'tasks':>6} {'s':>7} {'share':>6}")
    for name, times in sorted(groups.items(), key=lambda item: -sum(item[1]))[:15]:
        print(f"{name:<72} {len(times):>6} {tasks[name]:>6} {sum(times):>7.1f} {sum(times) / max(total, 1e-9):>6.0%}")


def print_profile(paths: list[str], title: str, events: int, top: int) -> None:
    if not paths:
        return
    stats = pstats.Stats(*paths)
    print(f"\n{title}: {stats.total_tt:.1f} s of Python ({stats.total_tt / events * 1e6:.1f} µs per event), "  # type: ignore[attr-defined]
          f"{stats.total_calls / events:.1f} calls per event; top by own time:")  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]  # type: ignore[attr-defined]
    for (filename, line, name), (_, calls, own, cumulative, _) in rows:
        where = f"{Path(filename).name}:{line}({name})"
        print(f"  {own:7.2f} s own {cumulative:7.2f} s cum {calls:>10,} calls  {where[:90]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--per-step", type=int, default=20_000, help="events per step (maxOffsetsPerTrigger; default 20,000)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--step-interval", type=float, default=0.1, help="the least time between sparkbeam's steps (default 0.1 s)")
    parser.add_argument("--warmup-events", type=int, default=60_000,
                        help="each peer first reads this many events, not measured (the JVM compiles its code; default 60,000)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--peers", default="sparkbeam,structured")
    parser.add_argument("--jobs", action="store_true", help="list sparkbeam's Spark jobs by description (turns Spark's UI on)")
    parser.add_argument("--profile", metavar="DIR", help="profile sparkbeam's run into DIR (not figures)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    jars = connector_jars()
    if not jars.matches_spark:
        os.environ["SPARKBEAM_KAFKA_CONNECTOR_VERSION"] = jars.version
    settings = {
        "spark.jars": jars.spark_conf(), "spark.sql.shuffle.partitions": str(args.partitions),
        "spark.hadoop.cloneConf": "true", "spark.sql.streaming.numRecentProgressUpdates": "100000",
    }
    if args.jobs:
        settings.update({"spark.ui.enabled": "true", "spark.ui.port": "0", "spark.ui.retainedJobs": "100000"})
    if args.profile:
        settings["spark.python.profile"] = "true"
    spark = start_spark(args.master, [], "kafka-step-profile", settings)
    print(f"Kafka {jars.clients_version}, connector {jars.version}, PySpark {spark.version}, {args.master}; "
          f"{args.events:,} events, {args.per_step:,} a step, {args.partitions} partitions", flush=True)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="sparkbeam-kafka-profile-") as workdir, KafkaBroker(Path(workdir) / "broker", jars.clients_version) as broker:
        for peer in args.peers.split(","):
            run = run_sparkbeam if peer == "sparkbeam" else run_structured
            if args.warmup_events:  # the JVM's JIT compiles most of what the peer runs: not measured
                topic = broker.create_topic(f"warmup-{peer}", args.partitions)
                fill(broker.bootstrap, topic, args.warmup_events)
                run(argparse.Namespace(**{**vars(args), "profile": None, "jobs": False}), spark, broker, topic, os.path.join(workdir, f"warmup-{peer}"))
            topic = broker.create_topic(f"events-{peer}", args.partitions)
            fill(broker.bootstrap, topic, args.events)
            rows[peer] = run(args, spark, broker, topic, os.path.join(workdir, peer))
    header = f"{'peer':<11} {'read':>9} {'wall s':>7} {'steps':>6} {'step p50 s':>10} {'p95 s':>6} {'CPU s':>7} {'CPU s/1M ev':>11}"
    print(header + "\n" + "-" * len(header))
    for peer, row in rows.items():
        print(
            f"{peer:<11} {row['read']:>9,} {row['wall']:>7.1f} {len(row['steps']):>6} {percentile(row['steps'], 0.5):>10.2f} "
            f"{percentile(row['steps'], 0.95):>6.2f} {row['cpu']:>7.1f} {row['cpu'] / max(row['read'], 1) * 1e6:>11.1f}"
        )
    for peer, row in rows.items():
        print(f"  {peer} CPU s by process (sampled): " + ", ".join(f"{kind} {seconds:.1f}" for kind, seconds in row["kinds"].items() if seconds >= 0.5))
    if "sparkbeam" in rows and "structured" in rows:
        ours, theirs = (rows[p]["cpu"] / max(rows[p]["read"], 1) for p in ("sparkbeam", "structured"))
        print(f"CPU per event, sparkbeam / Structured Streaming: {ours / max(theirs, 1e-12):.2f}")
    if "sparkbeam" in rows and "jobs" in rows["sparkbeam"]:
        print_jobs(rows["sparkbeam"]["jobs"], len(rows["sparkbeam"]["steps"]))
    if "sparkbeam" in rows and "profiles" in rows["sparkbeam"]:
        driver_path, executor_paths = rows["sparkbeam"]["profiles"]
        print_profile([driver_path], "driver", args.events, args.top)
        print_profile(executor_paths, "executors", args.events, args.top)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
