"""Kafka on Spark: checks before the first step, and each step of a ``WriteToKafka`` written.

Before the first step (``check_before_first_step``), once Spark is up, every Kafka read and
write is checked from the driver, so that a mistake is refused naming the transform and the
setting instead of surfacing as a stuck query or a failed task:

- Spark's Kafka connector is on the class path and is PySpark's version (another version is
  accepted only when ``SPARKBEAM_KAFKA_CONNECTOR_VERSION`` names it: its classes are built
  against Spark's internals of its own release);
- the brokers of ``bootstrap.servers`` answer, with the credentials given
  (``security.protocol``, ``sasl.*``, ``ssl.*``), through the connector's own
  ``kafka-clients`` Admin client in the driver's JVM;
- every topic read or written exists (the tests' and most production brokers refuse to
  create topics on first use).

A ``WriteToKafka`` step is written with Spark's own Kafka writer (``write_step``): the
step's records with their key, value and headers, by Kafka's idempotent producer
(``enable.idempotence=true``, ``acks=all``), so a retried request writes no duplicate. A step
replayed after a crash is written again: the guarantee is at-least-once, and each record
carries headers that say which step and which attempt wrote it, for deduplication (see
``sparkbeam.io.kafka``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from sparkbeam.io.kafka import HEADER_ATTEMPT, HEADER_RUN, HEADER_STEP, WriteKafkaSpec
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import Op
from sparkbeam.runners.spark.metrics import metered_by
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = [
    "ACCEPTED_VERSION_VARIABLE",
    "CLIENT_PREFIXES",
    "KafkaCheck",
    "check_before_first_step",
    "check_connector",
    "check_kafka",
    "check_seconds",
    "client_timeouts",
    "kafka_uses",
    "record_schema",
    "records",
    "save",
    "write_step",
]

#: names a connector version other than PySpark's that the user accepts
ACCEPTED_VERSION_VARIABLE = "SPARKBEAM_KAFKA_CONNECTOR_VERSION"
_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
_JAR_VERSION = re.compile(r"spark-sql-kafka-0-10_[0-9.]+-([^/]+?)\.jar$")
#: client settings a check takes from a consumer or producer config (where the brokers are,
#: how to reach them, who asks)
CLIENT_PREFIXES = ("bootstrap.servers", "security.protocol", "sasl.", "ssl.", "client.dns.lookup", "client.id")
_CHECK_SECONDS = 10


def _where(op: Op) -> str:
    return f"'{op.label}' (applied at {op.location})"


def connector_version(spark: Any) -> tuple[str | None, str | None]:
    """The version and jar of the Kafka connector on the driver's class path (None, None if absent)."""
    jvm = spark._jvm
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        provider = jvm.java.lang.Class.forName(_PROVIDER, False, loader)
    except Exception:
        return None, None
    location = None
    try:
        location = str(provider.getProtectionDomain().getCodeSource().getLocation().toString())
    except Exception:  # a class with no code source (built into a fat jar...): its manifest may say
        location = None
    match = _JAR_VERSION.search(location or "")
    if match:
        return match.group(1), location
    package = provider.getPackage()
    version = package.getImplementationVersion() if package is not None else None
    return (str(version) if version else None), location


def check_connector(spark: Any, op: Op) -> None:
    """Spark's Kafka connector is there and is PySpark's version (or the accepted one)."""
    spark_version = spark.version
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}"
    version, jar = connector_version(spark)
    if version is None and jar is None:
        msg = (
            f"{_where(op)}: Spark's Kafka connector is not on the classpath; start with "
            f"--spark_conf spark.jars.packages={package} (or spark.jars=<its jar and kafka-clients'>)"
        )
        raise TransformError(msg)
    accepted = os.environ.get(ACCEPTED_VERSION_VARIABLE)
    if version != spark_version and (version is None or version != accepted):
        msg = (
            f"{_where(op)}: Spark's Kafka connector on the classpath is version {version or 'unknown'} ({jar}), "
            f"but PySpark is {spark_version}: the connector is built against its own Spark release. "
            f"Set spark.jars.packages={package}, or, to run with {version or 'it'} anyway, "
            f"set {ACCEPTED_VERSION_VARIABLE}={version or '<its version>'}"
        )
        raise TransformError(msg)


def check_seconds(op: Op, config: dict[str, str], config_name: str) -> float:
    """How long the check waits for the brokers: the config's ``default.api.timeout.ms``
    (Kafka's own bound on a client call, which Spark's consumer also takes), else 10 s."""
    configured = config.get("default.api.timeout.ms")
    if configured is None:
        return float(_CHECK_SECONDS)
    try:
        milliseconds = int(configured)
    except (TypeError, ValueError):
        milliseconds = -1
    if milliseconds <= 0:
        msg = f"{_where(op)}: {config_name}['default.api.timeout.ms'] is a positive number of milliseconds, not {configured!r}"
        raise TransformError(msg)
    return max(milliseconds / 1000, 1.0)


def client_timeouts(seconds: float) -> dict[str, str]:
    """The Kafka client settings that bound a check's calls by ``seconds``: the call's own
    bound ends before the caller stops waiting for it, so that the cause reported is
    Kafka's; a client refuses a request timeout longer than that bound (Kafka's default
    request timeout, 30 s, is longer than the 10 s a check waits)."""
    call = int(max(seconds - 2, seconds * 0.8) * 1000)
    return {
        "default.api.timeout.ms": str(call),
        "request.timeout.ms": str(min(5000, call)),
        # one attempt at a broker that is not there, rather than reconnecting in a tight loop
        "reconnect.backoff.max.ms": "1000",
    }


def _admin_properties(jvm: Any, config: dict[str, str], seconds: float) -> Any:
    properties = jvm.java.util.Properties()
    for key, value in config.items():
        if key.startswith(CLIENT_PREFIXES):
            properties.setProperty(key, str(value))
    for key, value in client_timeouts(seconds).items():
        properties.setProperty(key, value)
    return properties


def _cause_names(error: BaseException) -> list[tuple[str, str]]:
    """The Java exception and its causes, as (class name, message) pairs."""
    chain = []
    java = getattr(error, "java_exception", None)
    seen = 0
    while java is not None and seen < 10:
        chain.append((str(java.getClass().getName()), str(java.getMessage())))
        java = java.getCause()
        seen += 1
    return chain


@attrs.frozen
class KafkaCheck:
    """What a check before the first step asks of Kafka, and how its failure is told (the
    same words on a classic session and through Spark Connect, ``connect/kafka.py``)."""

    op: Op
    servers: str
    topics: list[str]
    #: ``consumer_config`` or ``producer_config``
    config_name: str
    #: ``topics`` or ``topic``
    topic_setting: str
    seconds: float

    def refusal(self, failure: str, detail: str, missing: Callable[[], list[str]], reaches: str = "the broker is up") -> str:
        """The refusal of a failed check: ``failure`` holds the Kafka exceptions' class
        names (the whole failure's text will do), ``detail`` the line to quote, ``missing``
        finds the topics that do not exist, ``reaches`` what to check of an unreachable broker."""
        where, servers, config_name = _where(self.op), self.servers, self.config_name
        if "UnknownTopicOrPartition" in failure:
            gone = missing()
            return (
                f"{where}: {self.topic_setting} {', '.join(repr(t) for t in gone) or self.topics} "
                f"{'does' if len(gone) == 1 else 'do'} not exist on {servers} ({config_name}['bootstrap.servers']); "
                "create the topic first (sparkbeam does not create topics)"
            )
        if "Authentication" in failure or "SaslAuthentication" in failure:
            return (
                f"{where}: {servers} refused the credentials of {config_name} "
                f"('security.protocol', 'sasl.mechanism', 'sasl.jaas.config'): {detail}"
            )
        if "Authorization" in failure:
            return f"{where}: {servers} denies access to {self.topic_setting} {self.topics} for {config_name}'s principal: {detail}"
        if "Timeout" in failure or "ConfigException" in failure:
            return (
                f"{where}: no Kafka broker answered at {servers!r} ({config_name}['bootstrap.servers']) "
                f"within {self.seconds:g} s ({detail}); check the address and that {reaches} "
                f"(a slow one: raise {config_name}['default.api.timeout.ms'])"
            )
        return f"{where}: cannot reach Kafka at {servers!r} with {config_name}: {detail}"


def check_kafka(spark: Any, op: Op, config: dict[str, str], topics: Iterable[str], config_name: str, topic_setting: str) -> None:
    """The brokers answer with these credentials and every topic exists; refused naming the
    setting otherwise (``config_name`` is ``consumer_config`` or ``producer_config``)."""
    jvm = spark._jvm
    servers = config.get("bootstrap.servers", "")
    topics = list(topics)
    seconds = check_seconds(op, config, config_name)
    admin = None
    try:
        admin = jvm.org.apache.kafka.clients.admin.Admin.create(_admin_properties(jvm, config, seconds))
        result = admin.describeTopics(jvm.java.util.ArrayList(topics))
        result.allTopicNames().get(int(seconds * 1000), jvm.java.util.concurrent.TimeUnit.MILLISECONDS)
    except Exception as error:
        chain = _cause_names(error)
        names = " ".join(name for name, _ in chain)
        detail = next((message for _, message in reversed(chain) if message and message != "None"), str(error).splitlines()[0])
        checked = KafkaCheck(op, servers, list(topics), config_name, topic_setting, seconds)
        raise TransformError(checked.refusal(names, detail, lambda: _missing_topics(admin, jvm, topics))) from None
    finally:
        if admin is not None:
            with contextlib.suppress(Exception):  # closing after a failure: the failure is what is reported
                admin.close(jvm.java.time.Duration.ofSeconds(2))


def _missing_topics(admin: Any, jvm: Any, topics: list[str]) -> list[str]:
    if admin is None:
        return []
    try:
        known = set(admin.listTopics().names().get(5, jvm.java.util.concurrent.TimeUnit.SECONDS))
    except Exception:
        return []
    return [topic for topic in topics if topic not in known]


def kafka_uses(plan: Any) -> Iterator[tuple[Op, dict[str, str], list[str], str, str]]:
    """Each Kafka read and write of ``plan``: the op, its client config (the source's
    ``kafka.`` options without the prefix), its topics, and the names of both settings."""
    from sparkbeam.runners.core.lowering.ops import StreamReadOp, WriteKafkaOp

    for stage in plan.stages:
        for op in [*((stage.head,) if stage.head is not None else ()), *stage.sinks]:
            if isinstance(op, StreamReadOp) and op.spec.format == "kafka":
                options = dict(op.spec.options)
                config = {key.removeprefix("kafka."): value for key, value in options.items() if key.startswith("kafka.")}
                yield op, config, options["subscribe"].split(","), "consumer_config", "topics"
            elif isinstance(op, WriteKafkaOp):
                yield op, dict(op.spec.producer_config), [op.spec.topic], "producer_config", "topic"


def check_before_first_step(spark: Any, plan: Any) -> None:
    """Every Kafka read and write of ``plan`` checked once Spark is up (see module docs)."""
    for op, config, topics, config_name, topic_setting in kafka_uses(plan):
        check_connector(spark, op)
        check_kafka(spark, op, config, topics, config_name, topic_setting)


# -- writing a step ---------------------------------------------------------------------
def records(op: Op, spec: WriteKafkaSpec, step: int, run: str, attempt: str, values: Iterator[WindowedValue]) -> Iterator[tuple]:
    """The step's elements as Kafka records ``(key, value, headers)``, the headers naming
    the run, the step and this attempt (see module docs)."""
    headers = [(HEADER_RUN, run.encode()), (HEADER_STEP, str(step).encode()), (HEADER_ATTEMPT, attempt.encode())]
    element = None
    try:
        for wv in values:
            element = wv.value
            key, value = spec.serialize(element)
            yield key, value, headers
    except Exception as error:
        if isinstance(error, UserCodeError):
            raise
        raise UserCodeError(op.label, op.location, error, element) from error


def record_schema() -> Any:
    """The rows Spark's Kafka writer takes: key, value and headers."""
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

    header = StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)])
    return StructType(
        [StructField("key", BinaryType(), True), StructField("value", BinaryType(), True), StructField("headers", ArrayType(header), True)]
    )


def save(op: Op, frame: Any) -> None:
    """``frame`` (rows of ``record_schema``) written to the op's topic by Spark's Kafka writer."""
    spec: WriteKafkaSpec = op.spec
    writer = frame.write.format("kafka").option("topic", spec.topic)
    for key, value in spec.writer_options().items():
        writer = writer.option(key, value)
    writer.save()


def write_step(spark: Any, op: Op, rdd: Any, known_empty: bool, step: int, run: str, channel: Any = None) -> None:
    """Write one step's records to the topic with Spark's Kafka writer (see module docs)."""
    if known_empty:
        return
    attempt = uuid.uuid4().hex  # a replayed step's records are told apart from the first attempt's
    rows = rdd.mapPartitions(metered_by(channel, functools.partial(records, op, op.spec, step, run, attempt)))
    save(op, spark.createDataFrame(rows, record_schema()))
