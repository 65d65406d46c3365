"""A Kafka stream at a fixed rate through FixedWindows + CombinePerKey, beside Structured Streaming.

    python benchmarks/kafka_stream.py                     # 20,000 events/s for 5 minutes (the README figure)
    python benchmarks/kafka_stream.py --seconds 30        # a smoke run

A Kafka broker (``tools/kafka_broker.py``: KRaft, loopback, from Maven Central's jars) gets
a topic of 4 partitions; a producer process writes ``--rate`` events a second to it
(``user0042,17``: one of 1,000 keys and a score, stamped with its CreateTime) for
``--seconds``, once for each peer, each peer reading only what is produced while it runs
(``startingOffsets=latest``):

- ``sparkbeam``: ``ReadFromKafka(timestamp_policy='CreateTime',
  BoundedOutOfOrdernessWatermarkEstimator(5))`` → parse → ``WindowInto(FixedWindows(60))``
  → ``CombinePerKey(sum)``, steps every ``--step-interval`` s with a checkpoint every 10;
- ``structured``: the hand-written query on the same topic: ``from_csv``-style split →
  ``withWatermark('5 seconds')`` → ``groupBy(window(60 s), key).sum`` in update mode to a
  ``noop`` sink, triggered every ``--step-interval`` s.

It prints, per peer: events produced and read, the steps' (micro-batches') p50 and p95
duration (sparkbeam: the time between its steps' starts, so a step that takes longer than
the interval shows; Structured Streaming: its ``triggerExecution``), whether it kept up (at
the end, less than ``--step-interval`` + 3 s of events left unread), and the CPU seconds
of the driver, its JVM and Python workers per million events (the broker and producer
excluded), counted once every event sent was read (``drained``: a peer that fell behind gets
up to ``--drain-seconds`` more); then sparkbeam's CPU per event over Structured Streaming's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measuring import TreeCpu, percentile, start_spark  # noqa: E402

from tools.kafka_broker import KafkaBroker, connector_jars  # noqa: E402

KEYS = 1000


def produce(bootstrap: str, topic: str, rate: int, seconds: float) -> None:
    """Writes ``rate`` events a second for ``seconds``, in 10 ms slices; prints how many were delivered."""
    import random

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0, "queue.buffering.max.messages": 1_000_000})
    rng = random.Random(26)
    sent, start = 0, time.monotonic()
    failed = []

    def delivered(error: Any, _: Any) -> None:
        if error is not None:
            failed.append(error)

    while (elapsed := time.monotonic() - start) < seconds:
        due = int(rate * elapsed)
        while sent < due:
            key = rng.randrange(KEYS)
            producer.produce(topic, f"user{key:04d},{rng.randrange(1, 100)}".encode(), f"user{key:04d}".encode(), on_delivery=delivered)
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(60)
    if failed:
        print(f"{len(failed)} events not delivered, e.g. {failed[0]}", file=sys.stderr)
    print(sent - len(failed), flush=True)


class Producer:
    """The producer process (its CPU is not the peers')."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seconds: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--produce", bootstrap, topic, str(rate), str(seconds)], stdout=subprocess.PIPE, text=True
        )
        self.cpu = TreeCpu(self.process.pid)

    def wait(self) -> int:
        while self.process.poll() is None:
            self.cpu.sample()
            time.sleep(0.5)
        out = self.process.stdout.read() if self.process.stdout else ""
        return int(out.strip().splitlines()[-1])


def measured(spark_cpu: TreeCpu, others: list[TreeCpu]) -> float:
    for cpu in (spark_cpu, *others):
        cpu.sample()
    return spark_cpu.seconds - sum(cpu.seconds for cpu in others)


def run_sparkbeam(args: argparse.Namespace, broker: KafkaBroker, topic: str, workdir: str) -> dict[str, Any]:
    import sparkbeam as beam
    from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
    from sparkbeam.options.pipeline_options import PipelineOptions
    from sparkbeam.transforms import window

    options = PipelineOptions(
        checkpoint_dir=os.path.join(workdir, "ck"), step_interval=args.step_interval, state_partitions=args.partitions,
        block_on_run=False, quiet=True, timeline_retention_steps=100_000,
    )
    p = beam.Pipeline(options=options)
    (
        p
        | "Read" >> beam.io.ReadFromKafka(
            {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "latest"}, topic,
            value_deserializer="org.apache.kafka.common.serialization.StringDeserializer",
            timestamp_policy="CreateTime", watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=5),
        )
        | "Parse" >> beam.MapTuple(lambda _, value: (value[:8], int(value[9:])))
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "Sum" >> beam.CombinePerKey(sum)
    )
    result = p.run()
    return _drive(args, broker, topic, lambda: result.cancel(), lambda: _sparkbeam_figures(result))


def _sparkbeam_figures(result: Any) -> tuple[int, list[float]]:
    records = result.watermarks().for_stage("Read/Read")
    times = [r.processing_time / 1e6 for r in records]
    first = next((i for i, r in enumerate(records) if r.elements_in), len(records))
    steps = [b - a for a, b in zip(times[first:], times[first + 1 :])]
    return sum(r.elements_in for r in records), steps


def run_structured(args: argparse.Namespace, spark: Any, broker: KafkaBroker, topic: str, workdir: str) -> dict[str, Any]:
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic).option("startingOffsets", "latest").load()
    )
    value = F.col("value").cast("string")
    parsed = frame.select(
        F.substring(value, 1, 8).alias("key"), F.substring(value, 10, 4).cast("int").alias("score"), F.col("timestamp")
    )
    totals = parsed.withWatermark("timestamp", "5 seconds").groupBy(F.window("timestamp", "60 seconds"), "key").agg(F.sum("score"))
    query = (
        totals.writeStream.outputMode("update").format("noop")
        .option("checkpointLocation", os.path.join(workdir, "ss-ck"))
        .trigger(processingTime=f"{int(args.step_interval * 1000)} milliseconds").start()
    )
    while str(query.status.get("message", "")).startswith("Initializing"):
        time.sleep(0.1)

    def figures() -> tuple[int, list[float]]:
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        return sum(p["numInputRows"] for p in query.recentProgress), [p["durationMs"]["triggerExecution"] / 1000 for p in progress]

    return _drive(args, broker, topic, query.stop, figures)


def _drive(args: argparse.Namespace, broker: KafkaBroker, topic: str, stop: Any, figures: Any) -> dict[str, Any]:
    # Warm-up, not measured: the first micro-batch connects to Kafka and loads its classes
    # (seconds): a few events a second until some are read (a query still starting reads
    # from the latest offsets once it is up).
    deadline = time.monotonic() + 180
    warm_sent = 0
    while figures()[0] == 0 and time.monotonic() < deadline:
        warm_sent += Producer(broker.bootstrap, topic, 100, 1).wait()
        time.sleep(1)
    # Every warm-up event read before the measured stream starts, so that none is counted in
    # it (a slow first step can still be reading the warm-up's last events seconds later).
    while figures()[0] < warm_sent and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(args.step_interval * 3)
    warm_read, warm_steps = figures()
    spark_cpu = TreeCpu(os.getpid())
    broker_cpu = TreeCpu(broker.process.pid)  # type: ignore[union-attr]
    producer = Producer(broker.bootstrap, topic, args.rate, args.seconds)
    produced = producer.wait()
    time.sleep(args.step_interval + 3)  # what arrived last gets its step
    read, steps = figures()
    read, steps = read - warm_read, steps[len(warm_steps):]
    backlog = produced - read
    # CPU per event over every event sent: a peer that fell behind reads the rest first (up
    # to --drain-seconds), so that its CPU is not divided by only the events it had read
    deadline = time.monotonic() + args.drain_seconds
    while figures()[0] - warm_read < produced and time.monotonic() < deadline:
        time.sleep(0.5)
    cpu = measured(spark_cpu, [broker_cpu, producer.cpu])
    drained = figures()[0] - warm_read
    stop()
    return {
        "produced": produced, "read": read, "steps": len(steps),
        "p50": percentile(steps, 0.5), "p95": percentile(steps, 0.95),
        "keeps_up": backlog <= args.rate * (args.step_interval + 3), "backlog": backlog,
        "drained": drained, "cpu": cpu, "cpu_per_million": cpu / max(drained, 1) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--produce":
        bootstrap, topic, rate, seconds = sys.argv[2:6]
        produce(bootstrap, topic, int(rate), float(seconds))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20_000, help="events a second (default 20,000)")
    parser.add_argument("--seconds", type=float, default=300, help="how long each peer's stream runs (default 300)")
    parser.add_argument("--step-interval", type=float, default=1.0, help="seconds between steps / triggers (default 1)")
    parser.add_argument("--partitions", type=int, default=4, help="the topic's partitions and shuffle partitions (default 4)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--drain-seconds", type=float, default=300,
                        help="how long a peer that fell behind may take to read the rest, for its CPU per event (default 300)")
    parser.add_argument("--peers", default="sparkbeam,structured")
    args = parser.parse_args(argv)
    jars = connector_jars()
    if not jars.matches_spark:
        os.environ["SPARKBEAM_KAFKA_CONNECTOR_VERSION"] = jars.version
    spark = start_spark(
        args.master, [], "kafka-stream-benchmark",
        {"spark.jars": jars.spark_conf(), "spark.sql.shuffle.partitions": str(args.partitions),
         "spark.hadoop.cloneConf": "true", "spark.sql.streaming.numRecentProgressUpdates": "100000"},
    )
    print(f"Kafka {jars.clients_version}, connector {jars.version}, PySpark {spark.version}, {args.master}; "
          f"{args.rate:,} events/s for {args.seconds:.0f} s per peer, {args.partitions} partitions, step {args.step_interval} s", flush=True)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="sparkbeam-kafka-bench-") as workdir, KafkaBroker(Path(workdir) / "broker", jars.clients_version) as broker:
        for peer in args.peers.split(","):
            topic = broker.create_topic(f"events-{peer}", args.partitions)
            started = time.monotonic()
            if peer == "sparkbeam":
                rows[peer] = run_sparkbeam(args, broker, topic, os.path.join(workdir, peer))
            else:
                rows[peer] = run_structured(args, spark, broker, topic, os.path.join(workdir, peer))
            print(f"  {peer}: {time.monotonic() - started:.0f} s", flush=True)
    header = (
        f"{'peer':<11} {'produced':>10} {'read':>10} {'steps':>6} {'step p50 s':>10} {'p95 s':>6} {'keeps up':>8} "
        f"{'drained':>10} {'CPU s':>7} {'CPU s/1M ev':>11}"
    )
    print(header + "\n" + "-" * len(header))
    for peer, row in rows.items():
        print(
            f"{peer:<11} {row['produced']:>10,} {row['read']:>10,} {row['steps']:>6} {row['p50']:>10.2f} {row['p95']:>6.2f} "
            f"{'yes' if row['keeps_up'] else 'NO':>8} {row['drained']:>10,} {row['cpu']:>7.1f} {row['cpu_per_million']:>11.1f}"
        )
    if "sparkbeam" in rows and "structured" in rows:
        ratio = rows["sparkbeam"]["cpu_per_million"] / max(rows["structured"]["cpu_per_million"], 1e-9)
        print(f"CPU per event, sparkbeam / Structured Streaming: {ratio:.2f}")
    spark.stop()
    return 0 if all(row["keeps_up"] for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
