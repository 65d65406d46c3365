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
    "WriteKafkaSpec",
    "WriteToKafka",
]

BYTES_SERIALIZER = "org.apache.kafka.common.serialization.ByteArraySerializer"
STRING_SERIALIZER = "org.apache.kafka.common.serialization.StringSerializer"
BYTES_DESERIALIZER = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
STRING_DESERIALIZER = "org.apache.kafka.common.serialization.StringDeserializer"
HEADER_RUN = "sparkbeam.run"
HEADER_STEP = "sparkbeam.step"
HEADER_ATTEMPT = "sparkbeam.attempt"

#: producer settings Spark's Kafka writer sets itself or refuses
_SPARK_OWNED = ("key.serializer", "value.serializer")


def _identity_bytes(value: Any) -> Any:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    msg = f"ByteArraySerializer takes bytes, got {type(value).__name__} {value!r:.80}"
    raise TypeError(msg)


def _utf8(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        msg = f"StringSerializer takes str, got {type(value).__name__} {value!r:.80}"
        raise TypeError(msg)
    return value.encode("utf-8")


def _decode_utf8(value: Any) -> Any:
    return None if value is None else bytes(value).decode("utf-8")


def _raw_bytes(value: Any) -> Any:
    return value


def _resolve(owner: str, setting: str, value: Any, names: dict[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    if callable(value):
        return value
    if isinstance(value, str) and value in names:
        return names[value]
    msg = f"{owner}: {setting} must be one of {', '.join(names)} or a Python function, got {value!r}"
    raise ValueError(msg)


_SERIALIZERS: dict[str, Callable[[Any], Any]] = {BYTES_SERIALIZER: _identity_bytes, STRING_SERIALIZER: _utf8}
_DESERIALIZERS: dict[str, Callable[[Any], Any]] = {BYTES_DESERIALIZER: _raw_bytes, STRING_DESERIALIZER: _decode_utf8}


@attrs.frozen
class KafkaDecode:
    """Turns a record's key and value bytes into the element's (run on the executors)."""

    key: Callable[[Any], Any] = _raw_bytes
    value: Callable[[Any], Any] = _raw_bytes

    @classmethod
    def of(cls, owner: str, key_deserializer: Any, value_deserializer: Any) -> KafkaDecode | None:
        key = _resolve(owner, "key_deserializer", key_deserializer, _DESERIALIZERS)
        value = _resolve(owner, "value_deserializer", value_deserializer, _DESERIALIZERS)
        if key is _raw_bytes and value is _raw_bytes:
            return None  # bytes as Spark read them: nothing to do per record
        return cls(key, value)

    def __call__(self, key: Any, value: Any) -> tuple[Any, Any]:
        return (None if key is None else self.key(key)), (None if value is None else self.value(value))

    def many(self, keys: list, values: list) -> list[tuple[Any, Any]]:
        """``self(key, value)`` of each pair; bytes keys with UTF-8 values (the usual
        ``StringDeserializer`` read) without a Python call per record."""
        if self.key is _raw_bytes and self.value is _decode_utf8:
            return list(zip(keys, [None if value is None else value.decode("utf-8") for value in values]))
        return list(map(self, keys, values))


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
            _resolve("WriteToKafka", "key_serializer", key_serializer, _SERIALIZERS),
            _resolve("WriteToKafka", "value_serializer", value_serializer, _SERIALIZERS),
        )

    def default_label(self) -> str:
        return "WriteToKafka"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pvalue.PCollection(pcoll.pipeline, is_bounded=pcoll.is_bounded)


_beam_names = module_getattr(__name__, "apache_beam.io.kafka")


def __getattr__(name: str) -> Any:
    """``ReadFromKafka`` as Beam's module has it (it lives with the other stream reads,
    which import this module); Beam's other names of ``apache_beam.io.kafka`` say why not."""
    if name == "ReadFromKafka":
        from sparkbeam.io.streaming import ReadFromKafka

        return ReadFromKafka
    return _beam_names(name)
