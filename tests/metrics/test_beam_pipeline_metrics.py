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


def test_a_counter_in_a_dofn_beam_runs_in_a_thread_of_its_own_is_kept(spark):
    # with_exception_handling(timeout=...) makes Beam run process() in another thread,
    # handing it the tracker current in the task's thread.
    import apache_beam as beam
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter

    class Count(beam.DoFn):
        def process(self, element):
            Metrics.counter("threads", "seen").inc()
            yield element

    p = beam.Pipeline(runner="sparkbeam.SparkRunner")
    _ = p | beam.Create([1, 2, 3]) | "Count" >> beam.ParDo(Count()).with_exception_handling(timeout=30)
    result = p.run()
    result.wait_until_finish()
    (counter,) = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    assert counter.committed == 3
