"""The coders of arbitrary objects: pickling, protocol buffers, and ``FastPrimitivesCoder``,
Beam's default, which tags primitive values and pickles the rest."""

from __future__ import annotations

import base64
import dataclasses
import enum
import pickle
from typing import Any

from sparkbeam.coders.base import Coder, FastCoder
from sparkbeam.coders.containers import IterableCoder
from sparkbeam.coders.stream import InputStream, OutputStream
from sparkbeam.typehints import typehints

__all__ = [
    "Base64PickleCoder",
    "CloudpickleCoder",
    "DillCoder",
    "FastPrimitivesCoder",
    "PickleCoder",
    "ProtoCoder",
]


# -- pickling ----------------------------------------------------------------------------------


class _PickleCoderBase(FastCoder):
    """Coders by pickling: any picklable value; not deterministic (e.g. dict order)."""

    def _dumps(self, value: Any) -> bytes:
        raise NotImplementedError

    def _loads(self, data: bytes) -> Any:
        raise NotImplementedError

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        out.write(self._dumps(value), nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        return self._loads(in_stream.read_all(nested))

    def is_deterministic(self) -> bool:
        return False

    def as_deterministic_coder(self, step_label: str, error_message: str | None = None) -> Coder:
        return FastPrimitivesCoder(self, requires_deterministic=step_label)

    # As in Beam: a pickling coder serves as its own key and value coder.
    def is_kv_coder(self) -> bool:
        return True

    def key_coder(self) -> Coder:
        return self

    def value_coder(self) -> Coder:
        return self

    def to_type_hint(self) -> Any:
        return typehints.Any

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class PickleCoder(_PickleCoderBase):
    """Python's pickle, at its highest protocol."""

    def _dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def _loads(self, data: bytes) -> Any:
        return pickle.loads(data)


class CloudpickleCoder(_PickleCoderBase):
    """cloudpickle: also functions and classes defined in ``__main__``."""

    def _dumps(self, value: Any) -> bytes:
        import cloudpickle

        return cloudpickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def _loads(self, data: bytes) -> Any:
        return pickle.loads(data)


class DillCoder(_PickleCoderBase):
    """dill (``pip install dill``), as Beam's."""

    def __init__(self) -> None:
        try:
            import dill  # noqa: F401
        except ImportError:
            msg = "DillCoder needs dill: pip install dill (or use PickleCoder or CloudpickleCoder)"
            raise ImportError(msg) from None

    def _dumps(self, value: Any) -> bytes:
        import dill

        return dill.dumps(value)

    def _loads(self, data: bytes) -> Any:
        import dill

        return dill.loads(data)


class Base64PickleCoder(Coder):
    """pickle, then base64."""

    def encode(self, value: Any) -> bytes:
        return base64.b64encode(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))

    def decode(self, encoded: bytes) -> Any:
        return pickle.loads(base64.b64decode(encoded))

    def is_kv_coder(self) -> bool:
        return True

    def key_coder(self) -> Coder:
        return self

    def value_coder(self) -> Coder:
        return self


class ProtoCoder(FastCoder):
    """A protocol buffer message of one type: its serialised bytes."""

    def __init__(self, proto_message_type: type) -> None:
        self.proto_message_type = proto_message_type

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        out.write(value.SerializePartialToString(), nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        message = self.proto_message_type()
        message.ParseFromString(in_stream.read_all(nested))
        return message

    def is_deterministic(self) -> bool:
        return False  # map fields serialise in no fixed order

    def to_type_hint(self) -> Any:
        return self.proto_message_type

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        if isinstance(typehint, type) and hasattr(typehint, "SerializePartialToString") and hasattr(typehint, "ParseFromString"):
            return cls(typehint)
        msg = f"ProtoCoder needs a protocol buffer message class, not {typehint!r}"
        raise ValueError(msg)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.proto_message_type == other.proto_message_type

    def __hash__(self) -> int:
        return hash(self.proto_message_type)


# -- FastPrimitivesCoder: Beam's default coder ------------------------------------------------------

_NONE, _INT, _FLOAT, _BYTES, _UNICODE, _LIST, _TUPLE, _DICT, _SET, _BOOL, _ITERABLE_LIKE = range(11)
_DATACLASS, _NAMED_TUPLE, _ENUM, _NESTED_STATE = 101, 102, 103, 104
_UNKNOWN = 0xFF


class FastPrimitivesCoder(FastCoder):
    """Beam's default: a one-byte type tag, then the value's own encoding, for None, int,
    float, bytes, str, bool, list, tuple, dict and set (recursively); anything else is
    tagged 0xFF and encoded with the fallback coder (pickle).

    ``as_deterministic_coder(label)`` sorts dicts and sets and encodes named tuples, frozen
    dataclasses and enums by their fields; other objects it refuses, naming ``label``.
    """

    def __init__(self, fallback_coder: Coder | None = None, requires_deterministic: str | None = None) -> None:
        self._fallback_coder = fallback_coder if fallback_coder is not None else PickleCoder()
        self._requires_deterministic = requires_deterministic

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        kind = type(value)
        if value is None:
            out.write_byte(_NONE)
        elif kind is int:
            if -(1 << 63) <= value < (1 << 63):
                out.write_byte(_INT)
                out.write_var_int64(value)
            else:
                out.write_byte(_UNKNOWN)
                self._fallback_coder.encode_to_stream(value, out, nested)
        elif kind is float:
            out.write_byte(_FLOAT)
            out.write_bigendian_double(value)
        elif kind is bytes:
            out.write_byte(_BYTES)
            out.write(value, nested)
        elif kind is str:
            out.write_byte(_UNICODE)
            out.write(value.encode("utf-8"), nested)
        elif kind is list or kind is tuple:
            out.write_byte(_LIST if kind is list else _TUPLE)
            out.write_var_int64(len(value))
            for item in value:
                self.encode_to_stream(item, out, True)
        elif kind is bool:
            out.write_byte(_BOOL)
            out.write_byte(1 if value else 0)
        elif kind is dict:
            out.write_byte(_DICT)
            out.write_var_int64(len(value))
            items = self._ordered(value.items(), "keys of a dict") if self._requires_deterministic else value.items()
            for key, item in items:
                self.encode_to_stream(key, out, True)
                self.encode_to_stream(item, out, True)
        elif kind is set:
            out.write_byte(_SET)
            out.write_var_int64(len(value))
            for item in self._ordered(value, "elements of a set") if self._requires_deterministic else value:
                self.encode_to_stream(item, out, True)
        elif self._requires_deterministic is not None:
            self._encode_deterministic(value, out)
        else:
            out.write_byte(_UNKNOWN)
            self._fallback_coder.encode_to_stream(value, out, nested)

    def _ordered(self, items: Any, what: str) -> list:
        try:
            return sorted(items)
        except Exception as error:
            msg = f"Unable to deterministically order {what} for '{self._requires_deterministic}'"
            raise TypeError(msg) from error

    def _encode_deterministic(self, value: Any, out: OutputStream) -> None:
        kind = type(value)
        try:
            if dataclasses.is_dataclass(value) and kind.__dataclass_params__.frozen:
                out.write_byte(_DATACLASS)
                out.write(pickle.dumps(kind), True)
                fields = [getattr(value, f.name) for f in dataclasses.fields(value) if f.init]
                IterableCoder(self).encode_to_stream(fields, out, True)
                return
            if isinstance(value, tuple) and hasattr(kind, "_fields"):
                out.write_byte(_NAMED_TUPLE)
                out.write(pickle.dumps(kind), True)
                IterableCoder(self).encode_to_stream(list(value), out, True)
                return
            if isinstance(value, enum.Enum):
                out.write_byte(_ENUM)
                out.write(pickle.dumps(kind), True)
                self.encode_to_stream(value.value, out, True)
                return
        except TypeError:
            raise
        except Exception as error:
            raise TypeError(self._deterministic_error(value)) from error
        raise TypeError(self._deterministic_error(value))

    def _deterministic_error(self, value: Any) -> str:
        return (
            f"Unable to deterministically encode '{value!r}' of type '{type(value)!r}', please "
            f"provide a type hint for the input of '{self._requires_deterministic}'"
        )

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        tag = in_stream.read_byte()
        if tag == _NONE:
            return None
        if tag == _INT:
            return in_stream.read_var_int64()
        if tag == _FLOAT:
            return in_stream.read_bigendian_double()
        if tag == _BYTES:
            return in_stream.read_all(nested)
        if tag == _UNICODE:
            return in_stream.read_all(nested).decode("utf-8")
        if tag in (_LIST, _TUPLE, _SET):
            items = [self.decode_from_stream(in_stream, True) for _ in range(in_stream.read_var_int64())]
            return items if tag == _LIST else tuple(items) if tag == _TUPLE else set(items)
        if tag == _DICT:
            result = {}
            for _ in range(in_stream.read_var_int64()):
                key = self.decode_from_stream(in_stream, True)
                result[key] = self.decode_from_stream(in_stream, True)
            return result
        if tag == _BOOL:
            return bool(in_stream.read_byte())
        if tag == _ITERABLE_LIKE:
            return IterableCoder(self).decode_from_stream(in_stream, nested)
        if tag in (_DATACLASS, _NAMED_TUPLE):
            kind = pickle.loads(in_stream.read_all(True))
            return kind(*IterableCoder(self).decode_from_stream(in_stream, True))
        if tag == _ENUM:
            kind = pickle.loads(in_stream.read_all(True))
            return kind(self.decode_from_stream(in_stream, True))
        if tag == _UNKNOWN:
            return self._fallback_coder.decode_from_stream(in_stream, nested)
        msg = f"Unknown type tag {tag:x}"
        raise ValueError(msg)

    def is_deterministic(self) -> bool:
        return self._requires_deterministic is not None

    def as_deterministic_coder(self, step_label: str, error_message: str | None = None) -> Coder:
        if self.is_deterministic():
            return self
        return FastPrimitivesCoder(self._fallback_coder, requires_deterministic=step_label)

    def to_type_hint(self) -> Any:
        return typehints.Any

    @classmethod
    def from_type_hint(cls, unused_typehint: Any, unused_registry: Any) -> Coder:
        return cls()

    def is_kv_coder(self) -> bool:
        return True

    def key_coder(self) -> Coder:
        return self

    def value_coder(self) -> Coder:
        return self

    def __repr__(self) -> str:
        return "FastPrimitivesCoder" if self._requires_deterministic is None else f"DeterministicFastPrimitivesCoder[{self._requires_deterministic}]"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and (self._fallback_coder, self._requires_deterministic) == (
            other._fallback_coder, other._requires_deterministic)

    def __hash__(self) -> int:
        return hash((type(self), self._fallback_coder))
