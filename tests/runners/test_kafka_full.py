"""Kafka under kills and outages: SIGKILL of the driver at random steps, a broker that goes
away, a Spark Connect server without the connector.

Not in the default run (marker ``kafka_full``): ``python -m pytest -m kafka_full -n 1``
(``tests/kafka_full.sh``). A Kafka stream job (``kafka_job.py``) reads a 4-partition topic
at most 40 records a step, sums scores per team and minute, and writes the totals to an
exactly-once file sink and to a topic with ``WriteToKafka``. Each seed kills it with SIGKILL
once some steps have read data, wherever it is (the write-ahead log, a checkpoint, a sink),
and restarts it until it finishes; the files must equal an uninterrupted run's and plain
Python's totals, the stateful sequence must have no gap and no repeat, every stage's
watermarks must never go back, and the output topic read with ``read_committed`` must hold
every total at least once and, deduplicated by its run/step/attempt headers (the last attempt
of each step), exactly the uninterrupted run's records.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import random
import sys
import time
import uuid

import pytest

from sparkbeam.io.kafka import HEADER_ATTEMPT, HEADER_RUN, HEADER_STEP
from tests.runners import kafka_job
from tests.runners.test_kafka import new_topic, produce
from tests.runners.test_stream_recovery import (
    check_watermarks,
    committed,
    run_killable,
    steps_with_data,
    timeline,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.kafka_full, pytest.mark.timeout(1200)]

JOB = os.path.join(os.path.dirname(__file__), "kafka_job.py")
RECORDS = 240
T0 = 1_700_000_000


def write_input(kafka, topic: str, count: int = RECORDS) -> tuple[collections.Counter, collections.Counter]:
    """The topic's records; the totals per (team, window start) and the records per team."""
    rng = random.Random(11)
    totals: collections.Counter = collections.Counter()
    per_team: collections.Counter = collections.Counter()
    records = []
    for index in range(count):
        ts = (index // 40) * 30 + rng.uniform(0, 15) + (index % 2) * 14  # within the 20 s delay
        team, score = f"team{rng.randrange(3)}", rng.randrange(1, 10)
        totals[(team, int((T0 + ts) // 60 * 60))] += score
        per_team[team] += 1
        records.append((index % 4, team.encode(), f"{team},{score}".encode(), T0 + ts, None))
    produce(kafka, topic, records)
    return totals, per_team


def file_totals(output_dir: str) -> collections.Counter:
    found: collections.Counter = collections.Counter()
    for line, times in committed(output_dir, "totals").items():
        team, start, total = line.split(",")
        found[(team, int(start))] += int(total) * times
    return found


def sequence_is_exact(output_dir: str, per_team: collections.Counter) -> None:
    lines = committed(output_dir, "sequence")
    assert all(times == 1 for times in lines.values()), "a sequence number was written twice"
    numbers: dict[str, list[int]] = collections.defaultdict(list)
    for line in lines:
        team, number = line.split(",")
        numbers[team].append(int(number))
    assert {team: sorted(n) for team, n in numbers.items()} == {team: list(range(1, c + 1)) for team, c in per_team.items()}


def topic_output(kafka, topic: str) -> tuple[collections.Counter, collections.Counter]:
    """Everything committed to ``topic``, and the same deduplicated: per (run, step), the
    records of the last attempt written (a replay always follows the attempt it replaces)."""
    messages = _drain(kafka, topic)
    raw: collections.Counter = collections.Counter()
    attempts: dict[tuple[bytes, bytes], list] = {}
    for message in messages:
        headers = dict(message.headers())
        raw[(message.key(), message.value())] += 1
        key = (headers[HEADER_RUN], headers[HEADER_STEP])
        records = attempts.setdefault(key, [])
        if records and records[-1][0] != headers[HEADER_ATTEMPT]:
            records.clear()  # a later attempt of the step: the earlier one is replaced
        records.append((headers[HEADER_ATTEMPT], message.key(), message.value()))
    deduplicated = collections.Counter((k, v) for records in attempts.values() for _, k, v in records)
    return raw, deduplicated


def _drain(kafka, topic: str) -> list:
    """Every committed record of ``topic``: its partitions assigned directly (no consumer
    group to join, which took longer than any quiet period on a loaded machine) and read
    up to the end offsets they have now (the writers are done: no transaction is open)."""
    from confluent_kafka import TopicPartition

    consumer = kafka.consumer(**{"isolation.level": "read_committed"})
    partitions = kafka.admin().list_topics(topic, timeout=30).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    found, next_offset = [], dict.fromkeys(partitions, 0)
    deadline = time.monotonic() + 120
    try:
        while any(next_offset[p] < ends[p] for p in partitions):
            if time.monotonic() > deadline:
                pytest.fail(f"reading {topic} back: at offsets {next_offset} of {ends} after 120 s")
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    found.append(message)
                    next_offset[message.partition()] = message.offset() + 1
    finally:
        consumer.close()
    return sorted(found, key=lambda m: (m.partition(), m.offset()))


def run_job(args: list[str], log: str, kill_at: int | None, jars: str) -> bool:
    command = [sys.executable, JOB, *args, "--spark_conf", f"spark.jars={jars}", "--spark_conf", "spark.ui.enabled=false"]
    return run_killable(command, log, kill_at, 400, "the Kafka job")


@pytest.fixture(scope="module")
def topic_and_truth(kafka, spark, tmp_path_factory):
    topic = kafka.create_topic(f"scores-{uuid.uuid4().hex[:8]}", 4)
    expected, per_team = write_input(kafka, topic)
    base = tmp_path_factory.mktemp("uninterrupted")
    out_topic = kafka.create_topic(f"totals-{uuid.uuid4().hex[:8]}", 1)
    with contextlib.redirect_stderr(io.StringIO()):
        kafka_job.main(kafka.bootstrap, topic, out_topic, str(base / "out"), str(base / "ck"), str(base / "log.jsonl"))
    return topic, expected, per_team, str(base / "out"), topic_output(kafka, out_topic)


def test_a_connect_server_without_the_kafka_connector_is_refused_before_the_run(kafka, tmp_path):
    """A real server started without Spark's Kafka connector (the suite's test of this
    refusal gives the check the error such a server sends: test_kafka.py)."""
    import sparkbeam as beam
    from sparkbeam.options.pipeline_options import PipelineOptions
    from sparkbeam.runners.core.lowering.errors import TransformError
    from sparkbeam.runners.spark.connect.session import release_sessions
    from tools.connect_server import ConnectServer

    topic = new_topic(kafka, 1)
    server = ConnectServer(tmp_path / "server").start()
    try:
        p = beam.Pipeline(options=PipelineOptions(spark_remote=server.url, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
        p | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": kafka.bootstrap}, topic)
        with pytest.raises(TransformError, match=r"'Read/Read'.*the Spark Connect server has no Kafka connector on its class path.*--packages org.apache.spark:spark-sql-kafka-0-10_2.13:"):
            p.run()
    finally:
        release_sessions()
        server.stop()


def test_the_uninterrupted_run_matches_plain_python(topic_and_truth):
    _, expected, per_team, out, (raw, deduplicated) = topic_and_truth
    assert file_totals(out) == expected
    sequence_is_exact(out, per_team)
    assert raw == deduplicated  # no replay: nothing written twice
    assert raw == collections.Counter({(team.encode(), f"{start},{total}".encode()): 1 for (team, start), total in expected.items()})


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_random_steps_resumes_exactly(kafka, kafka_jars, topic_and_truth, tmp_path, seed):
    topic, expected, per_team, uninterrupted_out, (_, truth) = topic_and_truth
    rng = random.Random(seed)
    out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "log.jsonl")
    out_topic = kafka.create_topic(f"totals-{uuid.uuid4().hex[:8]}", 1)
    args = [kafka.bootstrap, topic, out_topic, out, ck, log]
    kill_points = sorted(rng.sample(range(1, 6), 2))
    restarts = 0
    for kill_at in [*kill_points, None]:
        finished = run_job(args, log, kill_at, kafka_jars.spark_conf())
        restarts += 0 if finished else 1
        if finished:
            break
    assert restarts >= 1
    assert committed(out, "totals") == committed(uninterrupted_out, "totals")
    assert file_totals(out) == expected
    sequence_is_exact(out, per_team)
    check_watermarks(timeline(log))
    raw, deduplicated = topic_output(kafka, out_topic)
    assert deduplicated == truth
    assert set(raw) == set(truth) and all(raw[k] >= truth[k] for k in truth)


def test_a_broker_that_goes_away_stops_the_stream_at_a_checkpoint_and_it_resumes_exactly_once_back(kafka_jars, spark, tmp_path):
    """The broker is killed (SIGKILL) while the stream reads; the source's query fails, the
    run stops with a checkpoint at the step boundary and says how to resume; with the broker
    back (same ports, same log), the resumed run reads the rest: the totals are exact."""
    import sparkbeam as beam
    from sparkbeam.options.pipeline_options import PipelineOptions
    from sparkbeam.runners.spark.checkpoints import CheckpointStore
    from sparkbeam.runners.spark.intake import SourceFailedError
    from tools.kafka_broker import KafkaBroker

    broker = KafkaBroker(tmp_path / "broker", kafka_jars.clients_version).start()
    try:
        topic = broker.create_topic("scores", 4)
        expected, _ = write_input(broker, topic)
        out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "log.jsonl")
        fast_failure = {"default.api.timeout.ms": "5000", "request.timeout.ms": "3000"}

        def pipeline():
            options = PipelineOptions(
                available_now=True, checkpoint_dir=ck, checkpoint_interval=100, step_interval=0.5,
                timeline_log=log, state_partitions=2, block_on_run=False,
            )
            p = beam.Pipeline(options=options)
            scores = p | "ReadScores" >> beam.io.ReadFromKafka(
                {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", **fast_failure}, topic,
                value_deserializer="org.apache.kafka.common.serialization.StringDeserializer", timestamp_policy="CreateTime",
                watermark=beam.io.BoundedOutOfOrdernessWatermarkEstimator(max_delay=20),
                options={"maxOffsetsPerTrigger": "20", "kafkaConsumer.pollTimeoutMs": "3000", "fetchOffset.numRetries": "1"},
            )
            (
                scores
                | "Parse" >> beam.MapTuple(lambda _, value: (value.split(",")[0], int(value.split(",")[1])))
                | "Minutes" >> beam.WindowInto(beam.window.FixedWindows(60))
                | "Sum" >> beam.CombinePerKey(sum)
                | "Lines" >> beam.Map(lambda team_total, w=beam.DoFn.WindowParam: f"{team_total[0]},{int(w.start)},{team_total[1]}")
                | "WriteTotals" >> beam.io.WriteToText(f"{out}/totals")
            )
            return p

        result = pipeline().run()
        deadline = time.monotonic() + 120
        while steps_with_data(log) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        broker.kill()
        with pytest.raises(SourceFailedError, match=r"'ReadScores/Read'.*query failed(.|\n)*checkpoint written; once the source is back, run again with --checkpoint_dir="):
            result.wait_until_finish(duration=180_000)
        newest = CheckpointStore(ck, []).newest()
        assert newest is not None and newest["step"] == max(r["step"] for r in timeline(log)) + 1
        broker.start()
        resumed = pipeline().run()
        resumed.wait_until_finish(duration=300_000)
        assert str(resumed.state).endswith("DONE")
        assert file_totals(out) == expected
        check_watermarks(timeline(log))
    finally:
        broker.stop()
