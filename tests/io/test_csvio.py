"""ReadFromCsv and WriteToCsv: Beam's element shapes, round trips, bad records, compression.

The expected rows and bytes were recorded from Beam 2.77 with pandas 2.2.3 (Beam's CSV
transforms run on its dataframe API, which does not import with the pandas 3 installed here).
"""

from __future__ import annotations

import bz2
import os
import typing

import pytest

import sparkbeam as beam
from sparkbeam.io import BadRecordError
from tests.io.conftest import listing
from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark

BEAM_CSV = 'i,im,f,b,bm,s,mixed\n1,1,1.5,True,true,x,1\n2,,2,False,,"y,z",a\n'
BEAM_ROWS = {(1, 1.0, 1.5, True, "True", "x", "1"), (2, None, 2.0, False, None, "y,z", "a")}
BEAM_TYPES = {
    ("int", "float", "float", "bool", "str", "str", "str"),
    ("int", "NoneType", "float", "bool", "NoneType", "str", "str"),
}


def write(path, text, opener=open):
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(path, "wt", encoding="utf-8", newline="") as handle:
        handle.write(text)
    return str(path)


def read_text(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def test_rows_have_beams_fields_and_types(tmp_path, runner):
    path = write(tmp_path / "in.csv", BEAM_CSV)
    rows = runner(lambda p: p | beam.io.ReadFromCsv(path))
    assert {tuple(r) for r in rows} == BEAM_ROWS
    assert {tuple(type(v).__name__ for v in r) for r in rows} == BEAM_TYPES
    assert rows[0]._fields == ("i", "im", "f", "b", "bm", "s", "mixed")


class Pair(typing.NamedTuple):
    a: int | None
    s: str | None


def test_written_bytes_match_beams(tmp_path, runner):
    rows = [
        {"a": 1, "f": 0.1234567890123, "s": 'x/y é "q"', "b": True, "l": [1, 2], "big": 1e20},
        {"a": 2, "f": 2.0, "s": "a,b\nc", "b": False, "l": [], "big": 1.5},
    ]
    header, first, second = "a,f,s,b,l,big\n", '1,0.1234567890123,"x/y é ""q""",True,"[1, 2]",1e+20\n', '2,2.0,"a,b\nc",False,[],1.5\n'

    def build(p):
        dicts = (p | "Dicts" >> beam.Create(rows) | "WriteDicts" >> beam.io.WriteToCsv(str(tmp_path / "dicts"), num_shards=1))
        pairs = (p | "Pairs" >> beam.Create([Pair(1, None), Pair(None, "x")]) | "WritePairs" >> beam.io.WriteToCsv(str(tmp_path / "pairs"), num_shards=1))
        return dicts["files_written"], pairs["files_written"]

    (dicts,), (pairs,) = runner(build)
    assert read_text(dicts) in (header + first + second, header + second + first)
    assert read_text(pairs) in ("a,s\n1,\n,x\n", "a,s\n,x\n1,\n")  # Beam wrote 'a,s\n1,\n,x\n'


def test_round_trip_with_quoted_newlines_compression_and_file_names(tmp_path, runner):
    records = [{"id": i, "text": f"line one\nline {i}, quoted \"{i}\"", "value": i * 1.5} for i in range(30)]
    prefix = str(tmp_path / "out" / "table")
    written = runner(lambda p: (p | beam.Create(records) | beam.io.WriteToCsv(prefix, num_shards=2, file_name_suffix=".csv.bz2"))["files_written"])
    assert listing(tmp_path / "out") == ["table-00000-of-00002.csv.bz2", "table-00001-of-00002.csv.bz2"]
    with bz2.open(written[0], "rt") as handle:
        assert handle.readline() == "id,text,value\n"
    back = runner(lambda p: p | beam.io.ReadFromCsv(prefix + "*", filename_column="source"))
    assert sorted((r.id, r.text, r.value) for r in back) == [(r["id"], r["text"], r["value"]) for r in records]
    assert {os.path.basename(r.source) for r in back} == {os.path.basename(f) for f in written}


def test_later_files_may_reorder_columns(tmp_path, runner):
    write(tmp_path / "a.csv", "x,y\n1,p\n")
    write(tmp_path / "b.csv", "y,x\nq,2\n")
    rows = runner(lambda p: p | beam.io.ReadFromCsv(str(tmp_path / "*.csv"), usecols=["x", "y"], dtype={"y": str}))
    assert sorted(tuple(r) for r in rows) == [(1, "p"), (2, "q")]


def test_a_bad_line_fails_the_read_naming_transform_file_and_line(tmp_path, runner):
    path = write(tmp_path / "in.csv", "a,b\n1,2\n3,4,5\n6,7\n")
    with pytest.raises(BadRecordError) as failure:
        runner(lambda p: p | "ReadTable" >> beam.io.ReadFromCsv(path))
    message = str(failure.value)
    assert "'ReadTable'" in message and f"line 3 of {path}" in message
    assert "expected 2 fields" in message and "'3,4,5'" in message


def test_bad_records_go_to_the_dead_letter_output(tmp_path, runner):
    write(tmp_path / "1.csv", "n,name\n1,ann\n")
    second = write(tmp_path / "2.csv", 'n,name\n2,bob\nthree,carl\n4,"dan"x\n5\n\n6,"multi\nline"\n7,eve,extra\n')

    def build(p):
        return tuple(p | beam.io.ReadFromCsv(str(tmp_path / "*.csv")).with_exception_handling("rows", "errors"))

    good, bad = runner(build)
    assert sorted(tuple(r) for r in good) == [(1, "ann"), (2, "bob"), (6, "multi\nline")]
    assert sorted((b.file, b.line) for b in bad) == [(second, 3), (second, 4), (second, 5), (second, 9)]
    errors = {b.line: b.error for b in bad}
    assert "is not a int" in errors[3] and "malformed CSV" in errors[4] and "saw 1" in errors[5]


def test_on_bad_lines_skip_drops_them_on_request(tmp_path, runner):
    path = write(tmp_path / "in.csv", "a,b\n1,2\n3,4,5\n6,7\n")
    rows = runner(lambda p: p | beam.io.ReadFromCsv(path, on_bad_lines="skip"))
    assert sorted(tuple(r) for r in rows) == [(1, 2), (6, 7)]


def test_unsupported_options_say_so():
    with pytest.raises(NotImplementedError, match="thousands="):
        beam.io.ReadFromCsv("x.csv", thousands=",")
    with pytest.raises(NotImplementedError, match="callables are not supported"):
        beam.io.ReadFromCsv("x.csv", on_bad_lines=print)
    with pytest.raises(NotImplementedError, match="index_label="):
        beam.io.WriteToCsv("out", index_label="i")
    with pytest.raises(ValueError, match="needs names="):
        beam.io.ReadFromCsv("x.csv", header=None)


def test_same_rows_as_beams_read_from_csv(tmp_path, spark_session_kind):
    path = write(tmp_path / "in.csv", BEAM_CSV)
    assert_same_as_beam(lambda ns, p: p | ns.beam.io.ReadFromCsv(path), **spark_session_kind)
