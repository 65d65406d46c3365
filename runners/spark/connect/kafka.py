"""Kafka under Spark Connect: checked through the server before the first step, and each
step of a ``WriteToKafka`` written by the server.

A classic run checks Kafka from the driver's JVM (``runners/spark/kafka.py``: the
connector's class and version, then Kafka's ``Admin`` client describing the topics). A
Connect client has no JVM, so the server does it with Spark's own Kafka source: a batch
query of each read's (or write's) topics that reads at most one record but, to be planned,
loads the connector, reaches the brokers with the config's client settings (address,
credentials) and lists every topic's partitions and offsets (Spark refuses a batch range
empty by its options, ``latest`` to ``latest``). Its failure is told as a classic run tells
it (``KafkaCheck.refusal``: the same words), from the server's error text: no broker
answering, credentials refused, a topic that does not exist; and a server without the
connector on its class path is told which package or jars to start it with. The
connector's version is the server's business (built for its own Spark), not checked
against this client's PySpark.

A ``WriteToKafka`` step (``write_sink``): the step's elements become Kafka records on the
server (``mapInArrow``, the classic run's ``records``: key, value, and the headers naming
the run, the step and the attempt) and Spark's Kafka writer sends them, with the same
idempotent producer and the same at-least-once guarantee as on a classic session.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import Op
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.connect.session import made_active
from sparkbeam.runners.spark.kafka import (
    CLIENT_PREFIXES,
    KafkaCheck,
    check_seconds,
    client_timeouts,
    kafka_uses,
    record_schema,
    records,
    save,
)

__all__ = ["check_on_server", "write_sink"]

#: what Spark says when no Kafka connector is on its class path
_NO_CONNECTOR = re.compile(r"KAFKA_DATA_SOURCE_NOT_ENABLED|DATA_SOURCE_NOT_FOUND|Failed to find (?:the )?data source: kafka")
#: a Java exception's message in the server's text: "...SomeException: the message"
_JAVA_MESSAGE = re.compile(r"[\w.$]+(?:Exception|Error): (.+)")
#: records per Arrow batch a write task hands to Spark's Kafka writer
_BATCH_RECORDS = 512


def check_on_server(session: Any, plan: Any) -> None:
    """Every Kafka read and write of ``plan`` checked through the server (module docs)."""
    for op, config, topics, config_name, topic_setting in kafka_uses(plan):
        seconds = check_seconds(op, config, config_name)
        failure = _failure(session, config, topics, seconds)
        if failure is None:
            continue
        if _NO_CONNECTOR.search(failure):
            msg = (
                f"'{op.label}' (applied at {op.location}): the Spark Connect server has no Kafka connector on its class "
                f"path (Spark {session.version}); start the server with --packages "
                f"org.apache.spark:spark-sql-kafka-0-10_2.13:{session.version}, or --jars the connector's jar with "
                "kafka-clients', commons-pool2's and spark-token-provider-kafka's (README, 'Running on Spark Connect')"
            )
            raise TransformError(msg)
        checked = KafkaCheck(op, config.get("bootstrap.servers", ""), topics, config_name, topic_setting, seconds)
        missing = functools.partial(_missing_topics, session, config, topics, seconds)
        raise TransformError(checked.refusal(failure, _detail(failure), missing, "the Spark Connect server can reach it"))


def _failure(session: Any, config: dict[str, str], topics: list[str], seconds: float) -> str | None:
    """The server's error text for a batch read of ``topics`` with ``config``, or None."""
    reader = session.read.format("kafka")
    client = {key: value for key, value in config.items() if key.startswith(CLIENT_PREFIXES)}
    for key, value in {**client, **client_timeouts(seconds)}.items():
        reader = reader.option(f"kafka.{key}", value)
    reader = (
        reader.option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("fetchOffset.numRetries", "1")  # a failure is told, not retried
    )
    try:
        with made_active(session):
            reader.load().select("partition").limit(1).collect()
    except Exception as error:
        return str(error)
    return None


def _missing_topics(session: Any, config: dict[str, str], topics: list[str], seconds: float) -> list[str]:
    """The topics that do not exist, each asked alone (the server's error names none)."""
    if len(topics) == 1:
        return list(topics)
    return [topic for topic in topics if "UnknownTopicOrPartition" in (_failure(session, config, [topic], seconds) or "")]


def _detail(failure: str) -> str:
    """The line of the server's error that says what Kafka said."""
    for line in failure.splitlines():
        match = _JAVA_MESSAGE.search(line)
        if match and "kafka" in line.lower():
            return match.group(1).strip()[:300]
    return next((line.strip() for line in failure.splitlines() if line.strip()), failure)[:300]


# -- writing a step ---------------------------------------------------------------------
def write_sink(backend: Any, op: Op, frame: Any, params: Any) -> None:
    """A step of ``WriteToKafka`` (in batch, the run's one step), as a classic step writes it."""
    if frame.known_empty:
        return
    attempt = uuid.uuid4().hex  # a replayed step's records are told apart from the first attempt's
    task = functools.partial(record_task, op, params.step, backend.run_id, attempt, backend.error_key)
    with backend.user_errors():
        save(op, frame.df.mapInArrow(task, record_schema()))


def record_task(op: Op, step: int, run: str, attempt: str, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """On the server: a partition's elements as Arrow batches of Kafka records."""
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
    schema = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("headers", pa.list_(header))])

    def batch(rows: list[tuple]) -> Any:
        keys, values, headers = zip(*rows)
        plain = [[{"key": name, "value": value} for name, value in row] for row in headers]
        return pa.RecordBatch.from_arrays([pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(plain, pa.list_(header))], schema=schema)

    def work(container: Any) -> Iterator[Any]:
        elements = (wv for _, wv in tasks.elements_of(tasks.rows_of(batches), []))
        pending: list[tuple] = []
        for row in records(op, op.spec, step, run, attempt, elements):
            pending.append(row)
            if len(pending) >= _BATCH_RECORDS:
                yield batch(pending)
                pending = []
        if pending:
            yield batch(pending)

    return tasks.run_task(key, work)
