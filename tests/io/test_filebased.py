"""What every file transform shares: atomic writes, shard names, compression, composites of
primitives only, and rows that travel between processes."""

from __future__ import annotations

import os
import pickle
import time

import pytest

import sparkbeam as beam
from sparkbeam.core import Create, Flatten, GroupByKey, Impulse, ParDo, WindowInto
from sparkbeam.io.filebased import BadRecord, schema_row_type
from sparkbeam.io.filesystem import CompressionTypes, compression_name, iter_lines
from sparkbeam.io.filesystems import open_compressed
from sparkbeam.io.filewrites import check_shard_name_template, shard_file_name
from tests.io.conftest import listing


class Boom(Exception):
    pass


def explode_at(value, at):
    if value == at:
        time.sleep(1)  # let the other partition finish writing its shard first
        raise Boom(f"failing on {value}")
    return {"n": value}


@pytest.mark.spark
@pytest.mark.parametrize("num_shards", [0, 2])
def test_a_pipeline_that_fails_midway_leaves_no_final_files(tmp_path, runner, num_shards):
    prefix = str(tmp_path / "out" / "numbers")

    def build(p):
        numbers = p | beam.Create(range(300)) | beam.Map(explode_at, 250)
        return (numbers | beam.io.WriteToJson(prefix, num_shards=num_shards))["files_written"]

    with pytest.raises(Boom):
        runner(build)
    leftovers = listing(tmp_path / "out")
    assert not [f for f in leftovers if f.startswith("numbers")]
    # Shards written before the failure stay hidden in the temporary directory; with
    # num_shards the failure comes before the grouping that precedes every write.
    assert all(f.startswith(".sparkbeam-temp-") for f in leftovers)
    assert bool(leftovers) == (num_shards == 0)


def test_every_file_transform_is_a_composite_of_primitives(tmp_path):
    import pyarrow

    (tmp_path / "in.csv").write_text("a\n1\n")
    (tmp_path / "in.jsonl").write_text('{"a": 1}\n')
    p = beam.Pipeline()
    rows = p | beam.io.ReadFromCsv(str(tmp_path / "in.csv"))
    _ = p | beam.io.ReadFromJson(str(tmp_path / "in.jsonl")).with_exception_handling()
    _ = p | beam.io.ReadFromParquet(str(tmp_path / "*.parquet"), validate=False)
    _ = p | beam.Create([str(tmp_path)]) | beam.io.ReadAllFromParquet()
    _ = rows | beam.io.WriteToCsv(str(tmp_path / "c"))
    _ = rows | beam.io.WriteToJson(str(tmp_path / "j"), num_shards=2)
    _ = rows | beam.io.WriteToParquet(str(tmp_path / "p"), pyarrow.schema([("a", pyarrow.int64())]))
    primitives = p.primitives()
    assert primitives and all(isinstance(n.transform, (Create, Impulse, ParDo, GroupByKey, Flatten, WindowInto)) for n in primitives)
    labels = {n.full_label for n in primitives}
    assert "ReadFromCsv/ReadFiles/Spread/Group" in labels
    assert "WriteToJson/WriteFiles/GatherWritten" in labels


def test_shard_names_follow_beams_template():
    assert shard_file_name("/o/p", "-SSSSS-of-NNNNN", ".csv", 3, 12) == "/o/p-00003-of-00012.csv"
    assert shard_file_name("/o/p", "_S-N", "", 3, 12) == "/o/p_3-12"
    assert shard_file_name("/o/p", "", ".json", 0, 1) == "/o/p.json"
    with pytest.raises(ValueError, match="needs S"):
        check_shard_name_template("WriteToCsv", "-part")
    with pytest.raises(NotImplementedError, match="windowed shard names"):
        check_shard_name_template("WriteToCsv", "-W-SSSSS-of-NNNNN")


@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2", ".xz", ".deflate", ".zst"])
def test_compression_by_extension_round_trips(tmp_path, suffix):
    path = str(tmp_path / f"lines{suffix}")
    with open_compressed(path, "wb", CompressionTypes.AUTO) as handle:
        handle.write(b"one\r\ntwo\n\nthree")
    with open_compressed(path, "rb", compression_name("t", "infer")) as handle:
        assert list(iter_lines(handle, chunk_size=3)) == [b"one", b"two", b"", b"three"]
    with pytest.raises(ValueError, match="unknown compression"):
        compression_name("ReadFromCsv", "rar")


def test_rows_and_bad_records_pickle_by_value():
    row_type = schema_row_type(("name", "first name", "class"))
    row = row_type("ann", "A", 3)
    assert row._fields == ("name", "_1", "_2")  # not identifiers: renamed by position
    copy = pickle.loads(pickle.dumps(row))
    assert copy == row == ("ann", "A", 3) and type(copy) is row_type
    bad = BadRecord(os.path.join("d", "f.csv"), 2, "x" * 300, "broken")
    assert pickle.loads(pickle.dumps(bad)) == bad
    assert bad.describe().startswith(f"line 2 of {bad.file}: broken; the record: 'xxx") and "..." in bad.describe()
