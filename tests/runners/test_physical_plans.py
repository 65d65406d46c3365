"""Golden snapshots of the physical plan (``runners/core/plan/physical.py``) for representative
pipelines of both front ends, batch and stream, on the Spark backend's capabilities (tiny
stages on the driver allowed, as on a plain local master). The plan is a pure pass: no
Spark starts. Each snapshot is a text file under ``physical_plans/``, reviewed in diffs:
a change of any choice (a strategy, a reason, an alternative, what is declined) shows as a
change of its file.

After a deliberate change, rewrite the files and review the diff:

    SPARKBEAM_UPDATE_GOLDEN=1 python -m pytest -n 0 tests/runners/test_physical_plans.py

The apache_beam pipelines' plans name Beam's own expansions (``WriteToText/Write/...``): an
upgrade of Beam that restructures them shows here too.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.lowering.ops import LoweredPipeline
from sparkbeam.runners.core.lowering.settings import RunSettings
from sparkbeam.runners.core.lowering.strategies import Strategy
from sparkbeam.runners.core.plan.physical import PhysicalPlan, plan_physical
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.runners.spark.backend import spark_capabilities
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import trigger, window
from sparkbeam.transforms.userstate import CombiningValueStateSpec

GOLDEN = pathlib.Path(__file__).parent / "physical_plans"
UPDATE = os.environ.get("SPARKBEAM_UPDATE_GOLDEN") == "1"


def physical_plan(lowered: LoweredPipeline, settings: RunSettings) -> PhysicalPlan:
    mode = settings.mode(unbounded_input=any(not info.is_bounded for info in lowered.pcollections))
    return plan_physical(plan_stages(lowered), mode, spark_capabilities(driver_runs_tiny_stages=True))


def sdk_plan(pipeline: beam.Pipeline, **options: Any) -> PhysicalPlan:
    """The plan the Spark runner makes of a sparkbeam pipeline (its SQL-plan rewrite too)."""
    from sparkbeam.runners.spark.runner import _lower

    settings = RunSettings.from_options(options)
    return physical_plan(_lower(pipeline, settings), settings)


def beam_plan(pipeline: Any, *flags: str) -> PhysicalPlan:
    """The plan the Spark runner makes of an apache_beam pipeline."""
    from apache_beam.runners.pipeline_utils import group_by_key_input_visitor

    from sparkbeam.runners.beam.options import sparkbeam_settings
    from sparkbeam.runners.beam.runner import captured_in
    from sparkbeam.runners.beam.translate import translate

    pipeline.visit(group_by_key_input_visitor(True))
    captured, logs = captured_in(pipeline)
    lowered = translate(pipeline, locations={}, captured=captured, capture_logs=logs, deterministic_keys=True)
    from apache_beam.options.pipeline_options import PipelineOptions

    return physical_plan(lowered, sparkbeam_settings(PipelineOptions(list(flags))))


def stamp(kv):
    return window.TimestampedValue(kv, kv[1])


def show(kv):
    return f"{kv[0]}={kv[1]}"


def events() -> TestStream:
    tv = window.TimestampedValue
    return (
        TestStream()
        .add_elements([tv(("a", 1), 1), tv(("b", 2), 2)])
        .advance_watermark_to(12)
        .add_elements([tv(("a", 5), 15)])
        .advance_watermark_to_infinity()
    )


class RunningCount(beam.DoFn):
    COUNT = CombiningValueStateSpec("count", sum)

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        count.add(1)
        yield element[0], count.read()


# -------------------------------------------------------------------- sparkbeam pipelines


def batch_combine_with_map_side_pass() -> PhysicalPlan:
    p = beam.Pipeline()
    scores = p | "Scores" >> beam.Create([("a", 1), ("b", 2)]) | "Stamp" >> beam.Map(stamp)
    sums = scores | "Minutes" >> beam.WindowInto(window.FixedWindows(60)) | "Sum" >> beam.CombinePerKey(sum)
    beam.capture(sums | "Show" >> beam.Map(show))
    return sdk_plan(p)


def batch_group_by_key_early_firings() -> PhysicalPlan:
    p = beam.Pipeline()
    keyed = p | "Scores" >> beam.Create([("a", 1), ("b", 2)])
    early = window.FixedWindows(60)
    windowed = keyed | "Early" >> beam.WindowInto(early, trigger=trigger.AfterWatermark(early=trigger.AfterCount(2)), accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
    beam.capture(windowed | "Group" >> beam.GroupByKey())
    return sdk_plan(p)


def batch_sessions() -> PhysicalPlan:
    p = beam.Pipeline()
    keyed = p | "Clicks" >> beam.Create([("a", 1), ("a", 3)]) | "Stamp" >> beam.Map(stamp)
    sessions = keyed | "Sessions" >> beam.WindowInto(window.Sessions(10))
    beam.capture(sessions | "Sum" >> beam.CombinePerKey(sum))
    transformed = keyed | "Transformed" >> beam.WindowInto(
        window.Sessions(10), timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED
    )
    beam.capture(transformed | "SumTransformed" >> beam.CombinePerKey(sum))
    return sdk_plan(p)


def stream_lifted_and_unlifted_with_put_off_summaries() -> PhysicalPlan:
    p = beam.Pipeline()
    keyed = p | "Events" >> events() | "Tens" >> beam.WindowInto(window.FixedWindows(10))
    sums = keyed | "Sum" >> beam.CombinePerKey(sum)
    groups = keyed | "Group" >> beam.GroupByKey() | "Sizes" >> beam.MapTuple(lambda key, values: (key, len(values)))
    merged = (sums, groups) | "Both" >> beam.Flatten() | "One key" >> beam.Map(lambda kv: ("all", kv))
    beam.capture(merged | "Count" >> beam.ParDo(RunningCount()))
    return sdk_plan(p)


def stream_side_inputs() -> PhysicalPlan:
    p = beam.Pipeline()
    keyed = p | "Events" >> events() | "Tens" >> beam.WindowInto(window.FixedWindows(10))
    totals = keyed | "Values" >> beam.Map(lambda kv: kv[1]) | "Total" >> beam.CombineGlobally(sum).without_defaults()
    shares = keyed | "Share" >> beam.Map(lambda kv, totals: (kv[0], kv[1] / sum(totals)), beam.pvalue.AsList(totals))
    beam.capture(shares)
    return sdk_plan(p)


def batch_side_inputs_and_a_flatten() -> PhysicalPlan:
    p = beam.Pipeline()
    numbers = p | "Numbers" >> beam.Create([1, 2, 3])
    limit = p | "Limit" >> beam.Create([1])
    big = numbers | "Big" >> beam.Filter(lambda x, limit: x > limit, beam.pvalue.AsSingleton(limit))
    beam.capture((big, limit) | "Both" >> beam.Flatten())
    return sdk_plan(p)


def batch_stateful_dofn_and_a_leaf() -> PhysicalPlan:
    p = beam.Pipeline()
    keyed = p | "Pairs" >> beam.Create([("a", 1), ("a", 2)])
    beam.capture(keyed | "Count" >> beam.ParDo(RunningCount()))
    _ = keyed | "Check" >> beam.Map(print)  # nothing reads its output: a leaf
    return sdk_plan(p)


def batch_sql_segment() -> PhysicalPlan:
    p = beam.Pipeline()
    rows = p | "Scores" >> beam.Create([beam.Row(team="red", points=3), beam.Row(team="blue", points=1)])
    beam.capture(rows | "Totals" >> beam.GroupBy("team").aggregate_field("points", sum, "total"))
    return sdk_plan(p)


def batch_sql_segment_turned_off() -> PhysicalPlan:
    p = beam.Pipeline()
    rows = p | "Scores" >> beam.Create([beam.Row(team="red", points=3), beam.Row(team="blue", points=1)])
    beam.capture(rows | "Totals" >> beam.GroupBy("team").aggregate_field("points", sum, "total"))
    return sdk_plan(p, sql_plans=False)


def impulse_chain_on_the_driver() -> PhysicalPlan:
    p = beam.Pipeline()
    start = p | "Start" >> beam.Impulse()
    beam.capture(start | "Prepare" >> beam.Map(lambda _: "ready"))
    beam.capture(start)  # read as it is
    return sdk_plan(p)


# ---------------------------------------------------------------- apache_beam pipelines


def beam_write_to_text_on_the_driver(tmp_path: pathlib.Path) -> PhysicalPlan:
    import apache_beam as ab

    p = ab.Pipeline()
    counts = p | ab.Create(["b", "a", "c", "a"]) | ab.combiners.Count.PerElement()
    _ = counts | ab.MapTuple(show_pair) | ab.io.WriteToText(str(tmp_path / "counts"))
    return beam_plan(p)


def show_pair(word, count):
    return f"{word}:{count}"


def beam_test_stream_early_and_late() -> PhysicalPlan:
    import apache_beam as ab
    from apache_beam.testing.test_stream import TestStream as BeamTestStream
    from apache_beam.transforms import trigger as bt
    from apache_beam.transforms import window as bw

    stream = BeamTestStream().add_elements([bw.TimestampedValue(("a", 1), 1)]).advance_watermark_to_infinity()
    p = ab.Pipeline()
    windowed = p | stream | ab.WindowInto(
        bw.FixedWindows(10),
        trigger=bt.AfterWatermark(early=bt.AfterCount(1), late=bt.AfterCount(1)),
        accumulation_mode=bt.AccumulationMode.DISCARDING,
        allowed_lateness=60,
    )
    _ = windowed | "Sum" >> ab.CombinePerKey(sum) | "Show" >> ab.Map(show)
    return beam_plan(p, "--streaming")


def beam_batch_stateful() -> PhysicalPlan:
    import apache_beam as ab
    from apache_beam.transforms.userstate import CombiningValueStateSpec as BeamCombiningState

    class Count(ab.DoFn):
        COUNT = BeamCombiningState("count", sum)

        def process(self, element, count=ab.DoFn.StateParam(COUNT)):
            count.add(1)
            yield element[0], count.read()

    p = ab.Pipeline()
    _ = p | ab.Create([("a", 1), ("a", 2)]) | "Count" >> ab.ParDo(Count())
    return beam_plan(p)


PIPELINES = {
    "batch_combine_with_map_side_pass": batch_combine_with_map_side_pass,
    "batch_group_by_key_early_firings": batch_group_by_key_early_firings,
    "batch_sessions": batch_sessions,
    "stream_lifted_and_unlifted_with_put_off_summaries": stream_lifted_and_unlifted_with_put_off_summaries,
    "stream_side_inputs": stream_side_inputs,
    "batch_side_inputs_and_a_flatten": batch_side_inputs_and_a_flatten,
    "batch_stateful_dofn_and_a_leaf": batch_stateful_dofn_and_a_leaf,
    "batch_sql_segment": batch_sql_segment,
    "batch_sql_segment_turned_off": batch_sql_segment_turned_off,
    "impulse_chain_on_the_driver": impulse_chain_on_the_driver,
    "beam_write_to_text_on_the_driver": beam_write_to_text_on_the_driver,
    "beam_test_stream_early_and_late": beam_test_stream_early_and_late,
    "beam_batch_stateful": beam_batch_stateful,
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_physical_plan_is_the_golden_one(name, tmp_path):
    build = PIPELINES[name]
    plan = build(tmp_path) if "tmp_path" in build.__code__.co_varnames else build()
    text = plan.describe() + "\n"
    golden = GOLDEN / f"{name}.txt"
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with SPARKBEAM_UPDATE_GOLDEN=1 and review it"
    assert text == golden.read_text()


def test_the_snapshots_cover_every_strategy():
    seen = set()
    for path in GOLDEN.glob("*.txt"):
        text = path.read_text()
        seen.update(strategy for strategy in Strategy if f": {strategy.value}\n" in text or f"instead: {strategy.value} when" in text)
    assert seen == set(Strategy)



@pytest.mark.spark
def test_a_spark_result_shows_the_plan_it_ran(spark):
    p = beam.Pipeline()
    scores = p | "Scores" >> beam.Create([("a", 1), ("b", 2), ("a", 3)]) | "Stamp" >> beam.Map(stamp)
    sums = beam.capture(scores | "Minutes" >> beam.WindowInto(window.FixedWindows(60)) | "Sum" >> beam.CombinePerKey(sum))
    result = p.run()
    assert sorted(e.value for e in result.emissions(sums)) == [("a", 4), ("b", 2)]
    plan = result.physical_plan()
    assert plan.describe().startswith("physical plan (batch, Spark backend")
    assert [(s.stage.name, s.strategy) for s in plan.stages] == [
        ("Scores", Strategy.MAP_SIDE_PASS),
        ("Sum", Strategy.BATCH_COMBINE),
    ]


@pytest.mark.spark
def test_a_beam_result_shows_the_plan_it_ran(spark, tmp_path):
    import apache_beam as ab
    from apache_beam.options.pipeline_options import PipelineOptions

    with ab.Pipeline(options=PipelineOptions(["--runner=sparkbeam.SparkRunner"])) as p:
        counted = p | "Words" >> ab.Create(["a", "b", "a"]) | "Count" >> ab.combiners.Count.PerElement()
        _ = counted | "Write" >> ab.io.WriteToText(str(tmp_path / "counts"))
    text = p.result.physical_plan().describe()
    assert text.startswith("physical plan (batch, Spark backend")
    assert "'Count/CombinePerKey(CountCombineFn)': batch combine by key" in text
