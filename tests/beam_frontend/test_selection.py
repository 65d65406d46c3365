"""Choosing sparkbeam's runner the Beam way, with sparkbeam's Spark options on the same command line.

``python my_pipeline.py --runner=sparkbeam.SparkRunner`` (Beam imports the dotted name),
``beam.Pipeline(runner=sparkbeam.SparkRunner())`` and ``TestPipeline`` with
``--test-pipeline-options``; the run's result is sparkbeam's, with every stage's watermarks
named by Beam's labels.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import sparkbeam
from sparkbeam.runners.beam import SparkRunner
from sparkbeam.runners.beam.options import sparkbeam_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sparkbeam_spark_runner_is_a_beam_runner_when_apache_beam_is_installed():
    assert sparkbeam.SparkRunner is SparkRunner
    assert isinstance(sparkbeam.SparkRunner(), beam.runners.runner.PipelineRunner)


def test_spark_options_on_a_beam_command_line_become_sparkbeam_settings():
    options = PipelineOptions(
        [
            "--runner=sparkbeam.SparkRunner",
            "--spark_master=local[3]",
            "--spark_conf=spark.sql.shuffle.partitions=3",
            "--spark_conf",
            "spark.executor.memory=1g",
            "--state_partitions=6",
            "--checkpoint_dir=/tmp/ck",
            "--no_overlapping_window_rule",
            "--no_block_on_run",
            "--streaming",
            "--job_name=nightly",
            "--max_steps=7",
        ]
    )
    settings = sparkbeam_settings(options)
    assert settings.spark_master == "local[3]"
    assert settings.spark_conf == ("spark.sql.shuffle.partitions=3", "spark.executor.memory=1g")
    assert settings.state_partitions == 6
    assert settings.checkpoint_dir == "/tmp/ck"
    assert settings.overlapping_window_rule is False
    assert settings.block_on_run is False
    assert settings.streaming is True
    assert settings.job_name == "nightly"
    assert settings.max_steps == 7
    # What the command line leaves out keeps sparkbeam's defaults.
    defaults = sparkbeam_settings(PipelineOptions([]))
    assert defaults.overlapping_window_rule is True and defaults.block_on_run is True
    # No master given: spark-submit's, else local[*], chosen when the session starts.
    assert defaults.spark_master is None


def test_a_bad_spark_option_value_names_the_option():
    with pytest.raises(ValueError, match="state_partitions"):
        sparkbeam_settings(PipelineOptions(["--state_partitions=none"]))


@pytest.mark.spark
def test_dotted_runner_name_and_stage_names_in_the_timeline(spark):
    p = beam.Pipeline(options=PipelineOptions(["--runner=sparkbeam.SparkRunner", "--state_partitions=2"]))
    assert isinstance(p.runner, SparkRunner)
    totals = p | "Scores" >> beam.Create([("a", 1), ("b", 2), ("a", 3)]) | "Total" >> beam.CombinePerKey(sum)
    assert_that(totals, equal_to([("a", 4), ("b", 2)]))
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    stages = {record.stage for record in result.watermarks()}
    assert {"Scores/Impulse", "Total"} <= stages
    (total,) = result.watermarks().for_stage("Total")
    assert (total.elements_in, total.elements_out) == (3, 2)


@pytest.mark.spark
def test_runner_object_and_sparkbeams_own_pipelines_with_the_same_class(spark):
    with beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions(["--state_partitions=2"])) as p:
        assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * x), equal_to([1, 4, 9]))
    own = sparkbeam.Pipeline(runner=sparkbeam.SparkRunner())
    squares = sparkbeam.capture(own | sparkbeam.Create([1, 2]) | sparkbeam.Map(lambda x: x * x))
    assert sorted(e.value for e in own.run().emissions(squares)) == [1, 4]


@pytest.mark.spark
def test_test_pipeline_with_test_pipeline_options(spark):
    argv = ["--test-pipeline-options=--runner=sparkbeam.SparkRunner --state_partitions=2"]
    with TestPipeline(argv=argv) as p:
        assert isinstance(p.runner, SparkRunner)
        words = p | beam.Create(["a b", "b c c"]) | beam.FlatMap(str.split)
        assert_that(words | beam.combiners.Count.PerElement(), equal_to([("a", 1), ("b", 2), ("c", 2)]))


def test_a_test_that_patches_beam_pipeline_with_test_pipeline_runs_on_sparkbeam(spark, monkeypatch):
    # Beam's snippet tests patch ``apache_beam.Pipeline`` with TestPipeline so that the
    # snippets' ``beam.Pipeline()`` takes --test-pipeline-options; the runner-API round trip
    # then hands the runner a plain Pipeline, which is not that TestPipeline.
    monkeypatch.setattr(beam, "Pipeline", TestPipeline)
    argv = ["--test-pipeline-options=--runner=sparkbeam.SparkRunner --state_partitions=2"]
    with beam.Pipeline(argv=argv) as p:
        assert isinstance(p.runner, SparkRunner)
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 10), equal_to([10, 20]))


@pytest.mark.spark
def test_beams_wordcount_from_the_command_line_equals_beams_local_runner(spark, tmp_path):
    from apache_beam.examples import wordcount

    source = tmp_path / "kinglear.txt"
    source.write_text("\n".join(["Blow, winds, and crack your cheeks! rage! blow!", "", "I am a man more sinn'd against than sinning."] * 40))
    # Unmodified, as a user runs it: a new process, the runner and Spark options as flags.
    command = [
        sys.executable, "-m", "apache_beam.examples.wordcount",
        f"--input={source}", f"--output={tmp_path / 'spark' / 'counts'}",
        "--runner=sparkbeam.SparkRunner", "--spark_master=local[2]",
        "--spark_conf=spark.ui.enabled=false", "--state_partitions=2",
    ]
    environment = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    wordcount.run([f"--input={source}", f"--output={tmp_path / 'beam' / 'counts'}"], save_main_session=False)

    def lines(folder):
        return sorted(line for path in glob.glob(str(tmp_path / folder / "counts*")) for line in open(path).read().splitlines())

    assert lines("spark") == lines("beam")
    assert "blow: 40" in lines("spark") and len(lines("spark")) > 10
