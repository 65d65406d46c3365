"""Beam's path ``apache_beam.coders.coder_impl``: the implementation objects coders delegate to.

In Beam a coder's bytes are written by a ``CoderImpl``, and a coder of your own is often a
``FastCoder`` whose ``_create_impl`` returns a ``StreamCoderImpl`` subclass that writes its
fields with the standard impls (``VarIntCoderImpl().encode_to_stream(value.id, stream, True)``,
as Beam's Nexmark models do). sparkbeam's coders carry the stream methods themselves, so
the standard impls here are the standard coders behind Beam's names and constructor
arguments, writing Beam's bytes; ``FastCoder`` subclasses that define ``_create_impl``
encode through the impl they return.

>>> impl = TupleCoderImpl([VarIntCoderImpl(), BytesCoderImpl()])
>>> impl.encode((300, b"x")), impl.decode(b"\\xac\\x02x")
(b'\\xac\\x02x', (300, b'x'))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.coders import containers, objects, values
from sparkbeam.coders.base import Coder
from sparkbeam.coders.stream import InputStream, OutputStream, get_varint_size

__all__ = [
    "BigEndianShortCoderImpl",
    "BigIntegerCoderImpl",
    "BooleanCoderImpl",
    "ByteCoderImpl",
    "BytesCoderImpl",
    "CallbackCoderImpl",
    "CoderImpl",
    "DecimalCoderImpl",
    "FastPrimitivesCoderImpl",
    "FloatCoderImpl",
    "IntervalWindowCoderImpl",
    "IterableCoderImpl",
    "LengthPrefixCoderImpl",
    "ListCoderImpl",
    "MapCoderImpl",
    "NullableCoderImpl",
    "SimpleCoderImpl",
    "SinglePrecisionFloatCoderImpl",
    "SingletonCoderImpl",
    "StreamCoderImpl",
    "TimestampCoderImpl",
    "TupleCoderImpl",
    "TupleSequenceCoderImpl",
    "VarInt32CoderImpl",
    "VarIntCoderImpl",
    "create_InputStream",
    "create_OutputStream",
]

# Beam's names for the stream classes an impl reads and writes.
create_InputStream = InputStream
create_OutputStream = OutputStream


class CoderImpl:
    """Writes values to a stream and reads them back; ``nested`` as for coders: other
    bytes follow, so a value of variable length must carry its length."""

    def encode_to_stream(self, value: Any, stream: OutputStream, nested: bool) -> None:
        msg = f"{type(self).__name__} defines no encode_to_stream"
        raise NotImplementedError(msg)

    def decode_from_stream(self, stream: InputStream, nested: bool) -> Any:
        msg = f"{type(self).__name__} defines no decode_from_stream"
        raise NotImplementedError(msg)

    def encode(self, value: Any) -> bytes:
        msg = f"{type(self).__name__} defines no encode"
        raise NotImplementedError(msg)

    def decode(self, encoded: bytes) -> Any:
        msg = f"{type(self).__name__} defines no decode"
        raise NotImplementedError(msg)

    def encode_all(self, values: Iterable[Any]) -> bytes:
        out = OutputStream()
        for value in values:
            self.encode_to_stream(value, out, True)
        return out.get()

    def decode_all(self, encoded: bytes) -> Iterable[Any]:
        stream = InputStream(encoded)
        while stream.size() > 0:
            yield self.decode_from_stream(stream, True)

    def encode_nested(self, value: Any) -> bytes:
        out = OutputStream()
        self.encode_to_stream(value, out, True)
        return out.get()

    def decode_nested(self, encoded: bytes) -> Any:
        return self.decode_from_stream(InputStream(encoded), True)

    def estimate_size(self, value: Any, nested: bool = False) -> int:
        out = OutputStream()
        self.encode_to_stream(value, out, nested)
        return out.size()

    def get_estimated_size_and_observables(self, value: Any, nested: bool = False) -> tuple[int, list]:
        return self.estimate_size(value, nested), []


class SimpleCoderImpl(CoderImpl):
    """An impl defined by ``encode``/``decode``; nested, its bytes are length-prefixed."""

    def encode_to_stream(self, value: Any, stream: OutputStream, nested: bool) -> None:
        stream.write(self.encode(value), nested)

    def decode_from_stream(self, stream: InputStream, nested: bool) -> Any:
        return self.decode(stream.read_all(nested))


class StreamCoderImpl(CoderImpl):
    """An impl defined by its stream methods; ``encode``/``decode`` go through a stream."""

    def encode(self, value: Any) -> bytes:
        out = OutputStream()
        self.encode_to_stream(value, out, False)
        return out.get()

    def decode(self, encoded: bytes) -> Any:
        return self.decode_from_stream(InputStream(encoded), False)


class CallbackCoderImpl(CoderImpl):
    """An impl made of an encode and a decode function (Beam's default for a plain ``Coder``)."""

    def __init__(self, encoder: Any, decoder: Any, size_estimator: Any = None) -> None:
        self._encoder = encoder
        self._decoder = decoder
        self._size_estimator = size_estimator

    def encode_to_stream(self, value: Any, stream: OutputStream, nested: bool) -> None:
        stream.write(self._encoder(value), nested)

    def decode_from_stream(self, stream: InputStream, nested: bool) -> Any:
        return self._decoder(stream.read_all(nested))

    def encode(self, value: Any) -> bytes:
        return self._encoder(value)

    def decode(self, encoded: bytes) -> Any:
        return self._decoder(encoded)

    def estimate_size(self, value: Any, nested: bool = False) -> int:
        size = self._size_estimator(value) if self._size_estimator is not None else len(self._encoder(value))
        return size + get_varint_size(size) if nested else size

    def __repr__(self) -> str:
        return f"CallbackCoderImpl[encoder={self._encoder!r}, decoder={self._decoder!r}]"


class _ImplCoder(Coder):
    """An impl standing where sparkbeam's coders expect a coder (a component of a tuple)."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    def encode(self, value: Any) -> bytes:
        return self._impl.encode(value)

    def decode(self, encoded: bytes) -> Any:
        return self._impl.decode(encoded)

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        self._impl.encode_to_stream(value, out, nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        return self._impl.decode_from_stream(in_stream, nested)

    def estimate_size(self, value: Any) -> int:
        return self._impl.estimate_size(value)


def _as_coder(impl: Any) -> Coder:
    return impl if isinstance(impl, Coder) else _ImplCoder(impl)


class _CoderBacked(StreamCoderImpl):
    """A standard impl: one of sparkbeam's coders, which write Beam's bytes."""

    _coder: Coder

    def encode_to_stream(self, value: Any, stream: OutputStream, nested: bool) -> None:
        self._coder.encode_to_stream(value, stream, nested)

    def decode_from_stream(self, stream: InputStream, nested: bool) -> Any:
        return self._coder.decode_from_stream(stream, nested)

    def encode(self, value: Any) -> bytes:
        return self._coder.encode(value)

    def decode(self, encoded: bytes) -> Any:
        return self._coder.decode(encoded)

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._coder!r}]"


def _simple(name: str, coder_class: type[Coder]) -> type[_CoderBacked]:
    def __init__(self: _CoderBacked) -> None:
        coder = coder_class()
        self._coder = coder
        # The coder's own stream methods on the instance: a user's impl writes each field
        # through these (Nexmark's models: ten per Auction), and the class's forwarding
        # methods would be a second call per field.
        self.encode_to_stream = coder.encode_to_stream  # type: ignore[method-assign]
        self.decode_from_stream = coder.decode_from_stream  # type: ignore[method-assign]

    doc = f"Beam's ``{name}``: the bytes of ``{coder_class.__name__}``."
    return type(name, (_CoderBacked,), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


VarIntCoderImpl = _simple("VarIntCoderImpl", values.VarIntCoder)
VarInt32CoderImpl = _simple("VarInt32CoderImpl", values.VarInt32Coder)
BytesCoderImpl = _simple("BytesCoderImpl", values.BytesCoder)
BooleanCoderImpl = _simple("BooleanCoderImpl", values.BooleanCoder)
ByteCoderImpl = _simple("ByteCoderImpl", values.ByteCoder)
BigEndianShortCoderImpl = _simple("BigEndianShortCoderImpl", values.BigEndianShortCoder)
FloatCoderImpl = _simple("FloatCoderImpl", values.FloatCoder)
SinglePrecisionFloatCoderImpl = _simple("SinglePrecisionFloatCoderImpl", values.SinglePrecisionFloatCoder)
TimestampCoderImpl = _simple("TimestampCoderImpl", values.TimestampCoder)
IntervalWindowCoderImpl = _simple("IntervalWindowCoderImpl", values.IntervalWindowCoder)
BigIntegerCoderImpl = _simple("BigIntegerCoderImpl", values.BigIntegerCoder)
DecimalCoderImpl = _simple("DecimalCoderImpl", values.DecimalCoder)


class SingletonCoderImpl(_CoderBacked):
    """Always ``value``; no bytes."""

    def __init__(self, value: Any) -> None:
        self._coder = values.SingletonCoder(value)


class FastPrimitivesCoderImpl(_CoderBacked):
    """Beam's default encoding of Python values; others through ``fallback_coder_impl``."""

    def __init__(self, fallback_coder_impl: Any = None, requires_deterministic_step_label: str | None = None) -> None:
        fallback = None if fallback_coder_impl is None else _as_coder(fallback_coder_impl)
        self._coder = objects.FastPrimitivesCoder(fallback, requires_deterministic_step_label)


class NullableCoderImpl(_CoderBacked):
    """None as a 0 byte, anything else as a 1 byte and the value's impl."""

    def __init__(self, value_coder: Any) -> None:
        self._coder = containers.NullableCoder(_as_coder(value_coder))


class LengthPrefixCoderImpl(_CoderBacked):
    """The value's bytes, always preceded by their length."""

    def __init__(self, value_coder: Any) -> None:
        self._coder = containers.LengthPrefixCoder(_as_coder(value_coder))


class TupleCoderImpl(_CoderBacked):
    """A tuple of fixed length, each component by its own impl."""

    def __init__(self, coder_impls: Sequence[Any]) -> None:
        self._coder = containers.TupleCoder([_as_coder(impl) for impl in coder_impls])


class IterableCoderImpl(_CoderBacked):
    """An iterable, its length first, each element by ``elem_coder``."""

    def __init__(self, elem_coder: Any) -> None:
        self._coder = containers.IterableCoder(_as_coder(elem_coder))


class ListCoderImpl(_CoderBacked):
    """A list, as an iterable."""

    def __init__(self, elem_coder: Any) -> None:
        self._coder = containers.ListCoder(_as_coder(elem_coder))


class TupleSequenceCoderImpl(_CoderBacked):
    """A tuple of any length, as an iterable."""

    def __init__(self, elem_coder: Any) -> None:
        self._coder = containers.TupleSequenceCoder(_as_coder(elem_coder))


class MapCoderImpl(_CoderBacked):
    """A dict: its size, then each key and value by their impls."""

    def __init__(self, key_coder: Any, value_coder: Any, is_deterministic: bool = False) -> None:
        self._coder = containers.MapCoder(_as_coder(key_coder), _as_coder(value_coder), is_deterministic)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.coders.coder_impl")
