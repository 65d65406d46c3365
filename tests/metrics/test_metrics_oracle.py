"""Metrics against Beam's: the same pipelines on apache_beam's runners and on sparkbeam
give the same query results (committed and attempted), filters included."""

from __future__ import annotations

import pytest

import sparkbeam
import sparkbeam.metrics
from sparkbeam.metrics import Metrics, MetricsFilter
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from tests.metrics.pipelines import build_batch, make_fns, rows

pytestmark = pytest.mark.spark

FILTERS = {
    "all": lambda f: None,
    "name": lambda f: f().with_name("lines"),
    "names": lambda f: f().with_names(["added", "word_lengths"]),
    "namespace": lambda f: f().with_namespace("combine"),
    "namespace as class": lambda f: f().with_namespace("tests.metrics.pipelines.ParseWords"),
    "step": lambda f: f().with_step("Words"),
    "step sub-path": lambda f: f().with_step("CombinePerKey/Precombine"),
    "step whole label": lambda f: f().with_step("Total/CombinePerKey/ExtractOutputs"),
    "step parts out of order": lambda f: f().with_step("Precombine/CombinePerKey"),
    "step and name": lambda f: f().with_step("Count").with_name("extracted"),
    "no match": lambda f: f().with_name("absent"),
}


def _beam_query(build) -> dict:
    import apache_beam as beam
    import apache_beam.metrics
    from apache_beam.metrics.metric import MetricsFilter as BeamFilter
    from apache_beam.options.pipeline_options import PipelineOptions as BeamOptions

    p = beam.Pipeline(runner="FnApiRunner", options=BeamOptions([]))
    build(beam, apache_beam.metrics, p)
    result = p.run()
    result.wait_until_finish()
    return {name: rows(result.metrics().query(make(BeamFilter))) for name, make in FILTERS.items()}


@pytest.fixture(scope="module")
def beam_batch() -> dict:
    return _beam_query(build_batch)


def test_batch_metrics_are_beams(spark, beam_batch):
    p = sparkbeam.Pipeline(options=PipelineOptions(state_partitions=3))
    build_batch(sparkbeam, sparkbeam.metrics, p)
    result = p.run()
    ours = {name: rows(result.metrics().query(make(MetricsFilter))) for name, make in FILTERS.items()}
    assert ours["all"] == beam_batch["all"]
    assert ours["all"][("counters", "Words/Parse", "tests.metrics.pipelines.ParseWords", "lines")] == (6, 6)
    assert ours["all"][("distributions", "Words/Parse", "wordcount", "word_lengths")] == ((22, 9, 1, 5),) * 2
    for name in FILTERS:
        assert ours[name] == beam_batch[name], name
    assert ours["no match"] == {}


def test_the_engine_in_memory_gives_the_same_metrics(beam_batch):
    p = sparkbeam.Pipeline()
    build_batch(sparkbeam, sparkbeam.metrics, p)
    assert rows(run_in_memory(p).metrics().query()) == beam_batch["all"]


def test_query_has_beams_shape(spark):
    p = sparkbeam.Pipeline()
    build_batch(sparkbeam, sparkbeam.metrics, p)
    query = p.run().metrics().query()
    assert set(query) == {"counters", "distributions", "gauges", "string_sets", "bounded_tries", "histograms"}
    (lengths,) = [r for r in query["distributions"] if r.key.metric.name == "word_lengths"]
    assert lengths.committed.mean == pytest.approx(22 / 9)
    (gauge,) = query["gauges"]
    assert gauge.committed.value == 7 and gauge.committed.timestamp > 0
    assert gauge.result == gauge.committed


def build_stream(beam, metrics_module, p):
    """Three steps of lines, each followed by a watermark; word counts per fixed window."""
    from_beam = beam.__name__ == "apache_beam"
    if from_beam:
        from apache_beam.testing.test_stream import TestStream
        from apache_beam.transforms import window
    else:
        from sparkbeam.testing.test_stream import TestStream
        from sparkbeam.transforms import window
    fns = make_fns(beam, metrics_module)
    stream = TestStream()
    for step, text in enumerate(["a bb", "ccc  dddd", "", "a a eeeee"]):
        stream.add_elements([window.TimestampedValue(text, step * 10 + 1)])
        stream.advance_watermark_to(step * 10 + 9)
    stream.advance_watermark_to_infinity()
    return (
        p
        | stream
        | "Words" >> fns["Words"]()
        | beam.WindowInto(window.FixedWindows(10))
        | "PerWindow" >> beam.GroupByKey()
        | "Sizes" >> beam.Map(lambda kv: metrics_module.Metrics.counter("stream", "groups").inc())
    )


def test_stream_metrics_are_beams_and_shown_per_step(spark):
    # Beam's local runners give no oracle here: its portable runner refuses TestStream, and
    # its streaming DirectRunner reports only the stream's first bundle (lines=1). The
    # engine in memory is the oracle, and the totals are checked by hand.
    p = sparkbeam.Pipeline(options=PipelineOptions(streaming=True))
    build_stream(sparkbeam, sparkbeam.metrics, p)
    expected = rows(run_in_memory(p, streaming=True).metrics().query())
    metrics = p.run().metrics()
    assert rows(metrics.query()) == expected
    assert expected[("counters", "Words/Parse", "tests.metrics.pipelines.ParseWords", "lines")] == (4, 4)
    assert expected[("counters", "Words/Parse", "tests.metrics.pipelines.ParseWords", "empty_lines")] == (1, 1)
    assert expected[("distributions", "Words/Parse", "wordcount", "word_lengths")] == ((17, 7, 1, 5),) * 2
    # Per step: the lines each step parsed, and the groups each step's watermark released.
    per_step = [
        (step.step, {key.metric.name: value for key, value in step.committed.counters.items()})
        for step in metrics.steps()
    ]
    lines = [counts.get("lines", 0) for _, counts in per_step]
    groups = [counts.get("groups", 0) for _, counts in per_step]
    assert sum(lines) == 4 and lines.count(1) == 4  # one line per step, in four steps
    assert sum(groups) == 6 and len([g for g in groups if g]) >= 3  # groups fire as windows close
    assert [step for step, _ in per_step] == sorted(step for step, _ in per_step)


def test_a_combine_with_a_composite_label_and_metrics_outside_a_pipeline(spark):
    Metrics.counter("nowhere", "ignored").inc()  # outside a run: dropped, as in Beam
    p = sparkbeam.Pipeline()
    _ = p | sparkbeam.Create([1, 2, 3]) | "Sum" >> sparkbeam.CombineGlobally(make_fns(sparkbeam, sparkbeam.metrics)["CountingSum"]())
    metrics = p.run().metrics()
    query = metrics.query(MetricsFilter().with_namespace("combine"))
    assert {(r.key.step, r.key.metric.name, r.committed) for r in query["counters"]} == {
        ("Sum/CombinePerKey/Precombine", "added", 3),
        ("Sum/CombinePerKey/ExtractOutputs", "extracted", 1),
    }
    assert not metrics.query(MetricsFilter().with_namespace("nowhere"))["counters"]


class _CountPerKey(sparkbeam.DoFn):
    """A stateful DoFn that counts what it sees, in state and in a metric."""

    from sparkbeam.transforms import userstate as _userstate

    SEEN = _userstate.CombiningValueStateSpec("seen", sum)

    def process(self, element, seen=sparkbeam.DoFn.StateParam(SEEN)):
        seen.add(1)
        Metrics.counter("stateful", "elements").inc()
        yield element[0], seen.read()


def test_a_stateful_dofns_metrics_are_under_its_label(spark):
    def build(p):
        _ = p | sparkbeam.Create([("a", 1), ("a", 2), ("b", 3)]) | "Count" >> sparkbeam.ParDo(_CountPerKey())

    expected = {("Count", "elements", 3)}
    p = sparkbeam.Pipeline()
    build(p)
    in_memory = run_in_memory(p).metrics().query(MetricsFilter().with_namespace("stateful"))
    assert {(r.key.step, r.key.metric.name, r.committed) for r in in_memory["counters"]} == expected
    p = sparkbeam.Pipeline()
    build(p)
    on_spark = p.run().metrics().query(MetricsFilter().with_namespace("stateful"))
    assert {(r.key.step, r.key.metric.name, r.committed) for r in on_spark["counters"]} == expected
