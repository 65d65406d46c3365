"""An apache_beam pipeline run with --runner=sparkbeam.SparkRunner: Beam's Metrics reach
result.metrics(), as Beam's types, equal to Beam's own runner's."""

from __future__ import annotations

import pytest

from tests.metrics.pipelines import build_batch, rows

pytestmark = pytest.mark.spark

FILTERS = {
    "all": lambda f: None,
    "step": lambda f: f().with_step("Words"),
    "namespace": lambda f: f().with_namespace("combine"),
}


def _query(runner: str) -> dict:
    import apache_beam as beam
    import apache_beam.metrics
    from apache_beam.metrics.execution import MetricResult
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions

    p = beam.Pipeline(runner=runner, options=PipelineOptions(["--state_partitions=2"] if "sparkbeam" in runner else []))
    build_batch(beam, apache_beam.metrics, p)
    result = p.run()
    result.wait_until_finish()
    queried = {name: result.metrics().query(make(MetricsFilter)) for name, make in FILTERS.items()}
    assert all(isinstance(r, MetricResult) for q in queried.values() for rs in q.values() for r in rs)
    return {name: rows(q) for name, q in queried.items()}


def test_beam_metrics_on_sparkbeam_are_beams(spark):
    import sparkbeam

    assert sparkbeam.SparkRunner  # the runner's dotted name resolves
    ours = _query("sparkbeam.SparkRunner")
    theirs = _query("FnApiRunner")
    assert ours["all"] == theirs["all"]
    assert ours == theirs
