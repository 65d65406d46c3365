"""Text IO with coders: ReadFromText decodes each line's bytes with its coder and splits lines
as Beam does; WriteToText encodes each element with its coder. Compared with apache_beam."""

from __future__ import annotations

import glob
import gzip
import os
import random

import pytest

import sparkbeam as beam
from sparkbeam import coders
from sparkbeam.io.textio import split_records
from tests.io.conftest import run


def beam_records(path, *, strip=True, delimiter=None, escapechar=None, skip_header_lines=0):
    """What Beam's text source reads from ``path``, as raw bytes per record."""
    from apache_beam.coders import BytesCoder
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.range_trackers import OffsetRangeTracker
    from apache_beam.io.textio import _TextSource

    source = _TextSource(
        path, 0, CompressionTypes.UNCOMPRESSED, strip, BytesCoder(), validate=False,
        skip_header_lines=skip_header_lines, delimiter=delimiter, escapechar=escapechar,
    )
    return list(source.read_records(path, OffsetRangeTracker(0, os.path.getsize(path))))


SAMPLES = [b"", b"a", b"a\n", b"a\nb", b"a\r\nb\r\n", b"\n\n", b"a\rb\nc", b"\r\n", b"x\n\ny\n\n",
           b"caf\xc3\xa9\n\xff\xfe\n", b"a\\\nb\nc", b"a\\\\\nb", b"a|;b|;|;c|"]


@pytest.mark.parametrize("data", SAMPLES)
@pytest.mark.parametrize("strip", [True, False])
@pytest.mark.parametrize("options", [{}, {"delimiter": b"|;"}, {"escapechar": b"\\"}, {"skip_header_lines": 1}])
def test_lines_split_exactly_as_beams_text_source(tmp_path, data, strip, options):
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    ours = list(split_records(data, strip_trailing_newlines=strip, **options))
    assert ours == beam_records(str(path), strip=strip, **options)


def test_random_bytes_split_as_beam_splits_them(tmp_path):
    rng = random.Random(11)
    path = tmp_path / "r.txt"
    for _ in range(150):
        data = bytes(rng.choice(b"ab\r\n\\|") for _ in range(rng.randrange(30)))
        path.write_bytes(data)
        for options in ({}, {"escapechar": b"\\"}, {"delimiter": b"|\n"}):
            for strip in (True, False):
                assert list(split_records(data, strip_trailing_newlines=strip, **options)) == beam_records(str(path), strip=strip, **options), (data, options)


def test_bad_delimiters_and_coders_are_refused_at_construction():
    with pytest.raises(ValueError, match="self-overlap"):
        beam.io.ReadFromText("x", delimiter=b"aa")
    with pytest.raises(ValueError, match="escapechar"):
        beam.io.ReadFromText("x", escapechar="\\")
    with pytest.raises(TypeError, match="coder instance"):
        beam.io.ReadFromText("x", coder=coders.BytesCoder)
    with pytest.raises(TypeError, match=r"with encode\(\)"):
        beam.io.WriteToText("x", coder=object())
    with pytest.raises(NotImplementedError, match="max_records_per_shard"):
        beam.io.WriteToText("x", max_records_per_shard=10)


# -- through pipelines, against Beam -----------------------------------------------------------


_BEAM_READ: list = []


def _collect(value):
    # Beam pickles the function by reference: this reaches the module's own list.
    from tests.io import test_textio_coders as module

    module._BEAM_READ.append(value)


def read_with_beam(path, **read_options):
    import apache_beam as apache_beam

    _BEAM_READ.clear()
    with apache_beam.Pipeline() as p:
        p | apache_beam.io.ReadFromText(path, **read_options) | apache_beam.Map(_collect)
    return sorted(_BEAM_READ, key=repr)


class Latin1Coder(coders.Coder):
    def encode(self, value):
        return value.encode("latin-1")

    def decode(self, encoded):
        return encoded.decode("latin-1")


def beam_latin1():
    import apache_beam.coders as beam_coders

    class BeamLatin1(beam_coders.Coder):
        def encode(self, value):
            return value.encode("latin-1")

        def decode(self, encoded):
            return encoded.decode("latin-1")

    return BeamLatin1()


def read_many_with_beam(reads):
    """Each read of ``reads`` (name -> (path, options)) in one apache_beam pipeline: name ->
    what it read, sorted."""
    import apache_beam as apache_beam

    _BEAM_READ.clear()
    with apache_beam.Pipeline() as p:
        for name, (path, options) in reads.items():
            lines = p | f"Read {name}" >> apache_beam.io.ReadFromText(path, **options)
            lines | f"Name {name}" >> apache_beam.Map(lambda value, name=name: (name, value)) | f"Collect {name}" >> apache_beam.Map(_collect)
    return {name: sorted((value for read, value in _BEAM_READ if read == name), key=repr) for name in reads}


@pytest.mark.spark
def test_read_from_text_with_a_coder_reads_what_beam_reads(spark, tmp_path):
    from apache_beam import coders as beam_coders

    data = b"caf\xe9\r\nline two\n\nlast|;more|;x"
    (tmp_path / "in.txt").write_bytes(data)
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(data))
    cases = {
        "bytes": ({"coder": coders.BytesCoder()}, {"coder": beam_coders.BytesCoder()}),
        "latin-1": ({"coder": Latin1Coder()}, {"coder": beam_latin1()}),
        "keep newlines": ({"coder": coders.BytesCoder(), "strip_trailing_newlines": False}, {"coder": beam_coders.BytesCoder(), "strip_trailing_newlines": False}),
        "delimiter": ({"coder": coders.BytesCoder(), "delimiter": b"|;"}, {"coder": beam_coders.BytesCoder(), "delimiter": b"|;"}),
        "escapechar and headers": ({"coder": coders.BytesCoder(), "escapechar": b"\\", "skip_header_lines": 1}, {"coder": beam_coders.BytesCoder(), "escapechar": b"\\", "skip_header_lines": 1}),
        "gzip": ({"coder": Latin1Coder()}, {"coder": beam_latin1()}),
    }
    paths = {name: str(tmp_path / ("in.txt.gz" if name == "gzip" else "in.txt")) for name in cases}
    # Every case in one pipeline on each side, to keep the test cheap.
    ours = run(lambda p: [p | name >> beam.io.ReadFromText(paths[name], **options) for name, (options, _) in cases.items()])
    beams = read_many_with_beam({name: (paths[name], options) for name, (_, options) in cases.items()})
    assert dict(zip(cases, (sorted(read, key=repr) for read in ours), strict=True)) == beams


@pytest.mark.spark
def test_a_line_the_coder_cannot_decode_fails_naming_the_read_the_file_and_the_record(spark, tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"fine\n\xff\xfe\n")

    class Utf8Strict(coders.Coder):
        def decode(self, encoded):
            return encoded.decode("utf-8")

    with pytest.raises(Exception, match=r"in.txt, record 2") as caught:
        run(lambda p: p | "Lines" >> beam.io.ReadFromText(str(path), coder=Utf8Strict()))
    assert "'Lines'" in " ".join(getattr(caught.value, "__notes__", []))


@pytest.mark.spark
def test_the_output_type_comes_from_the_coder(spark):
    p = beam.Pipeline()
    assert (p | "A" >> beam.io.ReadFromText("x")).element_type is str
    assert (p | "B" >> beam.io.ReadFromText("x", coder=coders.BytesCoder())).element_type is bytes
    with pytest.raises(beam.typehints.TypeCheckError):
        p | "C" >> beam.io.ReadFromText("x") | beam.GroupByKey()


def write_with_beam(prefix, values, **options):
    import apache_beam as apache_beam

    with apache_beam.Pipeline() as p:
        p | apache_beam.Create(values) | apache_beam.io.WriteToText(prefix, num_shards=1, **options)
    (path,) = glob.glob(prefix + "*")
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.spark
@pytest.mark.parametrize(
    "case", ["default", "bytes coder", "user coder", "no newlines with header", "header and footer", "varint coder"]
)
def test_write_to_text_with_a_coder_writes_beams_bytes(spark, tmp_path, case):
    from apache_beam import coders as beam_coders

    values, ours_options, beams_options = {
        "default": (["a", 1, 2.5, ("t", 1), b"raw"], {}, {}),
        "bytes coder": ([b"\x00\x01", b"xyz"], {"coder": coders.BytesCoder()}, {"coder": beam_coders.BytesCoder()}),
        "user coder": (["café"], {"coder": Latin1Coder()}, {"coder": beam_latin1()}),
        "no newlines with header": (["a", "b"], {"append_trailing_newlines": False, "header": "H"}, {"append_trailing_newlines": False, "header": "H"}),
        "header and footer": (["a"], {"header": "head", "footer": "foot"}, {"header": "head", "footer": "foot"}),
        "varint coder": ([1, 300], {"coder": coders.VarIntCoder()}, {"coder": beam_coders.VarIntCoder()}),
    }[case]
    # One element per line in a deterministic order: a single value, or values whose order
    # both runners keep within one shard.
    for index, value in enumerate(values):
        ours_prefix = str(tmp_path / f"ours{index}" / "out")
        p = beam.Pipeline()
        p | beam.Create([value]) | beam.io.WriteToText(ours_prefix, num_shards=1, **ours_options)
        p.run()
        (path,) = glob.glob(ours_prefix + "*")
        with open(path, "rb") as handle:
            ours = handle.read()
        assert ours == write_with_beam(str(tmp_path / f"beam{index}" / "out"), [value], **beams_options), value


@pytest.mark.spark
def test_skip_if_empty_writes_no_shard(spark, tmp_path):
    p = beam.Pipeline()
    p | beam.Create([]) | beam.io.WriteToText(str(tmp_path / "out" / "x"), skip_if_empty=True)
    p | "Other" >> beam.Create([]) | "Write" >> beam.io.WriteToText(str(tmp_path / "out" / "y"))
    p.run()
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == ["y-00000-of-00001"]
