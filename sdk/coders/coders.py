"""Coders: how values become bytes, with Beam's classes and Beam's byte formats.

A ``Coder`` turns a value into bytes (``encode``) and back (``decode``). The standard
coders write exactly the bytes Beam's write, so text written with a coder, or bytes a
user stores, read the same with either. Write your own by subclassing ``Coder`` and
defining ``encode``, ``decode`` and, if equal values always encode equally,
``is_deterministic``.

>>> TupleCoder([StrUtf8Coder(), VarIntCoder()]).encode(("a", 300))
b'\\x01a\\xac\\x02'

sparkbeam moves elements between Spark stages pickled, not encoded: a coder matters where
its bytes are seen (``ReadFromText(coder=)``, ``WriteToText(coder=)``, your own calls).
"""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.coders.base import Coder, FastCoder
from sparkbeam.coders.containers import (
    IterableCoder,
    LengthPrefixCoder,
    ListCoder,
    MapCoder,
    NullableCoder,
    TupleCoder,
    TupleSequenceCoder,
)
from sparkbeam.coders.objects import (
    Base64PickleCoder,
    CloudpickleCoder,
    DillCoder,
    FastPrimitivesCoder,
    PickleCoder,
    ProtoCoder,
)
from sparkbeam.coders.values import (
    BigEndianShortCoder,
    BigIntegerCoder,
    BooleanCoder,
    ByteCoder,
    BytesCoder,
    DecimalCoder,
    FloatCoder,
    GlobalWindowCoder,
    IntervalWindowCoder,
    SinglePrecisionFloatCoder,
    SingletonCoder,
    StrUtf8Coder,
    TimestampCoder,
    ToBytesCoder,
    ToStringCoder,
    VarInt32Coder,
    VarIntCoder,
)

__all__ = [
    "Base64PickleCoder",
    "BigEndianShortCoder",
    "BigIntegerCoder",
    "BooleanCoder",
    "ByteCoder",
    "BytesCoder",
    "CloudpickleCoder",
    "Coder",
    "DecimalCoder",
    "DillCoder",
    "FastCoder",
    "FastPrimitivesCoder",
    "FloatCoder",
    "GlobalWindowCoder",
    "IntervalWindowCoder",
    "IterableCoder",
    "LengthPrefixCoder",
    "ListCoder",
    "MapCoder",
    "NullableCoder",
    "PickleCoder",
    "ProtoCoder",
    "SinglePrecisionFloatCoder",
    "SingletonCoder",
    "StrUtf8Coder",
    "TimestampCoder",
    "ToBytesCoder",
    "ToStringCoder",
    "TupleCoder",
    "TupleSequenceCoder",
    "VarInt32Coder",
    "VarIntCoder",
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.coders.coders")
