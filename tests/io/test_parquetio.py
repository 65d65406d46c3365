"""Parquet: oracle pairs with Beam's own parquetio (which runs locally), shard names, files
compared with Beam's, bad files, and the optional pyarrow dependency."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparkbeam as beam
from sparkbeam.io import BadRecord, BadRecordError
from tests.io.conftest import listing
from tests.oracle import assert_same_as_beam, run_beam

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("name", pa.string()), ("age", pa.int64()), ("tags", pa.list_(pa.string())), ("score", pa.float64())])
RECORDS = [
    {"name": "ann", "age": 31, "tags": ["a", "b"], "score": 1.5},
    {"name": "bob", "age": 42, "tags": [], "score": None},
    {"name": "cy", "age": 7, "tags": None, "score": -2.25},
]


def beam_write(records, prefix, schema=SCHEMA, **options):
    """Write with Beam's own WriteToParquet on its local runner; return the files."""
    import apache_beam

    with apache_beam.Pipeline(runner="FnApiRunner") as p:
        _ = p | apache_beam.Create(records) | apache_beam.io.WriteToParquet(prefix, schema, **options)
    directory = os.path.dirname(prefix)
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if not f.startswith("."))


def test_reads_what_beam_wrote_as_beam_does(tmp_path, spark_session_kind):
    beam_write(RECORDS, str(tmp_path / "beam" / "people"), num_shards=2, file_name_suffix=".parquet")
    pattern = str(tmp_path / "beam" / "*.parquet")

    def build(ns, p):
        io = ns.beam.io
        reads = [
            p | "Dicts" >> io.ReadFromParquet(pattern) | "TagDicts" >> ns.beam.Map(lambda r: ("dicts", r)),
            p | "Columns" >> io.ReadFromParquet(pattern, columns=["name", "tags"]) | "TagColumns" >> ns.beam.Map(lambda r: ("columns", r)),
            p | "Rows" >> io.ReadFromParquet(pattern, as_rows=True) | "TagRows" >> ns.beam.Map(lambda r: ("rows", r, r._fields)),
        ]
        return reads | ns.beam.Flatten()

    assert len(assert_same_as_beam(build, **spark_session_kind)) == 9


def test_beam_reads_what_we_wrote(tmp_path, runner):
    prefix = str(tmp_path / "ours" / "people")
    written = runner(lambda p: p | beam.Create(RECORDS) | beam.io.WriteToParquet(prefix, SCHEMA, num_shards=3, file_name_suffix=".parquet"))
    names = [f"people-{i:05d}-of-00003.parquet" for i in range(3)]
    assert sorted(os.path.basename(f) for f in written) == names
    assert listing(tmp_path / "ours") == names  # every shard, no temporary directory left

    def as_tuple(record):
        return tuple(tuple(v) if isinstance(v, list) else v for v in record.values())

    # Beam's own read of our files gives back what we wrote.
    beam_read = run_beam(lambda ns, p: p | ns.beam.io.ReadFromParquet(prefix + "*") | ns.beam.Map(as_tuple))
    assert {value for value, *_ in beam_read} == {as_tuple(r) for r in RECORDS}


def test_files_match_beams_file_for_file(tmp_path, runner):
    # One record per file: the row order within a shard cannot differ, so the bytes must not.
    record = [RECORDS[0]]
    (theirs,) = beam_write(record, str(tmp_path / "beam" / "one"), codec="snappy")
    (ours,) = runner(lambda p: p | beam.Create(record) | beam.io.WriteToParquet(str(tmp_path / "ours" / "one"), SCHEMA, codec="snappy"))
    assert os.path.basename(ours) == os.path.basename(theirs) == "one-00000-of-00001"
    with open(ours, "rb") as mine, open(theirs, "rb") as beams:
        assert mine.read() == beams.read()
    # Several records: the same schema, row groups and rows (order aside).
    theirs_many = beam_write(RECORDS, str(tmp_path / "beam_many" / "many"), num_shards=1)
    ours_many = runner(lambda p: p | beam.Create(RECORDS) | beam.io.WriteToParquet(str(tmp_path / "ours_many" / "many"), SCHEMA, num_shards=1))
    a, b = pq.ParquetFile(theirs_many[0]), pq.ParquetFile(ours_many[0])
    assert a.schema_arrow == b.schema_arrow and a.metadata.num_row_groups == b.metadata.num_row_groups
    assert sorted(a.read().to_pylist(), key=str) == sorted(b.read().to_pylist(), key=str)


def test_empty_input_writes_one_empty_shard_like_beam(tmp_path, runner):
    written = runner(lambda p: p | beam.Create([]) | beam.io.WriteToParquet(str(tmp_path / "empty"), SCHEMA))
    assert [os.path.basename(f) for f in written] == ["empty-00000-of-00001"]
    table = pq.read_table(written[0])
    assert table.num_rows == 0 and table.schema == SCHEMA


def test_batched_reads_and_writes_and_reading_a_pcollection_of_globs(tmp_path, runner):
    table = pa.Table.from_pylist(RECORDS, schema=SCHEMA)
    prefix = str(tmp_path / "tables" / "t")

    def build(p):
        written = p | beam.Create([table]) | beam.io.WriteToParquetBatched(prefix, SCHEMA, file_name_suffix=".parquet")
        return written

    (path,) = runner(build)

    def read(p):
        tables = p | "Batched" >> beam.io.ReadFromParquetBatched(path)
        named = p | "Patterns" >> beam.Create([str(tmp_path / "tables" / "*.parquet"), str(tmp_path / "none-*.parquet")]) | beam.io.ReadAllFromParquet(with_filename=True, columns=["name"])
        return tables, named

    tables, named = runner(read)
    assert [t.to_pylist() for t in tables] == [RECORDS]
    assert sorted(named, key=str) == [(path, {"name": r["name"]}) for r in sorted(RECORDS, key=lambda r: r["name"])]


def test_a_record_that_does_not_fit_the_schema_fails_and_writes_nothing(tmp_path, runner):
    bad = [*RECORDS, {"name": "dee", "age": "forty", "tags": [], "score": 0.0}]
    with pytest.raises(TypeError, match=r"field 'age' of .*'forty'.* does not fit the schema's type int64") as failure:
        runner(lambda p: p | beam.Create(bad) | "Save" >> beam.io.WriteToParquet(str(tmp_path / "out" / "people"), SCHEMA))
    assert "'Save'" in str(failure.value)
    assert not [f for f in listing(tmp_path / "out") if f.startswith("people")]


def test_an_unreadable_file_fails_or_goes_to_the_dead_letter_output(tmp_path, runner):
    pq.write_table(pa.Table.from_pylist(RECORDS, schema=SCHEMA), tmp_path / "a.parquet")
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"PAR1 this is not parquet")
    pattern = str(tmp_path / "*.parquet")
    with pytest.raises(BadRecordError) as failure:
        runner(lambda p: p | "Load" >> beam.io.ReadFromParquet(pattern))
    assert "'Load'" in str(failure.value) and str(broken) in str(failure.value)
    good, bad = runner(lambda p: tuple(p | beam.io.ReadFromParquet(pattern).with_exception_handling()))
    assert sorted(r["name"] for r in good) == ["ann", "bob", "cy"]
    assert [(b.file, type(b)) for b in bad] == [(str(broken), BadRecord)]


def test_without_pyarrow_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'sparkbeam\[parquet\]'"):
        beam.io.ReadFromParquet("x.parquet")
    with pytest.raises(ImportError, match="WriteToParquet needs pyarrow"):
        beam.io.WriteToParquet("out", SCHEMA)
