"""Kafka's (de)serializers under Beam's Java names, and ``KafkaDecode``, which applies a read's
(re-exported by ``sparkbeam.io.kafka``).

``WriteToKafka`` (``kafka``) and ``ReadFromKafka`` (``streaming``, with the other stream
reads) both resolve a (de)serializer name or function here; ``kafka`` also re-exports
``ReadFromKafka``, as Beam's module has it, so this module sits below both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

__all__ = [
    "BYTES_DESERIALIZER",
    "BYTES_SERIALIZER",
    "DESERIALIZERS",
    "SERIALIZERS",
    "STRING_DESERIALIZER",
    "STRING_SERIALIZER",
    "KafkaDecode",
    "resolve_codec",
]

BYTES_SERIALIZER = "org.apache.kafka.common.serialization.ByteArraySerializer"
STRING_SERIALIZER = "org.apache.kafka.common.serialization.StringSerializer"
BYTES_DESERIALIZER = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
STRING_DESERIALIZER = "org.apache.kafka.common.serialization.StringDeserializer"


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


def resolve_codec(owner: str, setting: str, value: Any, names: dict[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    if callable(value):
        return value
    if isinstance(value, str) and value in names:
        return names[value]
    msg = f"{owner}: {setting} must be one of {', '.join(names)} or a Python function, got {value!r}"
    raise ValueError(msg)


SERIALIZERS: dict[str, Callable[[Any], Any]] = {BYTES_SERIALIZER: _identity_bytes, STRING_SERIALIZER: _utf8}
DESERIALIZERS: dict[str, Callable[[Any], Any]] = {BYTES_DESERIALIZER: _raw_bytes, STRING_DESERIALIZER: _decode_utf8}


@attrs.frozen
class KafkaDecode:
    """Turns a record's key and value bytes into the element's (run on the executors)."""

    key: Callable[[Any], Any] = _raw_bytes
    value: Callable[[Any], Any] = _raw_bytes

    @classmethod
    def of(cls, owner: str, key_deserializer: Any, value_deserializer: Any) -> KafkaDecode | None:
        key = resolve_codec(owner, "key_deserializer", key_deserializer, DESERIALIZERS)
        value = resolve_codec(owner, "value_deserializer", value_deserializer, DESERIALIZERS)
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
