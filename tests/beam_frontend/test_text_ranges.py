"""Beam's ReadFromText at its defaults is read range by range in C (runners/beam/text_ranges.py)
and gives exactly what Beam's own ``_TextSource`` gives for the same byte ranges: checked
against Beam's reader directly, on generated files and cuts, with no Spark."""

from __future__ import annotations

import functools
import gzip
import importlib
import io
import itertools
import os
import random

import apache_beam as beam
import pytest
from apache_beam.coders import coders as beam_coders
from apache_beam.io import filebasedsource, textio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import timestamp as beam_timestamp

import sparkbeam
from sparkbeam.io.iobase import read_bundle
from sparkbeam.runners.beam.plain import BeamFnParDoOp
from sparkbeam.runners.beam.reads import source_bundles
from sparkbeam.runners.beam.text_ranges import TextRange, TextRangesSource, range_lines, text_ranges
from sparkbeam.runners.core.lowering.ops import BoundedSourceReadOp
from sparkbeam.runners.core.sources import text_lines
from tests.beam_frontend.engine import emitted_values, run_in_engine

#: pieces of text that meet every rule of Beam's reader: line ends of both kinds, lone
#: carriage returns, multi-byte characters, a byte-order mark, empty lines
PIECES = [b"a", b"xyz", b"\n", b"\n", b"\r\n", b"\r", b"\r\r\n", b"\xc3\xa9", b"\xe6\x97\xa5", b"\xef\xbb\xbf", b"\n\n"]
NOT_UTF8 = [b"\xff", b"\xc3", b"\x80"]


def generated(rng: random.Random, bad: bool = False) -> bytes:
    pieces = [rng.choice(PIECES) for _ in range(rng.randint(0, 40))]
    if bad:
        pieces.insert(rng.randint(0, len(pieces)), rng.choice(NOT_UTF8))
    return b"".join(pieces)


def cuts(rng: random.Random, size: int) -> list[tuple[int, int]]:
    """Consecutive ranges covering [0, size), of random lengths (some of one byte)."""
    bounds = sorted({0, size, *(rng.randint(1, max(1, size - 1)) for _ in range(rng.randint(0, 6)))})
    return [(start, stop) for start, stop in itertools.pairwise(bounds) if start < stop]


def beams_reading(path: str, size: int, start: int, stop: int, buffer_size: int) -> list[str]:
    source = textio._TextSource(path, 0, CompressionTypes.AUTO, True, beam_coders.StrUtf8Coder(), buffer_size=buffer_size, validate=False)
    single = filebasedsource._SingleFileSource(source, path, 0, size)
    return list(single.read(single.get_range_tracker(start, stop)))


def outcome(read, *args, **options):
    try:
        return read(*args, **options)
    except UnicodeDecodeError as error:
        return (type(error), str(error))


def test_every_range_reads_what_beams_text_source_reads_for_it(tmp_path):
    checked = 0
    for seed in range(600):
        rng = random.Random(seed)
        data = generated(rng, bad=seed % 10 == 9)
        if not data:
            continue
        path = tmp_path / f"lines-{seed}.txt"
        path.write_bytes(data)
        buffer_size = rng.choice([1, 2, 3, 8192])
        for start, stop in cuts(rng, len(data)):
            expected = outcome(beams_reading, str(path), len(data), start, stop, buffer_size)
            got = outcome(range_lines, io.BytesIO(data), start, stop)
            assert got == expected, f"seed {seed}: {data!r}[{start}:{stop}]"
            checked += 1
    assert checked > 1500


def beams_lines(path: str, start: int, stop: int | None, **options) -> list[str]:
    """What Beam's ``_TextSource`` with ``options`` reads of ``path``'s range (all of a
    compressed file, which Beam never splits)."""
    size = os.path.getsize(path)
    source = textio._TextSource(path, 0, CompressionTypes.AUTO, options.pop("strip", True), beam_coders.StrUtf8Coder(), validate=False, **options)
    single = filebasedsource._SingleFileSource(source, path, 0, size, splittable=stop is not None)
    return list(single.read(single.get_range_tracker(start, stop)))


def read_as_ranges(ranges: tuple[TextRange, ...], **options) -> list[str]:
    def open_file(path: str, compression: str):
        raw = open(path, "rb")  # noqa: SIM115 - closed with the stream
        return gzip.GzipFile(fileobj=raw) if compression == "gzip" else raw

    return [line for block in text_lines.read_ranges(ranges, open_file, **options) for line in block]


@pytest.mark.parametrize("header", [0, 1, 3])
@pytest.mark.parametrize("strip", [True, False])
def test_headers_kept_ends_and_compressed_files_read_as_beams_text_source_reads_them(tmp_path, monkeypatch, header, strip):
    monkeypatch.setattr(text_lines, "BLOCK", 5)  # a compressed stream's blocks cut lines too
    monkeypatch.setattr(text_lines, "TAIL_CHUNK", 4)
    checked = 0
    for seed in range(120):
        rng = random.Random(seed)
        data = generated(rng, bad=seed % 10 == 9)
        if not data:
            continue
        plain, packed = tmp_path / f"lines-{seed}.txt", tmp_path / f"lines-{seed}.txt.gz"
        plain.write_bytes(data)
        packed.write_bytes(gzip.compress(data))
        beams = functools.partial(outcome, beams_lines)
        ours = functools.partial(outcome, read_as_ranges)
        for start, stop in cuts(rng, len(data)):
            expected = beams(str(plain), start, stop, skip_header_lines=header, strip=strip)
            got = ours((TextRange(str(plain), start, stop),), skip_header_lines=header, keep_ends=not strip)
            assert got == expected, f"seed {seed}: {data!r}[{start}:{stop}]"
            checked += 1
        expected = beams(str(packed), 0, None, skip_header_lines=header, strip=strip)
        assert ours((TextRange(str(packed), 0, 1, "gzip"),), skip_header_lines=header, keep_ends=not strip) == expected, f"seed {seed}: {data!r}"
    assert checked > 300


def test_a_last_line_longer_than_a_read_ahead_is_read_to_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(text_lines, "TAIL_CHUNK", 3)
    data = b"first\r\n" + b"x" * 20 + b"\r\n" + b"y" * 10
    path = tmp_path / "long.txt"
    path.write_bytes(data)
    for start, stop in [(0, 8), (8, 9), (9, 31), (1, 2), (0, len(data))]:
        assert range_lines(io.BytesIO(data), start, stop) == beams_reading(str(path), len(data), start, stop, 8192)
    assert range_lines(io.BytesIO(data), 0, 8) == ["first", "x" * 20]


def test_beams_own_split_of_a_file_gives_its_ranges_and_its_lines(tmp_path):
    rng = random.Random(7)
    data = b"".join(generated(rng) for _ in range(3000))
    path = tmp_path / "big.txt"
    path.write_bytes(data)
    source = beam.io.ReadFromText(str(path))._source
    bundles = [bundle for bundle in source.split(len(data) // 7)]
    ranges = text_ranges(bundles)
    assert ranges is not None and len(ranges) > 5
    assert [(r.start, r.stop) for r in ranges] == [(b.start_position, b.stop_position) for b in bundles]
    read = [line for r in ranges for line in range_lines(io.BytesIO(data), r.start, r.stop)]
    assert read == list(source.read(source.get_range_tracker(None, None)))
    # For the run, one file is cut anew into one bundle per reader.
    for readers in (1, 2, 3):
        assert len(list(TextRangesSource(ranges, "Read").split(-(-len(data) // readers)))) == readers


@pytest.mark.parametrize("readers", [1, 2, 3, 50])
def test_the_source_cut_for_any_number_of_readers_reads_every_files_lines_once(tmp_path, monkeypatch, readers):
    monkeypatch.setattr(text_lines, "BLOCK", 97)  # blocks within a bundle, too
    rng = random.Random(readers)
    for index in range(4):
        (tmp_path / f"part-{index}.txt").write_bytes(b"".join(generated(rng) for _ in range(20)))
    (tmp_path / "part-empty.txt").write_bytes(b"")
    source = beam.io.ReadFromText(str(tmp_path / "part-*.txt"))._source
    reader = TextRangesSource(text_ranges(source_bundles(source)), "Read")
    total = reader.estimate_size()
    bundles = list(reader.split(-(-total // readers)))
    assert readers <= len(bundles) <= readers + 4  # a file's last piece may start a bundle of its own
    assert sum(bundle.weight for bundle in bundles) == total
    read = sorted(wv.value for bundle in bundles for wv in read_bundle(bundle))
    assert read == sorted(source.read(source.get_range_tracker(None, None)))


@pytest.mark.parametrize(
    "options",
    [
        {"skip_header_lines": 1},
        {"coder": beam_coders.BytesCoder()},
        {"strip_trailing_newlines": False},
        {"delimiter": b";"},
        {"escapechar": b"\\"},
        {"compression_type": CompressionTypes.GZIP},
    ],
    ids=lambda options: next(iter(options)),
)
def test_any_setting_of_its_own_keeps_beams_reader(tmp_path, options):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a\nb\n")
    source = beam.io.ReadFromText(str(path), **options)._source
    assert text_ranges(source_bundles(source)) is None


def test_a_compressed_file_keeps_beams_reader(tmp_path):
    path = tmp_path / "lines.txt.gz"
    path.write_bytes(gzip.compress(b"a\nb\n"))
    assert text_ranges(source_bundles(beam.io.ReadFromText(str(path))._source)) is None
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"a\nb\n")
    (found,) = text_ranges(source_bundles(beam.io.ReadFromText(str(plain))._source))
    assert found == TextRange(str(plain), 0, 4)
    assert text_ranges([]) is None  # nothing matched (or only empty files): Beam's reader says what that means


TEXT_WITH_EVERY_LINE_END = "\ufeffcaf\u00e9\r\n\r\n\u65e5\u672c\u8a9e\nlone\rcarriage\n\nno final newline\r".encode()


def test_read_from_text_at_its_defaults_reads_ranges_keeping_the_ranges_timestamp_and_window(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(TEXT_WITH_EVERY_LINE_END)
    p = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions([]))
    lines = p | "Read" >> beam.io.ReadFromText(str(path)) | "Time" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam: (x, t, w))
    sparkbeam.capture(lines)
    plan, loop = run_in_engine(p)
    (reading,) = [op for op in plan.lowered.ops if "SDFBoundedSourceReader" in op.label]
    assert type(reading) is BoundedSourceReadOp and type(reading.source) is TextRangesSource
    emitted = emitted_values(plan, loop, lines)
    assert {(t.micros, type(w).__name__) for _, t, w in emitted} == {(beam_timestamp.MIN_TIMESTAMP.micros, "GlobalWindow")}
    expected = ["\ufeffcaf\u00e9", "", "\u65e5\u672c\u8a9e", "lone\rcarriage", "", "no final newline\r"]
    assert sorted(value for value, _, _ in emitted) == sorted(expected)


def test_a_line_that_is_not_utf8_fails_as_beams_reader_fails_naming_the_read(tmp_path, monkeypatch):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nnot \xff utf-8\n")

    def failure() -> str:
        p = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions([]))
        sparkbeam.capture(p | "Read" >> beam.io.ReadFromText(str(path)))
        with pytest.raises(UnicodeDecodeError, match=r"can't decode byte 0xff in position 4.*\n.*SDFBoundedSourceReader") as failed:
            run_in_engine(p)
        return str(failed.value)

    fast = failure()
    translate_module = importlib.import_module("sparkbeam.runners.beam.translate")
    monkeypatch.setattr(translate_module, "text_ranges", lambda bundles: None)  # Beam's reader
    assert fast == failure()


def test_read_from_text_with_a_header_to_skip_keeps_beams_reader(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(TEXT_WITH_EVERY_LINE_END)
    p = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions([]))
    lines = p | "Read" >> beam.io.ReadFromText(str(path), skip_header_lines=1)
    sparkbeam.capture(lines)
    plan, loop = run_in_engine(p)
    (reading,) = [op for op in plan.lowered.ops if "SDFBoundedSourceReader" in op.label]
    assert type(reading) is BeamFnParDoOp
    assert sorted(emitted_values(plan, loop, lines)) == sorted(["", "\u65e5\u672c\u8a9e", "lone\rcarriage", "", "no final newline\r"])
