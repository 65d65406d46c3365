"""fileio and ReadAllFromText beside apache_beam on the same files: matching, reading matched
files, writing files per destination and window (batch and a stream)."""

from __future__ import annotations

import gzip
import importlib
import os

import pytest

import sparkbeam as beam
from sparkbeam.io import fileio
from sparkbeam.io.filesystem import BeamIOError
from tests.oracle import assert_same_as_beam, run_beam, run_sparkbeam


def io_module(ns, name):
    return importlib.import_module(f"{ns.beam.__name__}.io.{name}")


@pytest.fixture
def files(tmp_path):
    for name, data in {
        "a.txt": b"alpha\nbeta\n",
        "b.txt": b"gamma\r\ndelta",
        "c.csv": b"h1,h2\n1,2\n3,4\n",
        "logs/d.txt": b"deep\n",
        "e.txt.gz": gzip.compress(b"zipped\nlines\n"),
    }.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return tmp_path


def test_match_files_as_beam(spark, files):
    def build(ns, p):
        return p | io_module(ns, "fileio").MatchFiles(str(files / "*")) | ns.beam.Map(lambda m: (m.path, m.size_in_bytes))

    assert_same_as_beam(build)


def test_match_all_with_empty_matches_allowed_as_beam(spark, files):
    patterns = [str(files / "*.txt"), str(files / "**.txt"), str(files / "nothing/*"), str(files / "a.txt")]

    def build(ns, p):
        return p | ns.beam.Create(patterns) | io_module(ns, "fileio").MatchAll() | ns.beam.Map(lambda m: m.path)

    assert_same_as_beam(build)


def test_an_empty_match_fails_where_beam_fails(files):
    p = beam.Pipeline()
    beam.capture(p | fileio.MatchFiles(str(files / "nothing.txt")))
    with pytest.raises(BeamIOError, match="Empty match for pattern"):
        _run_in_memory(p)
    p = beam.Pipeline()
    out = beam.capture(p | fileio.MatchFiles(str(files / "nothing/*")))
    assert list(_run_in_memory(p).emissions(out)) == []  # a wildcard may match nothing (ALLOW_IF_WILDCARD)
    with pytest.raises(ValueError, match="empty_match_treatment"):
        fileio.MatchAll(empty_match_treatment="SOMETIMES")


def _run_in_memory(p):
    from sparkbeam.runners.core.loop.memory import run_in_memory

    return run_in_memory(p)


def test_read_matches_as_beam(spark, files):
    def build(ns, p):
        fio = io_module(ns, "fileio")
        return (
            p
            | fio.MatchFiles(str(files / "*"))
            | fio.ReadMatches()
            | ns.beam.Map(lambda f: (os.path.basename(f.metadata.path), f.read_utf8(), f.read()[:3], f.open().readline()))
        )

    assert_same_as_beam(build)


def test_read_matches_skips_directories_or_refuses_them(files):
    p = beam.Pipeline()
    out = beam.capture(p | beam.Create([str(files / "logs"), str(files / "a.txt")]) | fileio.ReadMatches() | beam.Map(lambda f: f.metadata.path))
    assert [e.value for e in _run_in_memory(p).emissions(out)] == [str(files / "a.txt")]
    p = beam.Pipeline()
    beam.capture(p | beam.Create([str(files / "logs") + "/"]) | fileio.ReadMatches(skip_directories=False))
    with pytest.raises(BeamIOError, match="Directories are not allowed"):
        _run_in_memory(p)


def test_match_continuously_says_it_is_not_supported():
    with pytest.raises(NotImplementedError, match="MatchContinuously is not supported"):
        fileio.MatchContinuously("x/*")


# -- ReadAllFromText --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{}, {"with_filename": True}, {"skip_header_lines": 1}, {"delimiter": b"a"}, {"strip_trailing_newlines": False}],
)
def test_read_all_from_text_as_beam(spark, files, options):
    patterns = [str(files / "*.txt"), str(files / "e.txt.gz"), str(files / "logs/*"), str(files / "none/*.txt")]

    def build(ns, p):
        return p | ns.beam.Create(patterns) | ns.beam.io.ReadAllFromText(**options)

    assert_same_as_beam(build)


def test_read_all_from_text_takes_matches_too(spark, files):
    def build(ns, p):
        return p | io_module(ns, "fileio").MatchFiles(str(files / "*.txt")) | ns.beam.io.ReadAllFromText(with_filename=True)

    assert_same_as_beam(build)


def test_read_from_text_with_filename_as_beam(spark, files):
    assert_same_as_beam(lambda ns, p: p | ns.beam.io.ReadFromTextWithFilename(str(files / "*.csv"), skip_header_lines=1))


def test_read_all_from_text_refuses_bad_settings():
    with pytest.raises(ValueError, match="ReadAllFromText: delimiter must not self-overlap"):
        beam.io.ReadAllFromText(delimiter=b"aa")
    with pytest.raises(ValueError, match="ReadAllFromText: unknown compression"):
        beam.io.ReadAllFromText(compression_type="snappy")
    with pytest.raises(TypeError, match="ReadAllFromText: coder must be a coder instance"):
        beam.io.ReadAllFromText(coder=beam.coders.StrUtf8Coder)
    with pytest.raises(TypeError, match="unexpected keyword"):
        beam.io.ReadAllFromText(validation=True)


# -- WriteToFiles -----------------------------------------------------------------------------


def _lines_under(folder):
    """{final file name: sorted lines}, hidden (temporary) folders left out."""
    found = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not name.startswith(".") and os.path.isfile(path):
            with open(path) as handle:
                found[name] = sorted(handle.read().splitlines())
    return found


def _side(ns):
    return "beam" if ns.beam.__name__ == "apache_beam" else "ours"


def test_write_to_files_with_fixed_shards_per_destination_as_beam(spark, tmp_path):
    words = [f"w{i}" for i in range(40)]

    def build(ns, p):
        fio = io_module(ns, "fileio")
        return (
            p
            | ns.beam.Create(words)
            | fio.WriteToFiles(
                str(tmp_path / _side(ns)),
                destination=lambda word: "even" if int(word[1:]) % 2 == 0 else "odd",
                file_naming=fio.destination_prefix_naming(".txt"),
                shards=3,
                max_writers_per_bundle=0,  # every record through the sharded path: exactly 3 files each
            )
            | ns.beam.Map(lambda result: (result.file_name, result.shard_index, result.total_shards, result.destination))
        )

    assert_same_as_beam(build)
    ours, theirs = _lines_under(tmp_path / "ours"), _lines_under(tmp_path / "beam")
    assert sorted(ours) == sorted(theirs) == [f"{d}-{s:05d}-of-00003.txt" for d in ("even", "odd") for s in range(3)]
    assert sorted(line for lines in ours.values() for line in lines) == sorted(words)
    assert os.listdir(tmp_path / "ours") == [name for name in os.listdir(tmp_path / "ours") if not name.startswith(".")]


def test_write_to_files_per_bundle_writes_what_beam_writes(spark, tmp_path):
    words = [f"w{i}" for i in range(25)]

    def build(ns, p):
        fio = io_module(ns, "fileio")
        return (
            p
            | ns.beam.Create(words)
            | fio.WriteToFiles(str(tmp_path / _side(ns)), sink=fio.TextSink)
            | ns.beam.Map(lambda result: result.file_name.rsplit("-of-", 1)[0].rsplit("-", 1)[0])
        )

    # One file per bundle: how many differs between runners, not what they hold or how they are named.
    assert set(v for v, *_ in run_beam(build)) == set(v for v, *_ in run_sparkbeam(build)) == {"output"}
    for side in ("beam", "ours"):
        written = _lines_under(tmp_path / side)
        assert sorted(line for lines in written.values() for line in lines) == sorted(words)
        total = len(written)
        assert sorted(written) == [f"output-{i:05d}-of-{total:05d}" for i in range(total)]


def test_write_to_files_in_a_stream_names_files_by_window_as_beam(tmp_path):
    def build(ns, p):
        fio = io_module(ns, "fileio")
        stream = ns.TestStream()
        for start in (0, 10, 20):
            stream = stream.add_elements([ns.TimestampedValue(f"e{start + i}", start + i) for i in range(3)])
            stream = stream.advance_watermark_to(start + 10)
        stream = stream.advance_watermark_to_infinity()
        return (
            p
            | stream
            | ns.beam.WindowInto(ns.window.FixedWindows(10))
            | fio.WriteToFiles(str(tmp_path / _side(ns)), shards=1, max_writers_per_bundle=0)
            | ns.beam.Map(lambda result: result.file_name)
        )

    assert_same_as_beam(build, streaming=True)
    ours, theirs = _lines_under(tmp_path / "ours"), _lines_under(tmp_path / "beam")
    assert ours == theirs
    assert sorted(ours)[0] == "output-1970-01-01T00:00:00-1970-01-01T00:00:10-00000-of-00001"


def test_write_to_files_refuses_what_it_cannot_honour():
    with pytest.raises(NotImplementedError, match="output_fn="):
        fileio.WriteToFiles("out", output_fn=lambda x: x)
    with pytest.raises(ValueError, match="shards must be a positive integer"):
        fileio.WriteToFiles("out", shards=0)
    with pytest.raises(ValueError, match="'nosuchfs' scheme"):
        fileio.WriteToFiles("nosuchfs://nn/out")
    with pytest.raises(TypeError, match="sink must be"):
        fileio.WriteToFiles("out", sink=3)
