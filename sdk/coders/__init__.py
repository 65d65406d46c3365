"""Coders with Beam's names and byte formats (``sparkbeam.coders``, also ``beam.coders``).

>>> from sparkbeam import coders
>>> coders.VarIntCoder().encode(300), coders.registry.get_coder(str)
(b'\\xac\\x02', StrUtf8Coder)
"""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.coders import coders, typecoders
from sparkbeam.coders.coders import (
    BigIntegerCoder,
    BooleanCoder,
    ByteCoder,
    BytesCoder,
    CloudpickleCoder,
    Coder,
    DecimalCoder,
    DillCoder,
    FastPrimitivesCoder,
    FloatCoder,
    IterableCoder,
    ListCoder,
    MapCoder,
    NullableCoder,
    PickleCoder,
    ProtoCoder,
    SinglePrecisionFloatCoder,
    SingletonCoder,
    StrUtf8Coder,
    TimestampCoder,
    TupleCoder,
    TupleSequenceCoder,
    VarIntCoder,
)
from sparkbeam.coders.typecoders import registry

__all__ = [
    "BigIntegerCoder",
    "BooleanCoder",
    "ByteCoder",
    "BytesCoder",
    "CloudpickleCoder",
    "Coder",
    "DecimalCoder",
    "DillCoder",
    "FastPrimitivesCoder",
    "FloatCoder",
    "IterableCoder",
    "ListCoder",
    "MapCoder",
    "NullableCoder",
    "PickleCoder",
    "ProtoCoder",
    "SinglePrecisionFloatCoder",
    "SingletonCoder",
    "StrUtf8Coder",
    "TimestampCoder",
    "TupleCoder",
    "TupleSequenceCoder",
    "VarIntCoder",
    "coders",
    "registry",
    "typecoders",
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.coders")
