"""Combiner lifting in streaming (runners/core/grouping/lifting.py): taken, and invisible in the output.

Each pipeline runs on Spark (lifted: partials cross the shuffle) and in memory (the
engine on raw elements); their panes must be equal step by step, and the Spark run's
timeline must show fewer records crossing the shuffle than elements entering the grouping.
"""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam import trigger, window
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.window import TimestampedValue
from tests.oracle import canonical

pytestmark = pytest.mark.spark

TRIGGERS = {
    "default": trigger.DefaultTrigger,
    "early_late_counts": lambda: trigger.AfterWatermark(early=trigger.AfterCount(3), late=trigger.AfterCount(2)),
    "repeated_count": lambda: trigger.Repeatedly(trigger.AfterCount(4)),
    "processing_time": lambda: trigger.AfterWatermark(early=trigger.AfterProcessingTime(10)),
    "after_count_once": lambda: trigger.AfterCount(5),
}
COMBINERS = {
    "EOW": window.TimestampCombiner.OUTPUT_AT_EOW,
    "EARLIEST": window.TimestampCombiner.OUTPUT_AT_EARLIEST,
    "LATEST": window.TimestampCombiner.OUTPUT_AT_LATEST,
}


def _stream() -> TestStream:
    # Many elements per key and window in each bundle, so that partials are fewer.
    def bundle(start: int, seconds: range) -> list[TimestampedValue]:
        return [TimestampedValue((f"k{i % 3}", i), s) for i, s in enumerate(seconds, start)]

    return (
        TestStream()
        .add_elements(bundle(0, range(0, 20)))
        .advance_watermark_to(8)
        .add_elements(bundle(20, range(5, 25)))
        .advance_processing_time(30)
        .advance_watermark_to(15)
        .add_elements(bundle(40, range(0, 9)))  # late for [0, 10)
        .advance_watermark_to(45)
        .add_elements(bundle(60, range(0, 5)))  # beyond the allowed lateness: dropped
        .advance_watermark_to_infinity()
    )


def _build(p: beam.Pipeline, trigger_name: str, combiner: str, mode: trigger.AccumulationMode) -> beam.PCollection:
    return (
        p
        | _stream()
        | beam.WindowInto(
            window.SlidingWindows(10, 5),
            trigger=TRIGGERS[trigger_name](),
            accumulation_mode=mode,
            timestamp_combiner=COMBINERS[combiner],
            allowed_lateness=20,
        )
        | "Sum" >> beam.CombinePerKey(sum)
    )


def _panes(result, pcoll) -> list:
    return sorted(
        (canonical(e.value), e.timestamp.micros, str(e.windows), repr(e.pane), e.step) for e in result.emissions(pcoll)
    )


def _run_both(build) -> tuple[list, list, object]:
    outputs = []
    spark_result = None
    for run in ("spark", "memory"):
        p = beam.Pipeline(options=PipelineOptions(streaming=True))
        out = beam.capture(build(p))
        result = p.run() if run == "spark" else run_in_memory(p)
        outputs.append(_panes(result, out))
        if run == "spark":
            spark_result = result
    return outputs[0], outputs[1], spark_result


def _covering(combiners: dict, shift: int = 0) -> list[tuple[str, str, trigger.AccumulationMode]]:
    """Every trigger once, with the timestamp combiners and the accumulation modes in turn
    (``shift`` turns them differently for the sliding and the session cases, so that between
    the two each combiner meets both modes). Each case is two runs on Spark; the invariants
    (``tests/conformance/test_invariants.py``) cross random triggers with the combine too."""
    modes = (trigger.AccumulationMode.ACCUMULATING, trigger.AccumulationMode.DISCARDING)
    names = sorted(combiners)
    return [
        (trigger_name, names[(i + shift) % len(names)], modes[(i + shift) % 2])
        for i, trigger_name in enumerate(sorted(TRIGGERS))
    ]


@pytest.mark.parametrize(("trigger_name", "combiner", "mode"), _covering(COMBINERS))
def test_a_lifted_combine_fires_the_panes_of_the_unlifted_one(spark, trigger_name, combiner, mode):
    lifted, unlifted, _ = _run_both(lambda p: _build(p, trigger_name, combiner, mode))
    assert lifted == unlifted
    assert lifted


def test_the_lift_is_taken_fewer_records_cross_the_shuffle(spark):
    _, _, result = _run_both(lambda p: _build(p, "early_late_counts", "EARLIEST", trigger.AccumulationMode.ACCUMULATING))
    records = [r for r in result.watermarks().for_stage("Sum") if r.elements_in]
    assert records
    elements = sum(r.elements_in for r in records)
    shuffled = sum(r.records_shuffled for r in records)
    # 20 + 20 + 9 + 5 elements, two windows each; one partial per key and window of a
    # bundle (a TestStream's bundle is one partition): 3 keys x 5 windows, 5, 3 and 2.
    assert elements == 2 * (20 + 20 + 9 + 5)
    assert shuffled == 3 * (5 + 5 + 3 + 2)


def test_a_group_by_key_is_not_lifted(spark):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    _ = p | _stream() | beam.WindowInto(window.FixedWindows(10)) | "Group" >> beam.GroupByKey()
    result = p.run()
    records = [r for r in result.watermarks().for_stage("Group") if r.elements_in]
    assert records
    assert all(r.records_shuffled == r.elements_in for r in records)


def _session_stream() -> TestStream:
    # Elements of a key often share a timestamp, so proto-sessions repeat within a bundle;
    # the gaps make sessions merge across bundles and a late element bridge two sessions.
    def bundle(start: int, seconds: list[int]) -> list[TimestampedValue]:
        return [TimestampedValue((f"k{i % 2}", i), s) for i, s in enumerate(seconds, start)]

    return (
        TestStream()
        .add_elements(bundle(0, [1, 1, 1, 1, 2, 2, 2, 2, 20, 20, 20, 20]))
        .advance_watermark_to(5)
        .add_elements(bundle(20, [4, 4, 4, 4, 22, 22, 40, 40]))
        .advance_processing_time(30)
        .advance_watermark_to(18)
        .add_elements(bundle(40, [10, 10, 10, 10]))  # late: joins [1, 14) and [20, 32)
        .advance_watermark_to(100)
        .add_elements(bundle(60, [50, 50]))  # beyond the allowed lateness: dropped
        .advance_watermark_to_infinity()
    )


SESSION_COMBINERS = {**COMBINERS, "EARLIEST_TRANSFORMED": window.TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED}


def _sessions(p: beam.Pipeline, trigger_name: str, combiner: str, mode: trigger.AccumulationMode) -> beam.PCollection:
    return (
        p
        | _session_stream()
        | beam.WindowInto(
            window.Sessions(10),
            trigger=TRIGGERS[trigger_name](),
            accumulation_mode=mode,
            timestamp_combiner=SESSION_COMBINERS[combiner],
            allowed_lateness=20,
        )
        | "Sum" >> beam.CombinePerKey(sum)
    )


@pytest.mark.parametrize(("trigger_name", "combiner", "mode"), _covering(SESSION_COMBINERS, shift=1))
def test_sessions_combined_per_proto_session_fire_the_unlifted_panes(spark, trigger_name, combiner, mode):
    lifted, unlifted, _ = _run_both(lambda p: _sessions(p, trigger_name, combiner, mode))
    assert lifted == unlifted
    assert lifted


@pytest.mark.parametrize(("combiner", "taken"), [("EOW", True), ("EARLIEST", True), ("EARLIEST_TRANSFORMED", False)])
def test_sessions_are_lifted_where_output_times_ignore_the_window(spark, combiner, taken):
    _, _, result = _run_both(lambda p: _sessions(p, "default", combiner, trigger.AccumulationMode.DISCARDING))
    records = [r for r in result.watermarks().for_stage("Sum") if r.elements_in]
    elements = sum(r.elements_in for r in records)
    shuffled = sum(r.records_shuffled for r in records)
    assert elements == 12 + 8 + 4 + 2
    # One partial per key and timestamp of a bundle: 2 keys x 3 timestamps, x 3, x 1, x 1.
    assert shuffled == (2 * (3 + 3 + 1 + 1) if taken else elements)


def test_combine_globally_in_a_stream_is_combined_per_partition_then_merged(spark):
    def build(p: beam.Pipeline) -> beam.PCollection:
        return (
            p
            | beam.Create(range(1, 201))
            | beam.Map(lambda n: TimestampedValue(n, n % 30))
            | beam.WindowInto(window.FixedWindows(10))
            | "Total" >> beam.CombineGlobally(sum).without_defaults()
        )

    lifted, unlifted, result = _run_both(build)
    assert lifted == unlifted
    assert sorted(value for value, *_ in lifted) == [6170, 6615, 7315]
    timeline = result.watermarks()
    (stage,) = [name for name in timeline.stage_names if name.startswith("Total")]
    records = [r for r in timeline.for_stage(stage) if r.elements_in]
    assert sum(r.elements_in for r in records) == 200
    # Create spreads the elements over the state's partitions (2 in the tests): one partial
    # per partition and window crosses the shuffle, not 200 elements to one partition.
    assert sum(r.records_shuffled for r in records) <= 2 * 3
