"""Kafka with Beam's names: ``WriteToKafka`` here; ``ReadFromKafka`` in ``sparkbeam.io.streaming``.

Both run on Spark's Kafka connector (``spark-sql-kafka-0-10``, from Maven Central: see the
README's "Kafka"). Keys and values are bytes on the wire; Beam's Java (de)serializer names
are accepted, or a Python function:

- ``'org.apache.kafka.common.serialization.ByteArraySerializer'`` (Beam's default): the
  element's key and value are bytes (a key may be None);
- ``'org.apache.kafka.common.serialization.StringSerializer'``: str, written as UTF-8;
- a function of the key (or value) returning bytes.

``ReadFromKafka``'s ``key_deserializer``/``value_deserializer`` take the matching
``...ByteArrayDeserializer``/``...StringDeserializer`` names or a function of bytes; a record
that fails to deserialise is a ``BadRecord`` naming its topic, partition and offset (a
dead letter with ``.with_exception_handling()``).

**What WriteToKafka guarantees.** Each step (micro-batch) is written by Kafka's idempotent
producer (``enable.idempotence=true``, ``acks=all``: a request retried by the client
writes nothing twice). Spark's Kafka writer has no transactions, so a step that a crash cut
short is written again whole when the stream resumes: at-least-once. Every record carries
three headers for deduplication: ``sparkbeam.run`` (the checkpoint's identity),
``sparkbeam.step`` and ``sparkbeam.attempt`` (one per write of a step). A consumer that
needs exactly-once keeps, for each (run, step), the records of the last attempt it sees
(a replay always comes after the attempt it replaces):

>>> WriteToKafka({"bootstrap.servers": "localhost:9092"}, "totals")  # doctest: +ELLIPSIS
<...WriteToKafka object at ...>
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.io._kafka_codecs import (
    BYTES_DESERIALIZER,
    BYTES_SERIALIZER,
    SERIALIZERS,
    STRING_DESERIALIZER,
    STRING_SERIALIZER,
    KafkaDecode,
    resolve_codec,
)
from sparkbeam.io.streaming import ReadFromKafka
from sparkbeam.ptransform import PTransform

__all__ = [
    "BYTES_DESERIALIZER",
    "BYTES_SERIALIZER",
    "HEADER_ATTEMPT",
    "HEADER_RUN",
    "HEADER_STEP",
    "STRING_DESERIALIZER",
    "STRING_SERIALIZER",
    "KafkaDecode",
    "ReadFromKafka",
    "WriteKafkaSpec",
    "WriteToKafka",
]

HEADER_RUN = "sparkbeam.run"
HEADER_STEP = "sparkbeam.step"
HEADER_ATTEMPT = "sparkbeam.attempt"

#: producer settings Spark's Kafka writer sets itself or refuses
_SPARK_OWNED = ("key.serializer", "value.serializer")


@attrs.frozen
class WriteKafkaSpec:
    """What a ``WriteToKafka`` writes where (plain data; pickles to the executors)."""

    producer_config: dict[str, str] = attrs.field(eq=False)
    topic: str
    key_serializer: Callable[[Any], Any] = attrs.field(eq=False)
    value_serializer: Callable[[Any], Any] = attrs.field(eq=False)

    def serialize(self, element: Any) -> tuple[Any, Any]:
        try:
            key, value = element
        except (TypeError, ValueError):
            msg = f"WriteToKafka writes (key, value) pairs, got {type(element).__name__} {element!r:.80}"
            raise TypeError(msg) from None
        return self.key_serializer(key), self.value_serializer(value)

    def writer_options(self) -> dict[str, str]:
        """Spark's Kafka writer options: each producer setting prefixed ``kafka.``, the
        idempotent producer unless the config says otherwise."""
        options = {f"kafka.{key}": value for key, value in self.producer_config.items()}
        options.setdefault("kafka.enable.idempotence", "true")
        options.setdefault("kafka.acks", "all")
        return options


class WriteToKafka(PTransform):
    """Writes ``(key, value)`` pairs to a Kafka topic, with Beam's arguments (see module docs).

    ``producer_config`` needs ``bootstrap.servers``; other producer settings (``compression.type``,
    ``security.protocol``, ``sasl.*``, ...) pass to Kafka's producer as they are.
    """

    is_primitive = True

    def __init__(
        self,
        producer_config: dict[str, Any],
        topic: str,
        key_serializer: Any = BYTES_SERIALIZER,
        value_serializer: Any = BYTES_SERIALIZER,
        expansion_service: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(producer_config, dict) or "bootstrap.servers" not in producer_config:
            msg = f"WriteToKafka: producer_config must be a dict with 'bootstrap.servers', got {producer_config!r}"
            raise ValueError(msg)
        for key in _SPARK_OWNED:
            if key in producer_config:
                msg = f"WriteToKafka: producer_config[{key!r}] is Spark's (it writes bytes); pass key_serializer/value_serializer instead"
                raise ValueError(msg)
        if not isinstance(topic, str) or not topic:
            msg = f"WriteToKafka: topic must be a topic name, got {topic!r}"
            raise ValueError(msg)
        if expansion_service is not None:
            msg = "WriteToKafka: expansion_service is for Beam's cross-language expansion; sparkbeam writes with Spark's Kafka connector, drop it"
            raise ValueError(msg)
        self.spec = WriteKafkaSpec(
            {str(k): str(v) for k, v in producer_config.items()},
            topic,
            resolve_codec("WriteToKafka", "key_serializer", key_serializer, SERIALIZERS),
            resolve_codec("WriteToKafka", "value_serializer", value_serializer, SERIALIZERS),
        )

    def default_label(self) -> str:
        return "WriteToKafka"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pvalue.PCollection(pcoll.pipeline, is_bounded=pcoll.is_bounded)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.kafka")
