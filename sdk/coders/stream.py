"""Byte streams in Beam's wire formats: variable-length integers, big-endian numbers, and
byte strings that are length-prefixed when nested inside another encoding.

A coder writes a value either *outer* (the value is the whole byte string, so no length
prefix is needed) or *nested* (other bytes follow, so the length comes first), as in Beam.

>>> out = OutputStream(); out.write_var_int64(300); out.get()
b'\\xac\\x02'
"""

from __future__ import annotations

import struct

__all__ = ["InputStream", "OutputStream", "get_varint_size"]

_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1
_INT64 = struct.Struct(">q")
_UINT64_BE = struct.Struct(">Q")
_DOUBLE = struct.Struct(">d")


class OutputStream:
    """Collects the bytes of one encoding.

    One growing ``bytearray``: a coder writes many small pieces per value (a byte of
    length, a field), and appending to one buffer costs less than a ``bytes`` per piece.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def write(self, data: bytes, nested: bool = False) -> None:
        if not isinstance(data, (bytes, bytearray)):
            msg = f"expected bytes to write, got {type(data).__name__}: {data!r}"
            raise TypeError(msg)
        if nested:
            size = len(data)
            if size < 0x80:  # write_var_int64's one-byte case, without its call
                self._buffer.append(size)
            else:
                self.write_var_int64(size)
        self._buffer += data

    def write_byte(self, value: int) -> None:
        self._buffer.append(value)

    def write_var_int64(self, value: int) -> None:
        """Seven bits per byte, least significant first; negatives as 64-bit two's complement."""
        if 0 <= value < 0x80:  # one byte: most lengths, counts and small ids
            self._buffer.append(value)
            return
        if not -(1 << 63) <= value <= _INT64_MAX:
            msg = f"{value} does not fit in a signed 64-bit integer"
            raise OverflowError(msg)
        if value < 0:
            value += _UINT64
        buffer = self._buffer
        while value >= 0x80:
            buffer.append((value & 0x7F) | 0x80)
            value >>= 7
        buffer.append(value)

    def write_var_int32(self, value: int) -> None:
        self.write_var_int64(int(value) & 0xFFFFFFFF)

    def write_bigendian_int64(self, value: int) -> None:
        self._buffer += _INT64.pack(value)

    def write_bigendian_uint64(self, value: int) -> None:
        self._buffer += _UINT64_BE.pack(value)

    def write_bigendian_int32(self, value: int) -> None:
        self._buffer += struct.pack(">i", value)

    def write_bigendian_int16(self, value: int) -> None:
        self._buffer += struct.pack(">h", value)

    def write_bigendian_double(self, value: float) -> None:
        self._buffer += _DOUBLE.pack(value)

    def write_bigendian_float(self, value: float) -> None:
        self._buffer += struct.pack(">f", value)

    def get(self) -> bytes:
        return bytes(self._buffer)

    def size(self) -> int:
        return len(self._buffer)


class InputStream:
    """Reads one encoding back; running past the end is an error naming what was read."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._pos = 0

    def read(self, size: int) -> bytes:
        end = self._pos + size
        if size < 0 or end > len(self._data):
            msg = f"the encoded bytes end after {len(self._data)} bytes; {size} more were expected at byte {self._pos}"
            raise ValueError(msg)
        data = self._data[self._pos : end]
        self._pos = end
        return data

    def read_all(self, nested: bool) -> bytes:
        return self.read(self.read_var_int64() if nested else len(self._data) - self._pos)

    def read_byte(self) -> int:
        if self._pos >= len(self._data):
            msg = f"the encoded bytes end after {len(self._data)} bytes; one more was expected"
            raise ValueError(msg)
        self._pos += 1
        return self._data[self._pos - 1]

    def read_var_int64(self) -> int:
        data, pos = self._data, self._pos
        if pos < len(data) and data[pos] < 0x80:  # one byte: most lengths, counts and small ids
            self._pos = pos + 1
            return data[pos]
        shift = 0
        result = 0
        while True:
            if pos >= len(data):
                msg = f"the encoded bytes end after {len(data)} bytes; one more was expected"
                raise ValueError(msg)
            byte = data[pos]
            pos += 1
            bits = byte & 0x7F
            if shift >= 64 or (shift >= 63 and bits > 1):
                msg = "a variable-length integer is longer than 64 bits"
                raise ValueError(msg)
            result |= bits << shift
            shift += 7
            if not byte & 0x80:
                break
        self._pos = pos
        return result - _UINT64 if result > _INT64_MAX else result

    def read_var_int32(self) -> int:
        return struct.unpack("<i", struct.pack("<I", self.read_var_int64() & 0xFFFFFFFF))[0]

    def read_bigendian_int64(self) -> int:
        return _INT64.unpack(self.read(8))[0]

    def read_bigendian_uint64(self) -> int:
        return _UINT64_BE.unpack(self.read(8))[0]

    def read_bigendian_int32(self) -> int:
        return struct.unpack(">i", self.read(4))[0]

    def read_bigendian_int16(self) -> int:
        return struct.unpack(">h", self.read(2))[0]

    def read_bigendian_double(self) -> float:
        return _DOUBLE.unpack(self.read(8))[0]

    def read_bigendian_float(self) -> float:
        return struct.unpack(">f", self.read(4))[0]

    def size(self) -> int:
        """The bytes not read yet."""
        return len(self._data) - self._pos


def get_varint_size(value: int) -> int:
    """How many bytes ``value`` takes as a variable-length integer."""
    if value < 0:
        value += _UINT64
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size
