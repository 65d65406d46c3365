"""The coders of containers: optional values, tuples, sequences, dicts, length prefixes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sparkbeam.coders.base import Coder, FastCoder
from sparkbeam.coders.stream import InputStream, OutputStream, get_varint_size
from sparkbeam.typehints import typehints

__all__ = [
    "IterableCoder",
    "LengthPrefixCoder",
    "ListCoder",
    "MapCoder",
    "NullableCoder",
    "TupleCoder",
    "TupleSequenceCoder",
]


# -- composites --------------------------------------------------------------------------------


class NullableCoder(FastCoder):
    """``None`` as byte 0, anything else as byte 1 then the value's encoding."""

    def __init__(self, value_coder: Coder) -> None:
        self._value_coder = value_coder

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        if value is None:
            out.write_byte(0)
        else:
            out.write_byte(1)
            self._value_coder.encode_to_stream(value, out, nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        flag = in_stream.read_byte()
        if flag == 0:
            return None
        if flag == 1:
            return self._value_coder.decode_from_stream(in_stream, nested)
        msg = f"Encountered unexpected value for null indicator: '{flag}'"
        raise ValueError(msg)

    def is_deterministic(self) -> bool:
        return self._value_coder.is_deterministic()

    def as_deterministic_coder(self, step_label: str, error_message: str | None = None) -> Coder:
        if self.is_deterministic():
            return self
        return NullableCoder(self._value_coder.as_deterministic_coder(step_label, error_message))

    def to_type_hint(self) -> Any:
        return typehints.Optional[self._value_coder.to_type_hint()]

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        return cls(registry.get_coder(typehints.get_concrete_type_from_nullable(typehint)))

    def _get_component_coders(self) -> Sequence[Coder]:
        return (self._value_coder,)

    def __repr__(self) -> str:
        return f"NullableCoder[{self._value_coder!r}]"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._value_coder == other._value_coder

    def __hash__(self) -> int:
        return hash((type(self), self._value_coder))


class TupleCoder(FastCoder):
    """A tuple as its components' encodings, one after another (all but the last nested)."""

    def __init__(self, components: Iterable[Coder]) -> None:
        self._coders = tuple(components)

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        values = tuple(value)
        if len(values) != len(self._coders):
            msg = f"{self!r} encodes tuples of {len(self._coders)} components, got {len(values)}: {value!r}"
            raise ValueError(msg)
        last = len(self._coders) - 1
        for index, (coder, item) in enumerate(zip(self._coders, values)):
            coder.encode_to_stream(item, out, nested or index < last)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> tuple:
        last = len(self._coders) - 1
        return tuple(coder.decode_from_stream(in_stream, nested or index < last) for index, coder in enumerate(self._coders))

    def is_deterministic(self) -> bool:
        return all(coder.is_deterministic() for coder in self._coders)

    def as_deterministic_coder(self, step_label: str, error_message: str | None = None) -> Coder:
        if self.is_deterministic():
            return self
        return TupleCoder([coder.as_deterministic_coder(step_label, error_message) for coder in self._coders])

    def to_type_hint(self) -> Any:
        return typehints.Tuple[tuple(coder.to_type_hint() for coder in self._coders)]

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        return cls([registry.get_coder(t) for t in typehint.tuple_types])

    def coders(self) -> tuple[Coder, ...]:
        return self._coders

    def _get_component_coders(self) -> Sequence[Coder]:
        return self._coders

    def is_kv_coder(self) -> bool:
        return len(self._coders) == 2

    def key_coder(self) -> Coder:
        if len(self._coders) != 2:
            msg = f"TupleCoder does not have exactly 2 components: {self!r}"
            raise ValueError(msg)
        return self._coders[0]

    def value_coder(self) -> Coder:
        if len(self._coders) != 2:
            msg = f"TupleCoder does not have exactly 2 components: {self!r}"
            raise ValueError(msg)
        return self._coders[1]

    def __repr__(self) -> str:
        return f"TupleCoder[{', '.join(repr(c) for c in self._coders)}]"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._coders == other._coders

    def __hash__(self) -> int:
        return hash(self._coders)


class _SequenceCoder(FastCoder):
    """A homogeneous sequence: a 4-byte big-endian count, then each element nested.

    An iterable without a length (a generator) is written as Beam writes it: count -1, then
    blocks of (varint count, elements), then a 0.
    """

    _BLOCK_BYTES = 64 * 1024

    def __init__(self, elem_coder: Coder) -> None:
        self._elem_coder = elem_coder

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        elem = self._elem_coder
        if hasattr(value, "__len__"):
            out.write_bigendian_int32(len(value))
            for item in value:
                elem.encode_to_stream(item, out, True)
            return
        out.write_bigendian_int32(-1)
        block = OutputStream()
        count = 0
        for item in value:
            elem.encode_to_stream(item, block, True)
            count += 1
            if block.size() > self._BLOCK_BYTES:
                out.write_var_int64(count)
                out.write(block.get())
                block, count = OutputStream(), 0
        if count:
            out.write_var_int64(count)
            out.write(block.get())
        out.write_var_int64(0)

    def _decode_items(self, in_stream: InputStream) -> list:
        elem = self._elem_coder
        size = in_stream.read_bigendian_int32()
        if size >= 0:
            return [elem.decode_from_stream(in_stream, True) for _ in range(size)]
        items: list = []
        count = in_stream.read_var_int64()
        while count > 0:
            items.extend(elem.decode_from_stream(in_stream, True) for _ in range(count))
            count = in_stream.read_var_int64()
        if count < 0:
            msg = "this encoding continues in Beam's runner state, which sparkbeam cannot read"
            raise ValueError(msg)
        return items

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        return self._decode_items(in_stream)

    def is_deterministic(self) -> bool:
        return self._elem_coder.is_deterministic()

    def as_deterministic_coder(self, step_label: str, error_message: str | None = None) -> Coder:
        if self.is_deterministic():
            return self
        return type(self)(self._elem_coder.as_deterministic_coder(step_label, error_message))

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        return cls(registry.get_coder(typehint.inner_type))

    def value_coder(self) -> Coder:
        return self._elem_coder

    def _get_component_coders(self) -> Sequence[Coder]:
        return (self._elem_coder,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._elem_coder!r}]"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._elem_coder == other._elem_coder

    def __hash__(self) -> int:
        return hash((type(self), self._elem_coder))


class IterableCoder(_SequenceCoder):
    """Any iterable of one element type; decodes to a list."""

    def to_type_hint(self) -> Any:
        return typehints.Iterable[self._elem_coder.to_type_hint()]


class ListCoder(_SequenceCoder):
    """A list of one element type."""

    def to_type_hint(self) -> Any:
        return typehints.List[self._elem_coder.to_type_hint()]


class TupleSequenceCoder(_SequenceCoder):
    """A tuple of any length of one element type."""

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        return tuple(self._decode_items(in_stream))

    def to_type_hint(self) -> Any:
        return typehints.Tuple[self._elem_coder.to_type_hint(), ...]


class MapCoder(FastCoder):
    """A dict: a 4-byte big-endian count, then each key and value nested."""

    def __init__(self, key_coder: Coder, value_coder: Coder, is_deterministic: bool = False) -> None:
        self._key_coder = key_coder
        self._value_coder = value_coder
        self._sorted = is_deterministic

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        out.write_bigendian_int32(len(value))
        items = sorted(value.items()) if self._sorted else value.items()
        for key, item in items:
            self._key_coder.encode_to_stream(key, out, True)
            self._value_coder.encode_to_stream(item, out, True)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> dict:
        result = {}
        for _ in range(in_stream.read_bigendian_int32()):
            key = self._key_coder.decode_from_stream(in_stream, True)
            result[key] = self._value_coder.decode_from_stream(in_stream, True)
        return result

    def is_deterministic(self) -> bool:
        # A dict's iteration order is its insertion order: deterministic only when sorted.
        return self._sorted and self._key_coder.is_deterministic() and self._value_coder.is_deterministic()

    def as_deterministic_coder(self, step_label: str, error_message: str | None = None) -> Coder:
        return MapCoder(
            self._key_coder.as_deterministic_coder(step_label, error_message),
            self._value_coder.as_deterministic_coder(step_label, error_message),
            is_deterministic=True,
        )

    def to_type_hint(self) -> Any:
        return typehints.Dict[self._key_coder.to_type_hint(), self._value_coder.to_type_hint()]

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> Coder:
        return cls(registry.get_coder(typehint.key_type), registry.get_coder(typehint.value_type))

    def _get_component_coders(self) -> Sequence[Coder]:
        return (self._key_coder, self._value_coder)

    def __repr__(self) -> str:
        return f"MapCoder[{self._key_coder!r}, {self._value_coder!r}]"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and (self._key_coder, self._value_coder, self._sorted) == (
            other._key_coder, other._value_coder, other._sorted)

    def __hash__(self) -> int:
        return hash((type(self), self._key_coder, self._value_coder))


class LengthPrefixCoder(FastCoder):
    """Another coder's bytes, always preceded by their length."""

    def __init__(self, value_coder: Coder) -> None:
        self._value_coder = value_coder

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        out.write(self._value_coder.encode(value), True)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        return self._value_coder.decode(in_stream.read_all(True))

    def is_deterministic(self) -> bool:
        return self._value_coder.is_deterministic()

    def estimate_size(self, value: Any) -> int:
        size = self._value_coder.estimate_size(value)
        return get_varint_size(size) + size

    def value_coder(self) -> Coder:
        return self._value_coder

    def to_type_hint(self) -> Any:
        return self._value_coder.to_type_hint()

    def _get_component_coders(self) -> Sequence[Coder]:
        return (self._value_coder,)

    def __repr__(self) -> str:
        return f"LengthPrefixCoder[{self._value_coder!r}]"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._value_coder == other._value_coder

    def __hash__(self) -> int:
        return hash((type(self), self._value_coder))
