"""Building pipelines: labels, locations, composites and construction-time errors."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.errors import PipelineConstructionError
from sparkbeam.options.pipeline_options import PipelineOptions, StandardOptions
from sparkbeam.transforms import trigger, window


def test_duplicate_label_names_both_applications():
    p = beam.Pipeline()
    numbers = p | beam.Create([1, 2])
    numbers | "Double" >> beam.Map(lambda x: 2 * x)
    with pytest.raises(PipelineConstructionError) as error:
        numbers | "Double" >> beam.Map(lambda x: 3 * x)
    message = str(error.value)
    assert "'Double' already exists" in message
    assert message.count("test_pipeline_graph.py") == 2  # where each was applied


def test_map_label_names_the_lambda_and_its_line():
    p = beam.Pipeline()
    out = p | beam.Create([1]) | beam.Map(lambda x: x)
    assert out.producer.full_label.startswith("Map(<lambda at test_pipeline_graph.py:")


def test_each_transform_of_a_chain_is_located_at_its_own_line():
    import inspect

    p = beam.Pipeline()
    first = inspect.currentframe().f_lineno + 2
    totals = (
        p
        | "Numbers" >> beam.Create([1, 2])
        | "Pairs" >> beam.Map(
            lambda x: ("k", x))
        | "Total" >> beam.CombinePerKey(sum)
    )
    separate = beam.Map(str)
    totals | "Later" >> separate
    lines = {node.full_label: node.location.lineno for node in p.transforms()}
    assert lines["Numbers"] == first + 1
    assert lines["Pairs"] == first + 2  # where the transform starts, not where its call ends
    assert lines["Total"] == lines["Total/GroupByKey"] == first + 4  # a composite's parts too
    assert lines["Later"] == first + 7  # applied where it was constructed elsewhere
    assert all(node.location.filename == __file__ for node in p.transforms())


def test_composite_parts_are_nested_under_its_label():
    p = beam.Pipeline()
    p | beam.Create([("a", 1)]) | "Total" >> beam.CombinePerKey(sum)
    labels = [node.full_label for node in p.transforms()]
    assert "Total/GroupByKey" in labels
    assert "Total/Combine" in labels


def test_chained_transforms_and_ptransform_fn():
    @beam.ptransform_fn
    def Squares(pcoll, offset=0):
        return pcoll | beam.Map(lambda x: x * x + offset)

    p = beam.Pipeline()
    out = p | beam.Create([1, 2]) | "Sq" >> Squares(offset=1) | (beam.Map(str) | beam.Map(len))
    assert out.producer.full_label == "Map(str)|Map(len)/Map(len)"  # as Beam labels a chain
    assert any(node.full_label == "Sq" for node in p.transforms())


def test_group_by_key_output_takes_the_continuation_trigger():
    p = beam.Pipeline()
    grouped = (
        p
        | beam.Create([("a", 1)])
        | beam.WindowInto(window.FixedWindows(10), trigger=trigger.AfterWatermark(early=trigger.AfterCount(5)))
        | beam.GroupByKey()
    )
    assert grouped.windowing.triggerfn == trigger.AfterWatermark(early=trigger.AfterCount(1))


def test_flatten_rejects_different_window_fns_naming_the_inputs():
    p = beam.Pipeline()
    a = p | "A" >> beam.Create([1]) | "FixA" >> beam.WindowInto(window.FixedWindows(10))
    b = p | "B" >> beam.Create([2]) | "FixB" >> beam.WindowInto(window.FixedWindows(20))
    with pytest.raises(PipelineConstructionError, match="different window fns"):
        (a, b) | beam.Flatten()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: beam.WindowInto(window.FixedWindows(10), allowed_lateness=-1), "allowed_lateness must not be negative"),
        (lambda: beam.WindowInto(window.FixedWindows(0)), "size must be a positive duration"),
        (lambda: beam.WindowInto(window.FixedWindows(10), trigger=trigger.AfterAll(trigger.AfterCount(2), trigger.Never())), "can never fire"),
        (lambda: trigger.AfterCount(0), "count must be a positive integer"),
        (lambda: beam.ParDo(lambda x: x), "ParDo takes a DoFn"),
        (lambda: beam.Create("abc"), "not the string"),
    ],
)
def test_bad_settings_are_rejected_at_construction(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_unsupported_dofn_parameter_names_the_transform():
    class Estimating(beam.DoFn):
        def process(self, element, estimator=beam.DoFn.WatermarkEstimatorParam):
            yield element

    p = beam.Pipeline()
    with pytest.raises(NotImplementedError, match=r"'ParDo\(Estimating\)'.*WatermarkEstimatorParam"):
        p | beam.Create([1]) | beam.ParDo(Estimating())


def test_state_param_without_a_state_spec_is_refused_where_it_is_written():
    with pytest.raises(ValueError, match=r"DoFn.StateParam expects a StateSpec.*'bag'"):
        beam.DoFn.StateParam("bag")


def test_options_from_flags_and_keywords():
    options = PipelineOptions(["--streaming", "--spark_master=local[2]", "--spark_conf", "a=b", "--spark_conf=c=d"])
    assert options.view_as(StandardOptions).streaming is True
    assert options.spark_master == "local[2]"
    assert options.spark_conf == ["a=b", "c=d"]
    assert PipelineOptions(runner="SparkRunner", streaming=True).streaming is True
    assert PipelineOptions(["--no_overlapping_window_rule"]).overlapping_window_rule is False
    view = options.view_as(StandardOptions)
    view.streaming = False
    assert options.streaming is False


@pytest.mark.parametrize("flags", [["--streamin"], ["--spark_master"], ["positional"]])
def test_unknown_or_malformed_flags_are_errors(flags):
    with pytest.raises(ValueError):
        PipelineOptions(flags)


def test_unknown_runner_is_an_error():
    p = beam.Pipeline(runner="DataflowRunner")
    p | beam.Create([1])
    with pytest.raises(ValueError, match="unknown runner 'DataflowRunner'"):
        p.run()
