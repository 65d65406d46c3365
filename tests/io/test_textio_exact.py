"""sparkbeam's ReadFromText gives exactly what apache_beam's gives, on small files with every
rule of Beam's reader in them (line ends of both kinds, lone carriage returns, a byte-order
mark, multi-byte characters, empty lines and files, headers, compressed files, globs). All
the reads run in one pipeline on each side, to keep the test cheap."""

from __future__ import annotations

import bz2
import gzip
import zlib

import attrs
import pytest

import sparkbeam as beam
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import ReadTextOp
from sparkbeam.runners.spark import textio
from tests.io.conftest import run

TRICKY = "\ufeffcaf\u00e9\r\n\r\n\u65e5\u672c\u8a9e\nlone\rcarriage\n\n\rstarts with a return\r\r\nno final newline\r".encode()

#: name -> (pattern relative to the folder, ReadFromText's options on both sides)
READS = {
    "plain": ("tricky.txt", {}),
    "ends kept": ("tricky.txt", {"strip_trailing_newlines": False}),
    "headers, one file all header": ("*.txt", {"skip_header_lines": 2}),
    "compressed by extension": ("tricky.txt.*", {"skip_header_lines": 1}),
    "gzip named": ("packed.data", {"compression_type": "gzip", "strip_trailing_newlines": False}),
    "glob with empty files": ("part-*", {}),
    "glob with headers": ("part-*", {"skip_header_lines": 1}),
    "nothing matches": ("absent-*", {"validate": False}),
}


def write_files(folder):
    (folder / "tricky.txt").write_bytes(TRICKY)
    (folder / "short.txt").write_bytes(b"h\r\nlast")
    (folder / "tricky.txt.gz").write_bytes(gzip.compress(TRICKY))
    (folder / "tricky.txt.bz2").write_bytes(bz2.compress(TRICKY))
    (folder / "tricky.txt.deflate").write_bytes(zlib.compress(TRICKY))
    (folder / "packed.data").write_bytes(gzip.compress(TRICKY))
    (folder / "part-0").write_bytes(b"")
    (folder / "part-1").write_bytes(b"\n")
    (folder / "part-2").write_bytes(b"head\nx\r\ny\r")
    (folder / "part-3").write_bytes(b"\r\n\r\n")


def beams_lines(path):
    """The lines apache_beam's ReadFromText reads, from its source (no pipeline: cheaper)."""
    import apache_beam as apache_beam

    source = apache_beam.io.ReadFromText(path)._source
    return list(source.read(source.get_range_tracker(None, None)))


_BEAM_READ: list = []


def _collect(pair):
    # Beam pickles the function by reference: this reaches the module's own list.
    from tests.io import test_textio_exact as module

    module._BEAM_READ.append(pair)


def read_all_with_beam(folder):
    """Every read of READS in one apache_beam pipeline: name -> its lines, sorted."""
    import apache_beam as apache_beam

    _BEAM_READ.clear()
    with apache_beam.Pipeline() as p:
        for name, (pattern, options) in READS.items():
            lines = p | f"Read {name}" >> apache_beam.io.ReadFromText(str(folder / pattern), **options)
            lines | f"Name {name}" >> apache_beam.Map(lambda line, name=name: (name, line)) | f"Collect {name}" >> apache_beam.Map(_collect)
    return {name: sorted((line for read, line in _BEAM_READ if read == name), key=repr) for name in READS}


@pytest.mark.spark
def test_every_read_gives_what_beams_read_from_text_gives(spark_session_kind, tmp_path):
    write_files(tmp_path)

    def build(p):
        # One PCollection of (read, line), so that one Spark job reads every file.
        reads = [
            p | name >> beam.io.ReadFromText(str(tmp_path / pattern), **options) | f"Name {name}" >> beam.Map(lambda line, name=name: (name, line))
            for name, (pattern, options) in READS.items()
        ]
        return reads | beam.Flatten()

    read = run(build, **spark_session_kind)
    ours = {name: sorted((line for of, line in read if of == name), key=repr) for name in READS}
    assert ours == read_all_with_beam(tmp_path)
    assert ours["plain"][0] == "" and "\ufeffcaf\u00e9" in ours["plain"] and "lone\rcarriage" in ours["plain"]


@pytest.mark.spark
def test_a_line_that_is_not_utf8_fails_as_beams_read_fails_naming_the_read_and_the_file(spark_session_kind, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nnot \xff utf-8\r\nfine again\n")
    with pytest.raises(UnicodeDecodeError) as beams:
        beams_lines(str(path))
    with pytest.raises(UnicodeDecodeError) as ours:
        run(lambda p: p | "Lines" >> beam.io.ReadFromText(str(path)), **spark_session_kind)
    assert str(ours.value) == str(beams.value)
    notes = " ".join(getattr(ours.value, "__notes__", []))
    assert "'Lines'" in notes and "bad.txt" in notes


@pytest.mark.spark
def test_the_default_read_cuts_a_file_into_ranges_and_hands_on_its_lines_as_values(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(textio, "_MIN_BUNDLE", 1)  # a small file in several tasks
    sc = spark.sparkContext
    path = tmp_path / "lines.txt"
    path.write_bytes(TRICKY * 50)
    op = ReadTextOp(label="Read", location="here", inputs=(), outputs=(), source=beam.io.ReadFromText(str(path)))
    rdd, values = textio.read_text(sc, op)
    # The values alone (the fused bodies take them so), read in several ranges of the one file.
    assert values is not None and values.getNumPartitions() == max(2, sc.defaultParallelism)
    assert values.collect() == [wv.value for wv in rdd.collect()]
    assert values.collect() == beams_lines(str(path))


@pytest.mark.spark
def test_files_on_a_cluster_file_system_are_read_by_sparks_splittable_reader(spark, tmp_path, monkeypatch):
    # The executors' Python cannot open hdfs:// files: plain lines go through Spark's text
    # reader (split over tasks, headers skipped per file); a compressed file or kept line
    # ends whole through binaryFiles, exact. Local paths stand in for the cluster's.
    sc = spark.sparkContext
    (tmp_path / "a.txt").write_bytes(b"head\none\r\ntwo\n")
    (tmp_path / "b.txt").write_bytes(b"head\nthree")
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"head\nfour\r\n"))
    real_match = textio.matched_files
    monkeypatch.setattr(textio, "matched_files", lambda sc, pattern: [attrs.evolve(f, local=False) for f in real_match(sc, pattern)])
    through_spark = []
    real_spark_lines = textio._spark_text_lines
    monkeypatch.setattr(textio, "_spark_text_lines", lambda *args: through_spark.append(args[1]) or real_spark_lines(*args))

    def lines(pattern, **options):
        op = ReadTextOp(label="Read", location="here", inputs=(), outputs=(), source=beam.io.ReadFromText(str(tmp_path / pattern), **options))
        rdd, _ = textio.read_text(sc, op)
        return sorted(wv.value for wv in rdd.collect())

    assert lines("*.txt", skip_header_lines=1) == ["one", "three", "two"]
    assert through_spark == [[str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]]
    assert lines("*.txt", strip_trailing_newlines=False) == ["head\n", "head\n", "one\r\n", "three", "two\n"]
    assert lines("*.gz", skip_header_lines=1) == ["four"]
    assert len(through_spark) == 1


def test_a_folder_given_as_the_pattern_fails_naming_the_read_rather_than_reading_nothing(tmp_path):
    (tmp_path / "inside.txt").write_text("a line\n")
    op = ReadTextOp(label="Lines", location="here", inputs=(), outputs=(), source=beam.io.ReadFromText(str(tmp_path), validate=False))
    with pytest.raises(TransformError, match=r"'Lines'.*is a directory.*/\*"):
        textio.read_text(None, op)
