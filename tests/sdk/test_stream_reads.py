"""Unbounded reads refuse bad settings when they are constructed, naming the read and the setting."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.io.streaming import kafka_reader_options
from sparkbeam.io.watermarks import MonotonicWatermarkEstimator, WalltimeWatermarkEstimator


@pytest.mark.parametrize("setting", ["allowed_delay", "idle_timeout"])
def test_negative_delay_or_idle_interval_is_refused(setting):
    with pytest.raises(ValueError, match=rf"ReadFromJsonStream: {setting} must not be negative, got -3"):
        beam.io.ReadFromJsonStream("/in", **{setting: -3})


def test_negative_estimator_delay_is_refused():
    with pytest.raises(ValueError, match="max_delay must be >= 0"):
        beam.io.BoundedOutOfOrdernessWatermarkEstimator(max_delay=-1)


def test_timestamp_field_missing_from_the_schema_is_refused():
    with pytest.raises(ValueError, match=r"ReadFromCsvStream: timestamp field 'ts' is not in the schema \(fields: user, score\)"):
        beam.io.ReadFromCsvStream("/in", schema="user STRING, score INT", timestamp="ts")


def test_text_lines_have_no_fields_to_name():
    with pytest.raises(TypeError, match="ReadFromTextStream: timestamp must be a function of the element"):
        beam.io.ReadFromTextStream("/in", timestamp="ts")


def test_unknown_watermark_setting_is_refused():
    with pytest.raises(TypeError, match="ReadFromRate"):
        beam.io.ReadFromRate(10, watermark="eventually")


def test_default_estimators_follow_the_time_source():
    assert isinstance(beam.io.ReadFromTextStream("/in").spec().watermark, WalltimeWatermarkEstimator)
    assert isinstance(beam.io.ReadFromTextStream("/in", timestamp=float).spec().watermark, MonotonicWatermarkEstimator)
    assert isinstance(beam.io.ReadFromRate(5).spec().watermark, MonotonicWatermarkEstimator)
    assert beam.io.ReadFromRate(5).spec().source_time_column == "timestamp"


def test_reads_are_unbounded_roots():
    p = beam.Pipeline()
    lines = p | beam.io.ReadFromSocket("localhost", 9999)
    assert not lines.is_bounded
    with pytest.raises(TypeError, match="root transform"):
        lines | "Again" >> beam.io.ReadFromTextStream("/in")


def test_kafka_options_follow_beams_consumer_config():
    options = kafka_reader_options({"bootstrap.servers": "b:9092", "group.id": "g", "security.protocol": "SSL"}, ["t"])
    assert options == {"kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SSL", "subscribe": "t"}
    read = beam.io.ReadFromKafka({"bootstrap.servers": "b:9092"}, "t", timestamp_policy="LogAppendTime")
    assert read.spec().source_time_column == "timestamp"
    with pytest.raises(ValueError, match="timestamp_policy must be one of"):
        beam.io.ReadFromKafka({"bootstrap.servers": "b:9092"}, "t", timestamp_policy="Whenever")


def test_write_to_kafka_takes_beams_arguments_and_refuses_what_spark_sets_itself():
    from sparkbeam.io.kafka import STRING_SERIALIZER, WriteToKafka

    write = WriteToKafka({"bootstrap.servers": "b:9092", "compression.type": "lz4"}, "out", value_serializer=STRING_SERIALIZER)
    assert write.spec.serialize((b"k", "v")) == (b"k", b"v")
    assert write.spec.writer_options() == {
        "kafka.bootstrap.servers": "b:9092", "kafka.compression.type": "lz4", "kafka.enable.idempotence": "true", "kafka.acks": "all"
    }
    with pytest.raises(TypeError, match=r"ByteArraySerializer takes bytes, got str 'k'"):
        write.spec.serialize(("k", "v"))
    with pytest.raises(ValueError, match=r"producer_config\['value.serializer'\] is Spark's"):
        WriteToKafka({"bootstrap.servers": "b", "value.serializer": "x"}, "out")
    with pytest.raises(ValueError, match=r"key_serializer must be one of .*ByteArraySerializer.* or a Python function, got 'LongSerializer'"):
        WriteToKafka({"bootstrap.servers": "b"}, "out", key_serializer="LongSerializer")
    with pytest.raises(ValueError, match=r"'bootstrap.servers'"):
        WriteToKafka({}, "out")


def test_kafka_reads_refuse_beams_arguments_spark_cannot_honour():
    with pytest.raises(ValueError, match=r"^ReadFromKafka: max_read_time=10 is not supported on Spark: stop the stream with --max_steps"):
        beam.io.ReadFromKafka({"bootstrap.servers": "b"}, "t", max_read_time=10)
    read = beam.io.ReadFromKafka({"bootstrap.servers": "b"}, "t", value_deserializer=lambda raw: raw.decode().upper(), consumer_polling_timeout=5)
    assert read.spec().decode(b"k", b"v") == (b"k", "V")
    assert beam.io.ReadFromKafka({"bootstrap.servers": "b"}, "t").spec().decode is None  # bytes as read
