"""The guard under Beam's own tests: a pipeline on one of Beam's runners is refused and
recorded, before Beam's runner starts; runs on sparkbeam are counted, once each."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline

import sparkbeam
from tests.beam_frontend.beam_guard import BeamRunnerUsed, RunGuard


def _pinned_to_fn_api_runner():
    with test_pipeline.TestPipeline("FnApiRunner") as p:
        p | beam.Create([1])


def _eager():
    return [1, 2] | beam.Map(lambda x: x + 1)


def _no_runner():
    with beam.Pipeline(options=PipelineOptions(["--no_pipeline_type_check"])) as p:
        p | beam.Create([1])


def _bundle_based_direct_runner():
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    with beam.Pipeline(runner=BundleBasedDirectRunner()) as p:
        p | beam.Create([1])


@pytest.mark.parametrize(
    ("build_and_run", "named"),
    [
        (_pinned_to_fn_api_runner, "FnApiRunner ("),
        (_eager, "SwitchingDirectRunner ("),
        (_no_runner, "SwitchingDirectRunner ("),
        (_bundle_based_direct_runner, "BundleBasedDirectRunner ("),
    ],
)
def test_a_pipeline_on_a_beam_runner_is_refused_and_recorded(build_and_run, named):
    with RunGuard() as guard, pytest.raises(BeamRunnerUsed, match="instead of sparkbeam"):
        build_and_run()
    assert len(guard.record.beam_runners) == 1
    assert guard.record.beam_runners[0].startswith(named)
    assert guard.record.sparkbeam_runs == 0
    assert "ran pipelines on Beam's runners" in guard.problem()


def test_the_guard_is_gone_once_uninstalled():
    from apache_beam.pipeline import Pipeline

    before = Pipeline.run
    with RunGuard():
        assert Pipeline.run is not before
    assert Pipeline.run is before


@pytest.mark.spark
def test_pipelines_on_sparkbeam_are_counted_once_each(spark):
    options = PipelineOptions(["--runner=sparkbeam.SparkRunner", "--state_partitions=2"])
    with RunGuard() as guard:
        with beam.Pipeline(runner=sparkbeam.SparkRunner(), options=options) as p:
            p | beam.Create([1])
        # TestPipeline runs a copy made by Beam's runner-API round trip: still one run.
        with test_pipeline.TestPipeline(options=options) as p:
            p | beam.Create([2])
    assert guard.record.sparkbeam_runs == 2
    assert guard.problem() is None
