"""Coders write Beam's bytes: each standard coder against apache_beam's on the same values,
outer and nested, and the registry picks the coders Beam's picks."""

from __future__ import annotations

import collections
import decimal
import enum
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkbeam import coders
from sparkbeam.coders.coders import ToBytesCoder, ToStringCoder
from sparkbeam.typehints import KV, Any, Dict, Iterable, List, Optional, Tuple


def beam_coders():
    import apache_beam.coders as beam_coders

    return beam_coders


INTS = [0, 1, -1, 127, 128, 300, -300, 2**31 - 1, -(2**31), 2**62, 2**63 - 1, -(2**63)]
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), float("-inf"), 3.141592653589793]
STRINGS = ["", "a", "héllo", "日本語", "x" * 300]
BYTES = [b"", b"\x00", b"abc", bytes(range(256))]

# (name, builder of the coder from a coders module, values)
CASES = [
    ("VarIntCoder", lambda c: c.VarIntCoder(), INTS),
    ("BigIntegerCoder", lambda c: c.BigIntegerCoder(), [*INTS, 2**100, -(2**100), 255, -256]),
    ("FloatCoder", lambda c: c.FloatCoder(), FLOATS),
    ("SinglePrecisionFloatCoder", lambda c: c.SinglePrecisionFloatCoder(), [0.0, 1.5, -2.25]),
    ("BooleanCoder", lambda c: c.BooleanCoder(), [True, False]),
    ("BytesCoder", lambda c: c.BytesCoder(), BYTES),
    ("StrUtf8Coder", lambda c: c.StrUtf8Coder(), STRINGS),
    ("ByteCoder", lambda c: c.ByteCoder(), [0, 7, 255]),
    ("DecimalCoder", lambda c: c.DecimalCoder(), [decimal.Decimal("0"), decimal.Decimal("1.50"), decimal.Decimal("-123.456e7")]),
    ("TupleCoder", lambda c: c.TupleCoder([c.StrUtf8Coder(), c.VarIntCoder()]), [("a", 1), ("", -5), ("héllo", 2**40)]),
    ("TupleCoder of bytes", lambda c: c.TupleCoder([c.BytesCoder(), c.BytesCoder(), c.FloatCoder()]), [(b"a", b"bc", 1.5)]),
    ("IterableCoder", lambda c: c.IterableCoder(c.VarIntCoder()), [[], [1, 2, 3], list(range(200))]),
    ("ListCoder", lambda c: c.ListCoder(c.StrUtf8Coder()), [[], ["a", "bc"]]),
    ("TupleSequenceCoder", lambda c: c.TupleSequenceCoder(c.FloatCoder()), [(), (1.0, 2.5)]),
    ("MapCoder", lambda c: c.MapCoder(c.StrUtf8Coder(), c.VarIntCoder()), [{}, {"a": 1, "b": 2}]),
    ("NullableCoder", lambda c: c.NullableCoder(c.VarIntCoder()), [None, 0, 5, -5]),
    ("PickleCoder", lambda c: c.PickleCoder(), [1, "a", (1, 2), {"k": [1.5]}]),
    ("FastPrimitivesCoder", lambda c: c.FastPrimitivesCoder(), [
        None, 0, 1, -1, 2**63 - 1, 2**64, 1.5, "héllo", b"bytes", True, False, [1, "a"], (1, (2.0, None)),
        {"a": 1, 2: [b"x"]}, {3}, [[], {}, ()], decimal.Decimal("1.5"),
    ]),
    ("TimestampCoder", lambda c: c.TimestampCoder(), "timestamps"),
    ("ToBytesCoder", lambda c: c.coders.ToBytesCoder(), ["a", b"b", 1, 2.5, ("t", 1), None]),
]


def _values(values, module):
    if values != "timestamps":
        return values
    return [module.Timestamp(micros=m) for m in (0, 1_000, -1_000, 1_767_225_600_123_000, -62_135_596_800_000_000)]


@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_standard_coders_write_beams_bytes(name):
    from apache_beam.utils import timestamp as beam_timestamp

    from sparkbeam.utils import timestamp as our_timestamp

    _, build, values = next(case for case in CASES if case[0] == name)
    ours, theirs = build(coders), build(beam_coders())
    for ours_value, beam_value in zip(_values(values, our_timestamp), _values(values, beam_timestamp)):
        assert ours.encode(ours_value) == theirs.encode(beam_value), ours_value
        if name == "ToBytesCoder":
            continue  # it cannot decode, in either
        assert ours.encode_nested(ours_value) == theirs.get_impl().encode_nested(beam_value), ours_value
        decoded = ours.decode(ours.encode(ours_value))
        if isinstance(ours_value, float) and math.isnan(ours_value):
            continue
        assert decoded == ours_value or name == "SinglePrecisionFloatCoder"
        assert ours.decode_nested(ours.encode_nested(ours_value)) == decoded
        assert ours.estimate_size(ours_value) == len(ours.encode(ours_value)) or name == "IterableCoder"


@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_coders_print_and_declare_determinism_as_beams(name):
    _, build, _ = next(case for case in CASES if case[0] == name)
    ours, theirs = build(coders), build(beam_coders())
    assert repr(ours) == repr(theirs)
    assert ours.is_deterministic() == theirs.is_deterministic()
    assert ours == build(coders) and hash(ours) == hash(build(coders))


def test_an_iterable_without_a_length_is_written_in_blocks_as_beam_writes_it():
    ours = coders.IterableCoder(coders.VarIntCoder())
    theirs = beam_coders().IterableCoder(beam_coders().VarIntCoder())
    encoded = ours.encode(iter(range(50_000)))
    assert encoded == theirs.encode(iter(range(50_000)))
    assert ours.decode(encoded) == list(range(50_000))


@settings(max_examples=100, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.floats(allow_nan=False)
    | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=3) | st.integers(), children, max_size=3),
    max_leaves=12,
))
def test_fast_primitives_coder_matches_beam_on_any_primitive_value(value):
    ours = coders.FastPrimitivesCoder()
    theirs = beam_coders().FastPrimitivesCoder()
    assert ours.encode(value) == theirs.encode(value)
    assert ours.decode(ours.encode(value)) == value
    assert ours.encode_nested(value) == theirs.get_impl().encode_nested(value)


class Color(enum.Enum):
    RED = 1


Point = collections.namedtuple("Point", "x y")


def test_deterministic_versions_sort_what_is_unordered_and_refuse_what_they_cannot_order():
    coder = coders.FastPrimitivesCoder().as_deterministic_coder("GroupByKey")
    assert coder.is_deterministic()
    assert coder.encode({"b": 1, "a": 2}) == coder.encode({"a": 2, "b": 1})
    assert coder.encode({3, 1, 2}) == beam_coders().FastPrimitivesCoder().as_deterministic_coder("x").encode({3, 1, 2})
    assert coder.decode(coder.encode(Point(1, "a"))) == Point(1, "a")
    assert coder.decode(coder.encode(Color.RED)) is Color.RED
    with pytest.raises(TypeError, match="GroupByKey"):
        coder.encode(object())
    with pytest.raises(ValueError, match="cannot be made deterministic for 'Group'"):
        coders.PickleCoder().as_deterministic_coder("Group").as_deterministic_coder("x") and coders.Coder().as_deterministic_coder("Group")
    assert coders.MapCoder(coders.StrUtf8Coder(), coders.VarIntCoder()).as_deterministic_coder("g").is_deterministic()


def test_a_users_coder_nests_by_length_prefix_as_in_beam():
    class Upper(coders.Coder):
        def encode(self, value):
            return value.upper().encode()

        def decode(self, encoded):
            return encoded.decode().lower()

    import apache_beam.coders as bc

    class BeamUpper(bc.Coder):
        def encode(self, value):
            return value.upper().encode()

        def decode(self, encoded):
            return encoded.decode().lower()

    ours = coders.TupleCoder([Upper(), coders.VarIntCoder()])
    theirs = bc.TupleCoder([BeamUpper(), bc.VarIntCoder()])
    assert ours.encode(("ab", 3)) == theirs.encode(("ab", 3))
    assert ours.decode(ours.encode(("ab", 3))) == ("ab", 3)
    assert not Upper().is_deterministic() and Upper().estimate_size("ab") == 2


@pytest.mark.parametrize(
    "hint",
    [
        lambda t: int, lambda t: float, lambda t: str, lambda t: bytes, lambda t: bool,
        lambda t: t.KV[str, int], lambda t: t.Tuple[int, float, bytes], lambda t: t.List[str],
        lambda t: t.Iterable[int], lambda t: t.Dict[str, float], lambda t: t.Optional[int],
        lambda t: t.Any, lambda t: object, lambda t: t.Tuple[str, t.Iterable[t.Tuple[int, bool]]],
        lambda t: tuple[str, int], lambda t: list[int],
    ],
)
def test_the_registry_picks_beams_coders(hint):
    import apache_beam.typehints as beam_typehints

    from sparkbeam import typehints

    assert repr(coders.registry.get_coder(hint(typehints))) == repr(beam_coders().registry.get_coder(hint(beam_typehints)))


def test_a_registered_coder_is_the_one_the_registry_gives():
    class Money:
        def __init__(self, cents):
            self.cents = cents

    class MoneyCoder(coders.Coder):
        def encode(self, value):
            return coders.VarIntCoder().encode(value.cents)

        def decode(self, encoded):
            return Money(coders.VarIntCoder().decode(encoded))

        def is_deterministic(self):
            return True

    registry = coders.typecoders.CoderRegistry()
    registry.register_coder(Money, MoneyCoder)
    assert isinstance(registry.get_coder(Money), MoneyCoder)
    assert repr(registry.get_coder(KV[str, Money])) == "TupleCoder[StrUtf8Coder, MoneyCoder]"
    assert registry.get_custom_type_coder_tuples() == [(Money, MoneyCoder)]
    with pytest.raises(TypeError, match="coder class"):
        registry.register_coder(Money, MoneyCoder())


def test_coder_type_hints_round_trip():
    assert coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()]).to_type_hint() == Tuple[str, int]
    assert coders.ListCoder(coders.FloatCoder()).to_type_hint() == List[float]
    assert coders.IterableCoder(coders.BytesCoder()).to_type_hint() == Iterable[bytes]
    assert coders.MapCoder(coders.StrUtf8Coder(), coders.BooleanCoder()).to_type_hint() == Dict[str, bool]
    assert coders.NullableCoder(coders.VarIntCoder()).to_type_hint() == Optional[int]
    assert coders.PickleCoder().to_type_hint() == Any


def test_to_bytes_coder_cannot_decode_and_keeps_beams_old_name():
    assert ToStringCoder is ToBytesCoder
    with pytest.raises(NotImplementedError, match="cannot be used for decoding"):
        ToBytesCoder().decode(b"x")


def test_bad_bytes_fail_with_what_was_expected():
    with pytest.raises(ValueError, match="end after"):
        coders.VarIntCoder().decode(b"\x80")
    with pytest.raises(ValueError, match="Expected 0 or 1"):
        coders.BooleanCoder().decode(b"\x02")
    with pytest.raises(OverflowError, match="BigIntegerCoder"):
        coders.VarIntCoder().encode(2**64)


def test_random_nested_tuples_match_beam():
    rng = random.Random(7)
    ours = coders.TupleCoder([coders.NullableCoder(coders.StrUtf8Coder()), coders.ListCoder(coders.VarIntCoder()), coders.BooleanCoder()])
    bc = beam_coders()
    theirs = bc.TupleCoder([bc.NullableCoder(bc.StrUtf8Coder()), bc.ListCoder(bc.VarIntCoder()), bc.BooleanCoder()])
    for _ in range(200):
        value = (rng.choice([None, "", "ab", "é" * rng.randrange(5)]), [rng.randrange(-(2**40), 2**40) for _ in range(rng.randrange(5))], rng.random() < 0.5)
        assert ours.encode(value) == theirs.encode(value)
        assert ours.decode(ours.encode(value)) == value


def test_test_stream_elements_go_through_its_coder():
    from sparkbeam.testing.test_stream import TestStream

    class Rounding(coders.Coder):
        def encode(self, value):
            return coders.FloatCoder().encode(round(value, 1))

        def decode(self, encoded):
            return coders.FloatCoder().decode(encoded)

    stream = TestStream(coder=Rounding()).add_elements([1.26, 2.0])
    assert [tv.value for tv in stream.events[0].timestamped_values] == [1.3, 2.0]
    with pytest.raises(TypeError, match="coder must be a Coder"):
        TestStream(coder="utf-8")
