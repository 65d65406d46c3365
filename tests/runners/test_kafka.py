"""ReadFromKafka and WriteToKafka against a real broker (the ``kafka`` fixture: KRaft, loopback).

The suite's fast subset: records with keys, headers and both timestamp types, per-partition
watermarks with an idle partition, offsets in checkpoints, dead letters of records that do
not deserialise, a write read back with ``read_committed``, and the settings refused before
the first step, and a stream stopped at --max_steps and resumed from its checkpoint. Each
runs on both kinds of session (``spark_session_kind``): the classic session, and Spark
Connect at the tests' server (started with the connector when a test process collects
Kafka tests); the suite keeps the Connect cases of the stream resumed and of the two
refusals the server tells, the rest are in the full matrix (``tests/full_matrix.py``). The
kill loops and the broker outage are in ``test_kafka_full.py``.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import threading
import time
import uuid

import pytest

import sparkbeam as beam
from sparkbeam.io.kafka import HEADER_ATTEMPT, HEADER_RUN, HEADER_STEP, STRING_DESERIALIZER
from sparkbeam.io.watermarks import MonotonicWatermarkEstimator
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runner import PipelineState
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.spark import kafka as spark_kafka
from sparkbeam.runners.spark.checkpoints import IDENTITY, CheckpointStore
from sparkbeam.transforms import window
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, Timestamp
from tools.kafka_broker import SASL_USER

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300)]

T0 = 1_700_000_000  # seconds: the records' CreateTime


def options(**settings):
    return PipelineOptions(step_interval=0.2, state_partitions=2, **settings)


def new_topic(kafka, partitions=1, **config):
    return kafka.create_topic(f"t-{uuid.uuid4().hex[:10]}", partitions, **config)


def produce(kafka, topic, records):
    """``records``: (partition, key, value, seconds or None, headers) each; delivered before returning."""
    producer = kafka.producer()
    failures = []
    for partition, key, value, seconds, headers in records:
        producer.produce(
            topic, value, key, partition=partition, timestamp=0 if seconds is None else int(seconds * 1000),
            headers=headers, on_delivery=lambda error, _: error and failures.append(error),
        )
    assert producer.flush(30) == 0 and not failures, failures


def consume(kafka, topic, count, **config):
    consumer = kafka.consumer(**{"isolation.level": "read_committed", **config})
    consumer.subscribe([topic])
    found = []
    try:
        for _ in range(300):
            if len(found) >= count:
                break
            found.extend(m for m in consumer.consume(count - len(found), timeout=0.2) if m.error() is None)
    finally:
        consumer.close()
    return found


def test_records_with_keys_headers_and_create_times_keep_their_fields(spark_session_kind, kafka, tmp_path):
    topic = new_topic(kafka, 3)
    produce(kafka, topic, [(i % 3, f"k{i}".encode(), f"v{i}".encode(), T0 + i, [("h", f"{i}".encode())]) for i in range(9)])
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    records = p | "Read" >> beam.io.ReadFromKafka(
        {"bootstrap.servers": kafka.bootstrap, "auto.offset.reset": "earliest"}, [topic],
        with_metadata=True, timestamp_policy="CreateTime",
    )
    seen = beam.capture(records)
    result = p.run()
    rows = sorted(result.emissions(seen), key=lambda e: e.value.offset * 10 + e.value.partition)
    assert sorted((e.value.key, e.value.value, e.value.partition, e.timestamp.micros) for e in rows) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), i % 3, (T0 + i) * 1_000_000) for i in range(9)
    )
    assert {tuple(e.value.headers) for e in rows} == {(("h", f"{i}".encode()),) for i in range(9)}
    assert {e.value.topic for e in rows} == {topic} and {e.value.timestampType for e in rows} == {0}
    # Kafka's topic-partitions are the watermark's partitions; the source ends at +inf
    marks = [r.output_watermark for r in result.watermarks().for_stage("Read/Read")]
    assert marks == sorted(marks) and marks[-1] == MAX_TIMESTAMP.micros


def test_log_append_time_stamps_records_when_the_broker_wrote_them(spark_session_kind, kafka, tmp_path):
    topic = new_topic(kafka, 1, message_timestamp_type="LogAppendTime")
    before = Timestamp.now().micros
    produce(kafka, topic, [(0, b"k", b"v", T0, None)])  # the producer's CreateTime is replaced
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    seen = beam.capture(
        p | "Read" >> beam.io.ReadFromKafka(
            {"bootstrap.servers": kafka.bootstrap, "auto.offset.reset": "earliest"}, topic,
            timestamp_policy="LogAppendTime", with_metadata=True,
        )
    )
    (element,) = p.run().emissions(seen)
    assert element.value.timestampType == 1  # LogAppendTime
    assert before - 5_000_000 <= element.timestamp.micros <= Timestamp.now().micros


def test_records_that_do_not_deserialise_are_dead_letters_naming_topic_partition_and_offset(spark_session_kind, kafka, tmp_path):
    topic = new_topic(kafka, 2)
    produce(kafka, topic, [(0, b"a", b"fine", T0, None), (1, b"b", b"\xff\xfe bad", T0 + 1, None), (1, b"c", b"ok", T0 + 2, None)])
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    good, bad = p | "Read" >> beam.io.ReadFromKafka(
        {"bootstrap.servers": kafka.bootstrap, "auto.offset.reset": "earliest"}, topic,
        key_deserializer=STRING_DESERIALIZER, value_deserializer=STRING_DESERIALIZER, timestamp_policy="CreateTime",
    ).with_exception_handling()
    good_seen, bad_seen = beam.capture(good), beam.capture(bad)
    result = p.run()
    assert sorted(e.value for e in result.emissions(good_seen)) == [("a", "fine"), ("c", "ok")]
    (letter,) = [e.value for e in result.emissions(bad_seen)]
    assert letter.file == f"kafka {topic}-1 offset 0"
    assert "UnicodeDecodeError" in letter.error and "bad" in letter.record
    assert sum(r.dead_letters for r in result.watermarks().for_stage("Read/Read")) == 1


def test_an_idle_partition_stops_holding_the_watermark_and_rejoins_without_moving_it_back(spark_session_kind, kafka, tmp_path):
    """Partition 1 sends once and goes quiet while partition 0 keeps sending: after the idle
    timeout the watermark follows partition 0; when partition 1 sends again (behind), it
    rejoins without moving the watermark back. Offsets of both partitions are in the checkpoint.
    The run goes on in the background, fed as its timeline shows what it has read, and is
    cancelled (a checkpoint at the step it stops) once partition 1's late record is read."""
    topic = new_topic(kafka, 2)
    produce(kafka, topic, [(0, b"a", b"0", T0 + 10, None), (1, b"b", b"0", T0 + 20, None)])
    p = beam.Pipeline(options=options(**spark_session_kind, block_on_run=False, checkpoint_dir=str(tmp_path / "ck"), checkpoint_interval=1000))
    p | "Read" >> beam.io.ReadFromKafka(
        {"bootstrap.servers": kafka.bootstrap, "auto.offset.reset": "earliest"}, topic,
        timestamp_policy="CreateTime", watermark=MonotonicWatermarkEstimator(), idle_timeout=1,
    )
    result = p.run()

    def records():
        return result.watermarks().for_stage("Read/Read")

    def wait_for(condition, what):
        for _ in range(600):  # 60 s
            if result.state != PipelineState.RUNNING:
                result.wait_until_finish()  # raises the run's error
                pytest.fail(f"the stream ended before {what}")
            if condition(records()):
                return
            time.sleep(0.1)
        pytest.fail(f"the stream did not reach {what} in 60 s: {records()[-3:]}")

    try:
        wait_for(lambda rs: sum(r.elements_in for r in rs) == 2, "reading the first two records")
        sent, second = 2, 30
        while max(r.output_watermark for r in records()) <= (T0 + 20) * 1_000_000:  # partition 1 still holds it
            if second > 600:
                pytest.fail(f"partition 1 (quiet) still holds the watermark at {T0 + 20}: {records()[-3:]}")
            produce(kafka, topic, [(0, b"a", b"x", T0 + second, None)])
            sent, second = sent + 1, second + 5
            time.sleep(0.2)
        assert any(r.hold_key is not None and "(1 idle)" in r.hold_key for r in records())
        produce(kafka, topic, [(1, b"b", b"late", T0 + 25, None)])  # partition 1 rejoins, behind
        wait_for(lambda rs: sum(r.elements_in for r in rs) == sent + 1, "reading partition 1's late record")
    finally:
        assert result.cancel() in (PipelineState.CANCELLED, PipelineState.DONE)
    marks = [r.output_watermark for r in records()]
    assert marks == sorted(marks), "the watermark went back"
    assert max(marks) > (T0 + 25) * 1_000_000
    newest = CheckpointStore(str(tmp_path / "ck"), []).newest()
    offsets = json.loads(next(iter(newest["sources"].values()))["offsets"])
    assert offsets[topic] == {"0": sent - 1, "1": 2}


def test_write_to_kafka_writes_each_step_with_headers_to_deduplicate(spark_session_kind, kafka, tmp_path):
    source, sink = new_topic(kafka, 2), new_topic(kafka, 1)
    produce(kafka, source, [(i % 2, f"team{i % 3}".encode(), str(i).encode(), T0 + i, None) for i in range(12)])
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    (
        p
        | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": kafka.bootstrap, "auto.offset.reset": "earliest"}, source, timestamp_policy="CreateTime")
        | "Parse" >> beam.MapTuple(lambda team, score: (team.decode(), int(score)))
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "Sum" >> beam.CombinePerKey(sum)
        | "Format" >> beam.MapTuple(lambda team, total: (team, str(total)))
        | "Write" >> beam.io.WriteToKafka(
            {"bootstrap.servers": kafka.bootstrap}, sink,
            key_serializer="org.apache.kafka.common.serialization.StringSerializer",
            value_serializer="org.apache.kafka.common.serialization.StringSerializer",
        )
    )
    p.run()
    messages = consume(kafka, sink, 3)
    assert sorted((m.key(), m.value()) for m in messages) == [(b"team0", b"18"), (b"team1", b"22"), (b"team2", b"26")]
    checkpoint_id = json.loads((tmp_path / "ck" / IDENTITY).read_text())["id"]
    for message in messages:
        headers = dict(message.headers())
        assert headers[HEADER_RUN] == checkpoint_id.encode()
        assert int(headers[HEADER_STEP]) >= 0 and len(headers[HEADER_ATTEMPT]) == 32


def test_a_stream_stopped_at_max_steps_resumes_from_its_checkpoint_exactly(spark_session_kind, kafka, tmp_path):
    """``kafka_job``'s stream (test_kafka_full.py) on 40 records, at most 20 a step, stopped by --max_steps=1 (a checkpoint
    after every step), then resumed on its checkpoint directory to the end: the windows'
    totals written once each and equal to plain Python's, the sequence without a gap or a
    repeat, watermarks never back, the output topic written once (a clean stop replays
    nothing) with the same totals; the checkpoint holds the offsets the first step read
    to (Spark's, per partition: 5 of each of the 4), as on a classic session."""
    # The Kafka job's helpers, from the module of its kill loops (which imports this one).
    from tests.runners import kafka_job
    from tests.runners.test_kafka_full import (
        file_totals,
        sequence_is_exact,
        topic_output,
        write_input,
    )
    from tests.runners.test_stream_recovery import check_watermarks, committed, timeline

    topic, out_topic = new_topic(kafka, 4), new_topic(kafka, 1)
    expected, per_team = write_input(kafka, topic, 40)
    out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "log.jsonl")
    flags = [f"--{name}={value}" for name, value in spark_session_kind.items()]
    args = (kafka.bootstrap, topic, out_topic, out, ck, log, *flags, "--checkpoint_interval=1")
    with contextlib.redirect_stderr(io.StringIO()):
        kafka_job.main(*args, "--max_steps=1", per_step=20)
        newest = CheckpointStore(ck, []).newest()
        assert newest is not None and newest["step"] == 1 and not newest["finished"]
        (source,) = newest["sources"].values()
        assert json.loads(source["offsets"]) == {topic: dict.fromkeys("0123", 5)}
        kafka_job.main(*args, per_step=20)
    assert CheckpointStore(ck, []).newest()["finished"]
    read = [r["elements_in"] for r in timeline(log) if r["stage_id"] == 0 and r["elements_in"]]
    assert read == [20, 20]
    lines = committed(out, "totals")
    assert all(times == 1 for times in lines.values()), f"a window's total was written twice: {lines}"
    assert file_totals(out) == expected
    sequence_is_exact(out, per_team)
    check_watermarks(timeline(log))
    raw, deduplicated = topic_output(kafka, out_topic)
    assert raw == deduplicated == collections.Counter(
        {(team.encode(), f"{start},{total}".encode()): 1 for (team, start), total in expected.items()}
    )


def test_an_unreachable_broker_is_refused_before_the_first_step_naming_bootstrap_servers(spark_session_kind, tmp_path):
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    # the check waits for the consumer's default.api.timeout.ms (10 s when not given)
    p | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": "127.0.0.1:9", "default.api.timeout.ms": "2000"}, "scores")
    with pytest.raises(
        TransformError, match=r"'Read/Read'.*no Kafka broker answered at '127.0.0.1:9' \(consumer_config\['bootstrap.servers'\]\) within 2 s"
    ):
        p.run()
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck2")))
    p | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": "127.0.0.1:9", "default.api.timeout.ms": "soon"}, "scores")
    with pytest.raises(TransformError, match=r"'Read/Read'.*consumer_config\['default.api.timeout.ms'\] is a positive number of milliseconds, not 'soon'"):
        p.run()


def test_a_topic_that_does_not_exist_is_refused_naming_it(spark_session_kind, kafka, tmp_path):
    topic = new_topic(kafka, 1)
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    p | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": kafka.bootstrap}, [topic, "no-such-topic"])
    with pytest.raises(TransformError, match=r"'Read/Read'.*topics 'no-such-topic' does not exist on 127.0.0.1:\d+ \(consumer_config\['bootstrap.servers'\]\)"):
        p.run()
    p = beam.Pipeline(options=options(**spark_session_kind))
    p | beam.Create([(b"k", b"v")]) | "Write" >> beam.io.WriteToKafka({"bootstrap.servers": kafka.bootstrap}, "missing-out")
    with pytest.raises(TransformError, match=r"'Write'.*topic 'missing-out' does not exist"):
        p.run()


def test_wrong_credentials_are_refused_naming_the_sasl_settings(spark_session_kind, kafka, tmp_path):
    topic = new_topic(kafka, 1)
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{SASL_USER}" password="wrong";'
    config = {"bootstrap.servers": kafka.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
    p = beam.Pipeline(options=options(**spark_session_kind, available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    p | "Read" >> beam.io.ReadFromKafka(config, topic)
    with pytest.raises(TransformError, match=r"'Read/Read'.*refused the credentials of consumer_config \('security.protocol', 'sasl.mechanism', 'sasl.jaas.config'\)"):
        p.run()


class _ServerWithoutConnector:
    """Stands in for a Spark Connect session whose server was started without Spark's Kafka
    connector: its Kafka read fails as such a server's does (the error text as PySpark
    4.3's server sends it; a real server of that kind is in test_kafka_full.py, which
    takes a server start of its own)."""

    _active_session = threading.local()
    version = "4.3.0"
    read = property(lambda self: self)

    def format(self, name):
        return self

    def option(self, key, value):
        return self

    def load(self):
        msg = (
            "[KAFKA_DATA_SOURCE_NOT_ENABLED] Failed to find data source: kafka. Please deploy the application as per "
            "the deployment section of Structured Streaming + Kafka Integration Guide. SQLSTATE: 42K02"
        )
        raise RuntimeError(msg)


def test_a_connect_server_without_the_connector_is_refused_naming_what_to_start_it_with():
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.runners.spark.connect.kafka import check_on_server

    p = beam.Pipeline()
    p | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": "127.0.0.1:9"}, "scores")
    with pytest.raises(
        TransformError,
        match=r"'Read/Read'.*the Spark Connect server has no Kafka connector on its class path \(Spark 4.3.0\); start the server "
        r"with --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0, or --jars the connector's jar",
    ):
        check_on_server(_ServerWithoutConnector(), plan_stages(lower(p)))


def test_the_connector_version_is_read_from_the_classpath_and_a_mismatch_is_refused(spark, kafka_jars, tmp_path, monkeypatch):
    version, jar = spark_kafka.connector_version(spark)
    assert version == kafka_jars.version and jar.endswith(f"-{kafka_jars.version}.jar")
    # another version than PySpark's, without SPARKBEAM_KAFKA_CONNECTOR_VERSION naming it
    other = "3.5.1" if kafka_jars.matches_spark else kafka_jars.version
    if kafka_jars.matches_spark:
        monkeypatch.setattr(spark_kafka, "connector_version", lambda spark: (other, f"/jars/spark-sql-kafka-0-10_2.13-{other}.jar"))
    monkeypatch.delenv(spark_kafka.ACCEPTED_VERSION_VARIABLE, raising=False)
    p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    p | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": "127.0.0.1:9"}, "scores")
    with pytest.raises(TransformError, match=rf"'Read/Read'.*connector on the classpath is version {other} .*but PySpark is {spark.version}.*spark-sql-kafka-0-10_2.13:{spark.version}"):
        p.run()


def test_an_apache_beam_pipeline_with_beams_kafka_transforms_runs_on_sparkbeams_runner(spark_session_kind, kafka, tmp_path):
    """Beam's cross-language ReadFromKafka/WriteToKafka, with their documented arguments, run
    as sparkbeam's (no expansion service); what Spark cannot do is refused when applied."""
    import apache_beam as beam_
    from apache_beam.io import kafka as beam_kafka
    from apache_beam.options.pipeline_options import PipelineOptions as BeamOptions

    import sparkbeam
    from sparkbeam.runners.core.lowering.errors import UnsupportedError

    source, sink = new_topic(kafka, 2), new_topic(kafka, 1)
    produce(kafka, source, [(i % 2, b"k", f"{i}".encode(), T0 + i, None) for i in range(6)])
    flags = ["--streaming", "--available_now", f"--checkpoint_dir={tmp_path / 'ck'}", "--step_interval=0.2", "--state_partitions=2"]
    flags += [f"--{name}={value}" for name, value in spark_session_kind.items()]
    with beam_.Pipeline(runner=sparkbeam.SparkRunner(), options=BeamOptions(flags)) as p:
        (
            p
            | "Read" >> beam_kafka.ReadFromKafka(
                {"bootstrap.servers": kafka.bootstrap, "auto.offset.reset": "earliest"}, [source],
                value_deserializer="org.apache.kafka.common.serialization.StringDeserializer", timestamp_policy="CreateTime",
            )
            | "Double" >> beam_.MapTuple(lambda key, value: (key, str(2 * int(value)).encode()))
            | "Write" >> beam_kafka.WriteToKafka({"bootstrap.servers": kafka.bootstrap}, sink)
        )
    assert sorted(int(m.value()) for m in consume(kafka, sink, 6)) == [0, 2, 4, 6, 8, 10]
    p = beam_.Pipeline(runner=sparkbeam.SparkRunner())
    with pytest.raises(UnsupportedError, match=r"'Meta'.*with_metadata=True.*sparkbeam.io.ReadFromKafka\(with_metadata=True\)"):
        p | "Meta" >> beam_kafka.ReadFromKafka({"bootstrap.servers": kafka.bootstrap}, [source], with_metadata=True)
    with pytest.raises(UnsupportedError, match=r"'Bounded'.*max_num_records=5 is not supported on Spark: stop the stream with --max_steps"):
        p | "Bounded" >> beam_kafka.ReadFromKafka({"bootstrap.servers": kafka.bootstrap}, [source], max_num_records=5)
