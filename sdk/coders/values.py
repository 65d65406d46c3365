"""The coders of single values: bytes, strings, numbers, booleans, time and windows."""

from __future__ import annotations

import decimal
from typing import Any

from sparkbeam.coders.base import Coder, FastCoder, _DeterministicByType
from sparkbeam.coders.stream import InputStream, OutputStream, get_varint_size
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.window import GlobalWindow, IntervalWindow

__all__ = [
    "BigEndianShortCoder",
    "BigIntegerCoder",
    "BooleanCoder",
    "ByteCoder",
    "BytesCoder",
    "DecimalCoder",
    "FloatCoder",
    "GlobalWindowCoder",
    "IntervalWindowCoder",
    "SinglePrecisionFloatCoder",
    "SingletonCoder",
    "StrUtf8Coder",
    "TimestampCoder",
    "ToBytesCoder",
    "ToStringCoder",
    "VarInt32Coder",
    "VarIntCoder",
]


# -- strings and bytes -------------------------------------------------------------------------


class BytesCoder(_DeterministicByType):
    """Bytes as they are (length-prefixed when nested)."""

    def encode_to_stream(self, value: bytes, out: OutputStream, nested: bool) -> None:
        out.write(value, nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> bytes:
        return in_stream.read_all(nested)

    def to_type_hint(self) -> Any:
        return bytes


class StrUtf8Coder(Coder):
    """Strings as UTF-8."""

    def encode(self, value: str) -> bytes:
        return value.encode("utf-8")

    def decode(self, value: bytes) -> str:
        return value.decode("utf-8")

    # Nested in another coder (a model's fields, a tuple), without the base class's detour
    # through encode/decode: one call per string.
    def encode_to_stream(self, value: str, out: OutputStream, nested: bool) -> None:
        out.write(value.encode("utf-8"), nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> str:
        return in_stream.read_all(nested).decode("utf-8")

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> Any:
        return str


class ToBytesCoder(Coder):
    """What ``WriteToText`` writes by default: bytes as they are, anything else as ``str()`` in UTF-8.

    It cannot decode (``str()`` is not reversible).
    """

    def encode(self, value: Any) -> bytes:
        return value if isinstance(value, bytes) else str(value).encode("utf-8")

    def decode(self, unused_encoded: bytes) -> Any:
        msg = "ToBytesCoder cannot be used for decoding."
        raise NotImplementedError(msg)

    def is_deterministic(self) -> bool:
        return True


ToStringCoder = ToBytesCoder  # Beam's old name


# -- numbers -------------------------------------------------------------------------------------


class VarIntCoder(_DeterministicByType):
    """Integers in [-2**63, 2**63) as variable-length integers (negatives take 10 bytes)."""

    def encode_to_stream(self, value: int, out: OutputStream, nested: bool) -> None:
        try:
            out.write_var_int64(value)
        except OverflowError as error:
            msg = (
                f"Integer value '{value}' is out of the encodable range for VarIntCoder (a signed "
                "64-bit integer); use BigIntegerCoder for larger integers"
            )
            raise OverflowError(msg) from error

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> int:
        return in_stream.read_var_int64()

    def estimate_size(self, value: int) -> int:
        return get_varint_size(value)

    def to_type_hint(self) -> Any:
        return int


class VarInt32Coder(_DeterministicByType):
    """32-bit integers as variable-length integers."""

    def encode_to_stream(self, value: int, out: OutputStream, nested: bool) -> None:
        out.write_var_int32(value)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> int:
        return in_stream.read_var_int32()

    def to_type_hint(self) -> Any:
        return int


class BigIntegerCoder(_DeterministicByType):
    """Integers of any size: minimal big-endian two's complement bytes (Java's BigInteger)."""

    def encode_to_stream(self, value: int, out: OutputStream, nested: bool) -> None:
        length = ((value + 1).bit_length() + 8) // 8 if value < 0 else (value.bit_length() + 8) // 8
        out.write(value.to_bytes(length, "big", signed=True), nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> int:
        return int.from_bytes(in_stream.read_all(nested), "big", signed=True)

    def to_type_hint(self) -> Any:
        return int


class DecimalCoder(_DeterministicByType):
    """``decimal.Decimal``: the scale as a varint, then the unscaled value (Java's BigDecimal)."""

    def encode_to_stream(self, value: decimal.Decimal, out: OutputStream, nested: bool) -> None:
        scale = -value.as_tuple().exponent  # type: ignore[operator]
        out.write_var_int64(scale)
        BigIntegerCoder().encode_to_stream(int(value.scaleb(scale)), out, nested)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> decimal.Decimal:
        scale = in_stream.read_var_int64()
        return decimal.Decimal(BigIntegerCoder().decode_from_stream(in_stream, nested)).scaleb(-scale)

    def to_type_hint(self) -> Any:
        return decimal.Decimal


class FloatCoder(_DeterministicByType):
    """Floats as 8-byte big-endian IEEE 754 doubles."""

    def encode_to_stream(self, value: float, out: OutputStream, nested: bool) -> None:
        out.write_bigendian_double(value)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> float:
        return in_stream.read_bigendian_double()

    def estimate_size(self, value: float) -> int:
        return 8

    def to_type_hint(self) -> Any:
        return float


class SinglePrecisionFloatCoder(_DeterministicByType):
    """Floats as 4-byte big-endian IEEE 754 singles (precision is lost)."""

    def encode_to_stream(self, value: float, out: OutputStream, nested: bool) -> None:
        out.write_bigendian_float(value)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> float:
        return in_stream.read_bigendian_float()

    def estimate_size(self, value: float) -> int:
        return 4

    def to_type_hint(self) -> Any:
        return float


class BooleanCoder(_DeterministicByType):
    """Booleans as one byte, 0 or 1."""

    def encode_to_stream(self, value: bool, out: OutputStream, nested: bool) -> None:
        out.write_byte(1 if value else 0)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> bool:
        byte = in_stream.read_byte()
        if byte not in (0, 1):
            msg = f"Expected 0 or 1, got {byte}"
            raise ValueError(msg)
        return byte == 1

    def estimate_size(self, value: bool) -> int:
        return 1

    def to_type_hint(self) -> Any:
        return bool


class ByteCoder(_DeterministicByType):
    """An int in [0, 256) as one byte."""

    def encode_to_stream(self, value: int, out: OutputStream, nested: bool) -> None:
        out.write_byte(value)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> int:
        return in_stream.read_byte()

    def to_type_hint(self) -> Any:
        return int


class BigEndianShortCoder(_DeterministicByType):
    """A 16-bit signed int, big-endian."""

    def encode_to_stream(self, value: int, out: OutputStream, nested: bool) -> None:
        out.write_bigendian_int16(value)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> int:
        return in_stream.read_bigendian_int16()

    def to_type_hint(self) -> Any:
        return int


# -- time and windows --------------------------------------------------------------------------

_TIME_SHIFT = 1 << 63


class TimestampCoder(_DeterministicByType):
    """A ``Timestamp`` as its milliseconds, sign-flipped big-endian (Java's InstantCoder)."""

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        millis = value.micros // 1000
        out.write_bigendian_int64(millis - _TIME_SHIFT if millis >= 0 else millis + _TIME_SHIFT)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        millis = in_stream.read_bigendian_int64()
        millis = millis + _TIME_SHIFT if millis < 0 else millis - _TIME_SHIFT
        return Timestamp.from_micros(millis * 1000)

    def estimate_size(self, value: Any) -> int:
        return 8


class IntervalWindowCoder(_DeterministicByType):
    """An ``IntervalWindow``: its end in milliseconds (as an unsigned 64-bit), then its span."""

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        end_millis = value.end.micros // 1000
        out.write_bigendian_uint64(end_millis + _TIME_SHIFT)
        out.write_var_int64(end_millis - value.start.micros // 1000)

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        end_micros = 1000 * (in_stream.read_bigendian_uint64() - _TIME_SHIFT)
        start_micros = end_micros - 1000 * in_stream.read_var_int64()
        return IntervalWindow(Timestamp.from_micros(start_micros), Timestamp.from_micros(end_micros))


class SingletonCoder(FastCoder):
    """Always the same value; encodes to no bytes."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def encode_to_stream(self, value: Any, out: OutputStream, nested: bool) -> None:
        return None

    def decode_from_stream(self, in_stream: InputStream, nested: bool) -> Any:
        return self._value

    def is_deterministic(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._value == other._value

    def __hash__(self) -> int:
        return hash(self._value)


class GlobalWindowCoder(SingletonCoder):
    """The ``GlobalWindow``: no bytes."""

    def __init__(self) -> None:
        super().__init__(GlobalWindow())
