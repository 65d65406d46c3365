"""Kafka batches through Arrow (``kafka_rows.py``) give the write-ahead log exactly what the
row-by-row path (``stream_rows.wal_records``) gives: the same elements and timestamps, the same
dead letters, drops and per-partition statistics. No Spark: the rows are built as PySpark's
``Row`` objects for one path and as an Arrow batch for the other."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import Row

from sparkbeam.io.kafka import BYTES_DESERIALIZER, STRING_DESERIALIZER, KafkaDecode
from sparkbeam.io.streaming import StreamReadSpec
from sparkbeam.runners.spark import kafka_rows, sealed_files
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.stream_rows import EVENT_MICROS, ORIGIN, PARTITION, wal_records
from sparkbeam.utils.timestamp import MAX_TIMESTAMP

SEALER = Sealer(bytes(32), scope="test")
INGEST = 1_700_000_000_000_000


class Collected:
    """Stands for the batch's accumulator."""

    def __init__(self) -> None:
        self.added: list[dict] = []

    def add(self, value: dict) -> None:
        self.added.append(value)


def records(count: int) -> list[dict]:
    rows = []
    for offset in range(count):
        partition = offset % 3
        value = f"user{offset % 7:04d},{offset}".encode()
        if offset % 11 == 5:
            value = b"\xff\xfe not UTF-8"
        time = 1_600_000_000_000_000 + offset * 1_000
        if offset % 13 == 7:
            time = None  # stamped on ingestion
        if offset == 20:
            time = MAX_TIMESTAMP.micros  # out of range: a dead letter
        rows.append(
            {
                "key": None if offset % 5 == 0 else f"k{offset}".encode(),
                "value": value,
                "topic": "events",
                "partition": partition,
                "offset": offset,
                PARTITION: f"events-{partition}",
                EVENT_MICROS: time,
            }
        )
    return rows


def through_rows(spec: StreamReadSpec, rows: list[dict], drop_before: int | None) -> tuple[list, dict]:
    stats = Collected()
    spark_rows = [
        Row(**{**row, ORIGIN: f"kafka {row['topic']}-{row['partition']} offset {row['offset']}"}) for row in rows
    ]
    out = list(wal_records(spec, INGEST, drop_before, "UTC", stats, spark_rows))
    return out, merged(stats)


def through_arrow(spec: StreamReadSpec, rows: list[dict], drop_before: int | None) -> tuple[list, dict]:
    stats = Collected()
    batch = pa.RecordBatch.from_pylist(
        rows,
        schema=pa.schema(
            [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
             ("offset", pa.int64()), (PARTITION, pa.string()), (EVENT_MICROS, pa.int64())]
        ),
    )
    # two batches, so that a task's statistics span them
    halves = [batch.slice(0, 40), batch.slice(40)]
    lines = [line.encode() for out in kafka_rows._pieces(spec, INGEST, drop_before, SEALER, stats, halves) for line in out.column(0).to_pylist()]
    # read back as a step reads the log (sealed_files.read_records, then wal_elements)
    return list(kafka_rows.wal_elements(sealed_files.opened(SEALER, "wal", "test", lines))), merged(stats)


def merged(stats: Collected) -> dict:
    total: dict = {"partitions": {}, "dropped": 0, "bad": 0}
    for part in stats.added:
        for key, (count, low, high) in part["partitions"].items():
            entry = total["partitions"].setdefault(key, [0, low, high])
            total["partitions"][key] = [entry[0] + count, min(entry[1], low), max(entry[2], high)]
        total["dropped"] += part["dropped"]
        total["bad"] += part["bad"]
    return total


def first_failing(value: bytes) -> str:
    if value.startswith(b"user0003"):
        msg = "no user 3"
        raise ValueError(msg)
    return value.decode()


@pytest.mark.parametrize(
    "key_deserializer, value_deserializer",
    [(BYTES_DESERIALIZER, BYTES_DESERIALIZER), (BYTES_DESERIALIZER, STRING_DESERIALIZER), (STRING_DESERIALIZER, first_failing)],
    ids=["bytes", "string-values", "a-function-that-fails"],
)
@pytest.mark.parametrize("drop_before", [None, 1_600_000_000_050_000], ids=["nothing-dropped", "behind-the-watermark-dropped"])
def test_arrow_path_writes_what_the_row_path_writes(key_deserializer, value_deserializer, drop_before):
    spec = StreamReadSpec(
        owner="ReadFromKafka", format="kafka", element="kafka", source_time_column="timestamp",
        decode=KafkaDecode.of("ReadFromKafka", key_deserializer, value_deserializer),
    )
    assert kafka_rows.applies(spec)
    rows = records(100)
    expected, expected_stats = through_rows(spec, rows, drop_before)
    got, got_stats = through_arrow(spec, rows, drop_before)
    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    assert got_stats == expected_stats
    assert expected_stats["bad"] > 0  # the cases do exercise dead letters...
    assert value_deserializer == BYTES_DESERIALIZER or expected_stats["bad"] >= 9  # ...and failed decoding
    assert drop_before is None or expected_stats["dropped"] > 0


def test_other_kafka_reads_keep_the_row_path():
    plain = {"owner": "ReadFromKafka", "format": "kafka", "source_time_column": "timestamp"}
    assert not kafka_rows.applies(StreamReadSpec(element="kafka_metadata", **plain))
    assert not kafka_rows.applies(StreamReadSpec(element="kafka", partition_by=lambda e: e[0], **plain))
    assert not kafka_rows.applies(StreamReadSpec(owner="ReadFromText", format="text", element="line"))
