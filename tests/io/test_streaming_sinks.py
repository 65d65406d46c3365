"""File sinks in streaming runs: one committed directory per step with output, written
exactly once (a step written again replaces its files), nothing for empty steps.

One streaming pipeline (a TestStream through FixedWindows and CombinePerKey) writes text,
JSON, CSV and Parquet at once; what lands in each step's directory must equal what the
captured PCollection emitted in that step.
"""

from __future__ import annotations

import collections
import csv
import gzip
import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparkbeam as beam
from sparkbeam import window
from sparkbeam.io import fileio
from sparkbeam.io.stepfiles import WriteFilesPerStep
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.lowering.errors import TransformError, UnsupportedError
from sparkbeam.runners.core.lowering.ops import WriteTextOp, lower
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.utils.windowed_value import WindowedValue
from tests.io.conftest import listing

SCHEMA = pa.schema([("user", pa.string()), ("score", pa.int64())])
STEPS_WITH_OUTPUT = {1, 3, 5}  # the steps whose watermark closes a window


def scores() -> TestStream:
    tv = beam.TimestampedValue
    return (
        TestStream()
        .add_elements([tv(("ann", 1), 1), tv(("bob", 2), 2), tv(("ann", 3), 5)])  # step 0
        .advance_watermark_to(10)  # step 1: fires [0, 10)
        .add_elements([tv(("ann", 4), 12), tv(("bob", 5), 15)])  # step 2
        .advance_watermark_to(20)  # step 3: fires [10, 20)
        .add_elements([tv(("cid", 6), 25)])  # step 4
        .advance_watermark_to_infinity()  # step 5: fires [20, 30)
    )


def write_scores(root: str, **options) -> tuple[dict[int, list], dict[int, list]]:
    """Runs the pipeline into ``root`` (with ``options`` besides ``streaming``); returns
    what the lines and the rows emitted, per step. The lines also go to ``WriteToFiles``
    (``root/files``: a file per user and window)."""
    p = beam.Pipeline(options=PipelineOptions(streaming=True, **options))
    totals = p | scores() | beam.WindowInto(window.FixedWindows(10)) | beam.CombinePerKey(sum)
    lines = beam.capture(totals | "Lines" >> beam.Map(lambda kv: f"{kv[0]}:{kv[1]}"))
    rows = beam.capture(totals | "Rows" >> beam.Map(lambda kv: {"user": kv[0], "score": kv[1]}))
    _ = lines | "Text" >> beam.io.WriteToText(
        f"{root}/text/scores", file_name_suffix=".txt.gz", num_shards=2, header="user:score", footer="end"
    )
    _ = rows | "Json" >> beam.io.WriteToJson(f"{root}/json/scores", file_name_suffix=".jsonl")
    _ = rows | "Csv" >> beam.io.WriteToCsv(f"{root}/csv/scores", num_shards=1, file_name_suffix=".csv")
    _ = rows | "Parquet" >> beam.io.WriteToParquet(f"{root}/parquet/scores", SCHEMA, file_name_suffix=".parquet")
    _ = lines | "Files" >> fileio.WriteToFiles(
        f"{root}/files",
        destination=lambda line: line.split(":")[0],
        # lambdas: a Connect server's Python workers cannot import the tests' modules
        file_naming=lambda window, pane, shard, shards, compression, user: f"{user}-{int(window.start)}-{shard}-of-{shards}",
    )
    result = p.run()
    by_step: tuple[dict[int, list], dict[int, list]] = (collections.defaultdict(list), collections.defaultdict(list))
    for emitted, pcoll in zip(by_step, (lines, rows)):
        for emission in result.emissions(pcoll):
            emitted[emission.step].append(emission.value)
    return by_step


def committed(folder: str) -> dict[int, list[str]]:
    """Each step directory under ``folder`` and its files; fails on anything else there."""
    steps: dict[int, list[str]] = collections.defaultdict(list)
    for path in listing(folder):
        step_dir, name = path.split(os.sep)
        assert step_dir.startswith("scores-step-"), f"left behind: {path}"
        steps[int(step_dir.removeprefix("scores-step-"))].append(name)
    return dict(steps)


def shard_names(count: int, suffix: str) -> list[str]:
    return [f"scores-{shard:05d}-of-{count:05d}{suffix}" for shard in range(count)]


def read_text(path: str) -> list[str]:
    with gzip.open(path, "rt") as handle:
        return handle.read().splitlines()


def read_json(path: str) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def read_csv(path: str) -> list[dict]:
    with open(path, newline="") as handle:
        return [{"user": row["user"], "score": int(row["score"])} for row in csv.DictReader(handle)]


def read_parquet(path: str) -> list[dict]:
    return pq.read_table(path).to_pylist()


READERS = {"json": read_json, "csv": read_csv, "parquet": read_parquet}


def records_in(root: str, sink: str, step: int) -> list:
    """Every record the sink committed for ``step``, sorted (text: without header and footer)."""
    folder = os.path.join(root, sink, f"scores-step-{step:08d}")
    if sink == "text":
        return sorted(line for name in os.listdir(folder) for line in read_text(os.path.join(folder, name))[1:-1])
    records = [record for name in os.listdir(folder) for record in READERS[sink](os.path.join(folder, name))]
    return sorted(records, key=lambda row: (row["user"], row["score"]))


def expected(emitted: list) -> list:
    return sorted(emitted, key=lambda row: (row["user"], row["score"]) if isinstance(row, dict) else row)


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("streaming-sinks"))
    return root, write_scores(root)


@pytest.mark.spark
def test_each_step_with_output_commits_one_text_directory_with_its_shards(written):
    root, (lines, _) = written
    steps = committed(f"{root}/text")
    assert set(steps) == set(lines) == STEPS_WITH_OUTPUT
    for step, names in steps.items():
        assert sorted(names) == shard_names(2, ".txt.gz")  # num_shards=2: both, even if one is empty
        for name in names:
            shard = read_text(os.path.join(root, "text", f"scores-step-{step:08d}", name))
            assert shard[0] == "user:score" and shard[-1] == "end"
        assert records_in(root, "text", step) == expected(lines[step])


@pytest.mark.spark
@pytest.mark.parametrize(("sink", "suffix", "num_shards"), [("json", ".jsonl", None), ("csv", ".csv", 1), ("parquet", ".parquet", None)])
def test_each_step_with_output_commits_one_directory_of_records(written, sink, suffix, num_shards):
    root, (_, rows) = written
    steps = committed(f"{root}/{sink}")
    assert set(steps) == set(rows) == STEPS_WITH_OUTPUT
    for step, names in steps.items():
        # num_shards=0 (None): one shard per partition that has records
        assert sorted(names) == shard_names(num_shards or len(names), suffix)
        assert records_in(root, sink, step) == expected(rows[step])


@pytest.mark.spark
def test_running_the_steps_again_replaces_their_files_without_duplicates(written):
    root, _ = written
    lines, rows = write_scores(root)
    for sink, emitted in (("text", lines), ("json", rows), ("csv", rows), ("parquet", rows)):
        assert set(committed(f"{root}/{sink}")) == STEPS_WITH_OUTPUT
        for step in STEPS_WITH_OUTPUT:
            assert records_in(root, sink, step) == expected(emitted[step])


@pytest.mark.spark
def test_on_spark_connect_each_step_commits_the_classic_sessions_directories(written, connect_server, tmp_path):
    """The same stream through Spark Connect: each sink's step directories (written by the
    server's tasks, committed by one task, ``runners/spark/connect/writes.py``) hold what
    the classic session's hold, under the same names where the shards are fixed."""
    root, (lines, rows) = written
    connect_root = str(tmp_path)
    assert write_scores(connect_root, spark_remote=connect_server.url) == (lines, rows)
    for sink, fixed in (("text", True), ("json", False), ("csv", True), ("parquet", False)):
        steps = committed(f"{connect_root}/{sink}")
        assert set(steps) == STEPS_WITH_OUTPUT, sink
        for step, names in steps.items():
            classic = committed(f"{root}/{sink}")[step]
            assert sorted(names) == sorted(classic) if fixed else sorted(names) == shard_names(len(names), os.path.splitext(classic[0])[1])
            assert records_in(connect_root, sink, step) == records_in(root, sink, step), (sink, step)
    # WriteToFiles, a composite of ParDos and groupings: a file per user and window
    assert files_by_name(f"{connect_root}/files") == files_by_name(f"{root}/files") != {}


def files_by_name(folder: str) -> dict[str, list[str]]:
    """Each file under ``folder`` (hidden ones too) and its lines, sorted."""
    found = {}
    for name in listing(folder):
        with open(os.path.join(folder, name)) as handle:
            found[name] = sorted(handle.read().splitlines())
    return found


def text_op(prefix: str, **options) -> WriteTextOp:
    return WriteTextOp("Scores", "test_streaming_sinks.py:1", (0,), (), sink=beam.io.WriteToText(prefix, **options))


def elements(spark, values: list, partitions: int):
    window_ = (window.GlobalWindow(),)
    return spark.sparkContext.parallelize([WindowedValue(v, 0, window_) for v in values], partitions)


@pytest.mark.spark
def test_writing_a_step_again_leaves_only_the_second_content(spark, tmp_path):
    from sparkbeam.runners.spark.sinks import write_step

    op = text_op(str(tmp_path / "scores"), file_name_suffix=".txt")
    step_dir = tmp_path / "scores-step-00000007"
    first = write_step(spark.sparkContext, op, elements(spark, ["a", "b", "c"], 2), False, 7)
    assert sorted(os.path.basename(f) for f in first) == shard_names(2, ".txt")
    (tmp_path / ".sparkbeam-replaced-scores-step-00000007").mkdir()  # as a crash mid-commit leaves it

    second = write_step(spark.sparkContext, op, elements(spark, ["z"], 2), False, 7)
    assert [os.path.basename(f) for f in second] == shard_names(1, ".txt")  # only the partition with records
    assert listing(tmp_path) == [os.path.join("scores-step-00000007", "scores-00000-of-00001.txt")]
    assert (step_dir / "scores-00000-of-00001.txt").read_text() == "z\n"

    # An attempt with no elements writes nothing, so the step ends with nothing either.
    assert write_step(spark.sparkContext, op, elements(spark, [], 2), False, 7) == []
    assert listing(tmp_path) == []
    assert write_step(spark.sparkContext, op, spark.sparkContext.emptyRDD(), True, 8) == []
    assert os.listdir(tmp_path) == []


@pytest.mark.spark
def test_a_failing_write_names_the_transform_and_commits_nothing(spark, tmp_path):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    stream = p | TestStream().add_elements([{"user": "ann"}, "not a record"])
    _ = stream | "Records" >> beam.io.WriteToJson(str(tmp_path / "scores"))
    with pytest.raises(TypeError, match=r"'Records'.*cannot write 'not a record'"):
        p.run()
    assert not [path for path in listing(tmp_path) if path.startswith("scores")]


@pytest.mark.spark
def test_batch_writes_keep_the_flat_layout(spark, tmp_path):
    p = beam.Pipeline()
    lines = p | beam.Create(["a", "b", "c"])
    _ = lines | beam.io.WriteToText(str(tmp_path / "text" / "scores"), num_shards=2)
    _ = lines | beam.Map(lambda line: {"line": line}) | beam.io.WriteToJson(str(tmp_path / "json" / "scores"), num_shards=1)
    p.run()
    assert listing(tmp_path / "text") == shard_names(2, "")
    assert listing(tmp_path / "json") == shard_names(1, "")


@pytest.mark.spark
def test_an_empty_shard_name_template_writes_every_element_to_its_one_file(spark, tmp_path):
    """'' names one file: one shard, as Beam's sink sets it, whatever the input's partitions
    (two shards both committed to the one name lost the first's lines)."""
    assert beam.io.WriteToText("out", shard_name_template="", num_shards=3).num_shards == 1
    p = beam.Pipeline()
    _ = p | beam.Create([f"line {n}" for n in range(10)]) | beam.io.WriteToText(str(tmp_path / "all.txt"), shard_name_template="")
    p.run()
    assert listing(tmp_path) == ["all.txt"]
    assert sorted((tmp_path / "all.txt").read_text().splitlines()) == [f"line {n}" for n in range(10)]


@pytest.mark.spark
def test_a_gzip_shard_depends_on_its_lines_only(spark, tmp_path):
    """Its header names no file and no time (Beam's writer's, zlib's, names neither): not the
    staged name it is written under before its commit, so a write run again gives the same bytes."""

    def write(folder):
        p = beam.Pipeline()
        _ = p | beam.Create([f"line {n}" for n in range(10)]) | beam.io.WriteToText(str(tmp_path / folder / "out"), file_name_suffix=".gz", num_shards=1)
        p.run()
        (name,) = listing(tmp_path / folder)
        return (tmp_path / folder / name).read_bytes()

    first = write("first")
    assert first[3] == 0, "header flags: no file name, no comment"  # FNAME is bit 3
    assert first[4:8] == b"\0\0\0\0", "no modification time"
    assert sorted(gzip.decompress(first).decode().splitlines()) == [f"line {n}" for n in range(10)]
    time.sleep(1.1)  # a header with a time in seconds would differ now
    assert write("second") == first


def test_a_sink_on_an_unreachable_or_unknown_file_system_is_refused_before_running():
    # hdfs:// is Hadoop's: written through the driver, so its folder is looked up first
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    _ = p | TestStream().add_elements(["a"]) | "Scores" >> beam.io.WriteToText("hdfs://nn/out/scores")
    with pytest.raises(ValueError, match=r"'Scores' \(applied at .*test_streaming_sinks.py:\d+\): hdfs://nn/out cannot be used: its namenode nn cannot be reached"):
        p.run()
    # s3:// (not s3a://) is served by nothing sparkbeam's Spark runner has
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    _ = p | TestStream().add_elements([{"a": 1}]) | "Json" >> beam.io.WriteToJson("s3://b/scores")
    with pytest.raises(TransformError, match=r"'Json/.*' \(applied at .*\): file sinks on Spark write to .*s3a://.* not 's3://b/scores'"):
        p.run()


def test_unbounded_input_is_written_through_the_per_step_primitive(tmp_path):
    p = beam.Pipeline()
    stream = p | TestStream().add_elements([{"user": "ann"}])
    files = (stream | "Json" >> beam.io.WriteToJson(str(tmp_path / "scores")))["files_written"]
    (node,) = [n for n in p.primitives() if isinstance(n.transform, WriteFilesPerStep)]
    assert node.full_label == "Json/WriteFiles/WriteEachStep"
    assert node.transform.files.directory(3) == str(tmp_path / "scores-step-00000003")
    assert not files.is_bounded
    _ = files | "Count" >> beam.Map(len)
    with pytest.raises(UnsupportedError, match=r"'Count' .* reads the output of 'Json/WriteFiles/WriteEachStep'"):
        plan_stages(lower(p))
