"""Mistakes reported before Spark starts (a missing input, an output that cannot be
written), and a CombineFn returning None where an accumulator is due, named when it first
happens."""

from __future__ import annotations

import os

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.runners.spark import session
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window


class SparkStarted(Exception):
    """What the runner meets if validation let the pipeline through to Spark."""


@pytest.fixture
def no_spark(monkeypatch):
    """Running a pipeline raises SparkStarted where the runner would start Spark."""

    def refuse(*args, **kwargs):
        raise SparkStarted

    monkeypatch.setattr(session, "get_session", refuse)


def line_of(marker: str) -> int:
    with open(__file__) as handle:
        (number,) = [n for n, line in enumerate(handle, 1) if line.rstrip().endswith(f"# {marker}")]
    return number


def test_a_text_read_matching_no_file_fails_before_spark_starts(no_spark, tmp_path):
    p = beam.Pipeline()
    p | "ReadLog" >> beam.io.ReadFromText(str(tmp_path / "missing-*.log"))  # read-log
    with pytest.raises(FileNotFoundError) as error:
        p.run()
    assert str(error.value) == (
        f"'ReadLog' (applied at {__file__}:{line_of('read-log')}): no files match '{tmp_path}/missing-*.log'"
    )


def test_a_read_of_a_directory_says_how_to_read_its_files(no_spark, tmp_path):
    p = beam.Pipeline()
    p | "ReadScores" >> beam.io.ReadFromText(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=rf"'ReadScores' \(applied at .*\): no files match .*is a directory: read its files with '{tmp_path}/\*'"):
        p.run()


def test_a_json_file_gone_since_the_pipeline_was_built_fails_before_spark_starts(no_spark, tmp_path):
    # (CSV, JSON and Parquet reads look at their files when applied: this is what is left.)
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n')
    p = beam.Pipeline()
    p | "ReadRows" >> beam.io.ReadFromJson(str(path), lines=True)
    path.unlink()
    with pytest.raises(FileNotFoundError, match=rf"^'ReadRows' \(applied at .*\): no files match '{path}'$"):
        p.run()


def test_reads_that_allow_no_match_and_present_files_pass(no_spark, tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    p = beam.Pipeline()
    p | "Present" >> beam.io.ReadFromText(str(tmp_path / "*.txt"))
    p | "Optional" >> beam.io.ReadFromText(str(tmp_path / "none-*.txt"), validate=False)
    p | "Remote" >> beam.io.ReadFromText("hdfs://namenode/logs/*.txt")  # only Spark can look there
    with pytest.raises(SparkStarted):
        p.run()


def test_an_output_under_a_file_fails_before_spark_starts(no_spark, tmp_path):
    (tmp_path / "report").write_text("a file, not a folder")
    p = beam.Pipeline()
    numbers = p | beam.Create([1, 2])
    numbers | "WriteText" >> beam.io.WriteToText(str(tmp_path / "report" / "out" / "numbers"))  # write-text
    with pytest.raises(NotADirectoryError) as error:
        p.run()
    assert str(error.value).startswith(
        f"'WriteText' (applied at {__file__}:{line_of('write-text')}) cannot write '{tmp_path}/report/out/numbers' "
        f"({tmp_path}/report is a file, not a directory)"
    )
    numbers | "WriteJson" >> beam.io.WriteToJson(str(tmp_path / "report" / "rows"))
    p2 = beam.Pipeline()
    p2 | beam.Create([{"a": 1}]) | "WriteJson" >> beam.io.WriteToJson(str(tmp_path / "report" / "rows"))
    with pytest.raises(NotADirectoryError, match=r"^'WriteJson' \(applied at .*\) cannot write"):
        p2.run()


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="needs Linux's sysfs, where no one may create files")
def test_an_output_where_no_one_may_create_folders_fails_before_spark_starts(no_spark):
    p = beam.Pipeline()
    p | beam.Create([1]) | "Write" >> beam.io.WriteToText("/sys/sparkbeam-out/numbers")
    with pytest.raises(PermissionError, match=r"^'Write' \(applied at .*\) cannot write '/sys/sparkbeam-out/numbers' \(Operation not permitted: /sys/sparkbeam-out\)"):
        p.run()


def test_the_check_of_an_output_leaves_nothing_behind(no_spark, tmp_path):
    p = beam.Pipeline()
    p | beam.Create([1]) | "Write" >> beam.io.WriteToText(str(tmp_path / "new" / "deeper" / "out"))
    with pytest.raises(SparkStarted):
        p.run()
    assert os.listdir(tmp_path) == []  # the folders made for the probe are gone again


class ForgetsToReturn(beam.CombineFn):
    """add_input changes the list in place and returns nothing: the classic slip."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, value):
        accumulator.append(value)

    def merge_accumulators(self, accumulators):
        return [v for a in accumulators for v in a]

    def extract_output(self, accumulator):
        return sum(accumulator)


class MergeReturnsNothing(ForgetsToReturn):
    def add_input(self, accumulator, value):
        accumulator.append(value)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = accumulators[0]
        for other in accumulators[1:]:
            merged.extend(other)


NONE_FROM_ADD_INPUT = r"CombineFn ForgetsToReturn: add_input returned None where the accumulator is due"


def pairs(p):
    return p | beam.Create([("a", 1), ("a", 2), ("b", 3)] * 4)


@pytest.mark.spark
def test_add_input_returning_none_is_named_in_batch(spark):
    p = beam.Pipeline()
    pairs(p) | "Total" >> beam.CombinePerKey(ForgetsToReturn())
    with pytest.raises(TypeError, match=NONE_FROM_ADD_INPUT) as error:
        p.run()
    assert "in transform 'Total'" in " ".join(error.value.__notes__)


@pytest.mark.spark
def test_merge_accumulators_returning_none_is_named_in_batch(spark):
    p = beam.Pipeline(options=PipelineOptions(state_partitions=2))
    # Many partitions of the same keys, so partial accumulators must be merged.
    p | beam.Create([("a", i) for i in range(40)]) | "Total" >> beam.CombinePerKey(MergeReturnsNothing())
    with pytest.raises(TypeError, match=r"CombineFn MergeReturnsNothing: merge_accumulators returned None"):
        p.run()


def windowed_stream():
    return (
        TestStream()
        .add_elements([window.TimestampedValue(("a", 1), 1), window.TimestampedValue(("a", 2), 2)])
        .advance_watermark_to_infinity()
    )


@pytest.mark.spark
def test_add_input_returning_none_is_named_in_a_stream(spark):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    p | windowed_stream() | beam.WindowInto(window.FixedWindows(10)) | "Total" >> beam.CombinePerKey(ForgetsToReturn())
    with pytest.raises(TypeError, match=NONE_FROM_ADD_INPUT):
        p.run()


def test_add_input_returning_none_is_named_by_the_engine_alone():
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    p | windowed_stream() | beam.WindowInto(window.FixedWindows(10)) | "Total" >> beam.CombinePerKey(ForgetsToReturn())
    with pytest.raises(TypeError, match=NONE_FROM_ADD_INPUT):
        run_in_memory(p, streaming=True)


def test_an_accumulator_that_is_none_by_design_is_accepted():
    class FirstOrNone(beam.CombineFn):
        """None is this accumulator's 'nothing yet'."""

        def create_accumulator(self):
            return None

        def add_input(self, accumulator, value):
            return value if accumulator is None else accumulator

        def merge_accumulators(self, accumulators):
            return next((a for a in accumulators if a is not None), None)

        def extract_output(self, accumulator):
            return accumulator

    assert FirstOrNone().apply([None, 4, 5]) == 4
