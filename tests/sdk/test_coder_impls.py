"""Beam's coder implementation objects (``coders.coder_impl``): the standard impls write the
bytes of Beam's, and a ``FastCoder`` whose ``_create_impl`` returns a ``StreamCoderImpl`` of
its own (as Beam's Nexmark models define theirs) encodes exactly as under Beam."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.coders import coder_impl
from sparkbeam.coders.coders import FastCoder, StrUtf8Coder
from sparkbeam.utils.timestamp import Timestamp


class Auction:
    def __init__(self, id: int, name: str, expires: object, reserve: float | None) -> None:
        self.id, self.name, self.expires, self.reserve = id, name, expires, reserve


def impl_class(ci: object, str_coder: type) -> type:
    """An impl written against a coder_impl module, as a user writes one for Beam."""

    class AuctionImpl(ci.StreamCoderImpl):  # type: ignore[attr-defined, name-defined, misc]
        _int = ci.VarIntCoderImpl()  # type: ignore[attr-defined]
        _str = str_coder().get_impl()
        _time = ci.TimestampCoderImpl()  # type: ignore[attr-defined]
        _reserve = ci.NullableCoderImpl(ci.FloatCoderImpl())  # type: ignore[attr-defined]

        def encode_to_stream(self, value, stream, nested):  # type: ignore[no-untyped-def]
            self._int.encode_to_stream(value.id, stream, True)
            self._str.encode_to_stream(value.name, stream, True)
            self._time.encode_to_stream(value.expires, stream, True)
            self._reserve.encode_to_stream(value.reserve, stream, True)

        def decode_from_stream(self, stream, nested):  # type: ignore[no-untyped-def]
            return Auction(
                self._int.decode_from_stream(stream, True),
                self._str.decode_from_stream(stream, True),
                self._time.decode_from_stream(stream, True),
                self._reserve.decode_from_stream(stream, True),
            )

    return AuctionImpl


class AuctionCoder(FastCoder):
    def _create_impl(self):  # type: ignore[no-untyped-def]
        return impl_class(coder_impl, StrUtf8Coder)()

    def is_deterministic(self) -> bool:
        return True


@pytest.mark.parametrize("reserve", [None, 12.5])
def test_a_fast_coder_with_its_own_impl_writes_beams_bytes(reserve: float | None) -> None:
    from apache_beam.coders import coder_impl as beam_impl
    from apache_beam.coders import coders as beam_coders
    from apache_beam.utils.timestamp import Timestamp as BeamTimestamp

    class BeamAuctionCoder(beam_coders.FastCoder):
        def _create_impl(self):  # type: ignore[no-untyped-def]
            return impl_class(beam_impl, beam_coders.StrUtf8Coder)()

    ours = AuctionCoder()
    encoded = ours.encode(Auction(300, "héllo", Timestamp.of(12.5), reserve))
    assert encoded == BeamAuctionCoder().encode(Auction(300, "héllo", BeamTimestamp.of(12.5), reserve))
    back = ours.decode(encoded)
    assert (back.id, back.name, back.expires, back.reserve) == (300, "héllo", Timestamp.of(12.5), reserve)
    # Nested in a standard coder, through the stream methods the impl provides.
    pair = beam.coders.TupleCoder([beam.coders.VarIntCoder(), ours])
    assert pair.decode(pair.encode((7, back)))[1].name == "héllo"
    assert ours.get_impl() is ours.get_impl(), "the impl is made once per coder"
    assert ours == AuctionCoder(), "a coder's cached impl is not part of its identity"


@pytest.mark.parametrize(
    ("build", "value"),
    [
        (lambda ci: ci.VarIntCoderImpl(), -300),
        (lambda ci: ci.BytesCoderImpl(), b"\x00abc"),
        (lambda ci: ci.BooleanCoderImpl(), True),
        (lambda ci: ci.FloatCoderImpl(), 2.25),
        (lambda ci: ci.BigIntegerCoderImpl(), 2**100),
        (lambda ci: ci.TupleCoderImpl([ci.VarIntCoderImpl(), ci.BytesCoderImpl()]), (300, b"x")),
        (lambda ci: ci.IterableCoderImpl(ci.VarIntCoderImpl()), [1, 2, 300]),
        (lambda ci: ci.MapCoderImpl(ci.BytesCoderImpl(), ci.VarIntCoderImpl()), {b"a": 1}),
        (lambda ci: ci.NullableCoderImpl(ci.VarIntCoderImpl()), None),
        (lambda ci: ci.LengthPrefixCoderImpl(ci.BytesCoderImpl()), b"abc"),
    ],
)
def test_standard_impls_write_beams_bytes(build, value) -> None:  # type: ignore[no-untyped-def]
    from apache_beam.coders import coder_impl as beam_impl

    ours, theirs = build(coder_impl), build(beam_impl)
    assert ours.encode(value) == theirs.encode(value)
    assert ours.encode_nested(value) == theirs.encode_nested(value)
    assert ours.decode(theirs.encode(value)) == theirs.decode(theirs.encode(value))


def test_a_fast_coder_with_neither_stream_methods_nor_an_impl_says_so() -> None:
    class Bare(FastCoder):
        pass

    with pytest.raises(NotImplementedError, match="Bare defines neither encode_to_stream nor _create_impl"):
        Bare().encode(1)


def test_beams_re_exports_in_transforms_core_resolve() -> None:
    import apache_beam.transforms.core as beam_core

    from sparkbeam.transforms import core

    assert beam.transforms.core.PTransform is beam.PTransform
    for name in ("PTransform", "TimestampedValue", "GlobalWindows", "StateSpec", "with_input_types", "Duration"):
        assert hasattr(beam_core, name)
        assert getattr(core, name).__name__ == getattr(beam_core, name).__name__
    with pytest.raises(NotImplementedError, match=r"apache_beam\.coders\.coder_impl\.WindowedValueCoderImpl"):
        coder_impl.WindowedValueCoderImpl  # noqa: B018
