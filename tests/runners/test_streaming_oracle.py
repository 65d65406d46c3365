"""Streaming oracle pairs: TestStream pipelines on Beam's direct runner and on Spark.

Outputs are compared as multisets of (value, timestamp, window, pane), with the
overlapping-window rule switched off (current Beam does not apply it).
"""

from __future__ import annotations

import pytest

import sparkbeam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.memory import run_in_memory
from tests.oracle import _sparkbeam_ns, assert_same_as_beam, canonical

pytestmark = pytest.mark.spark


def scores_stream(ns):
    tv = ns.TimestampedValue
    return (
        ns.TestStream()
        .add_elements([tv(("alice", 3), 1), tv(("bob", 5), 2), tv(("alice", 2), 4)])
        .advance_watermark_to(8)
        .add_elements([tv(("bob", 1), 9), tv(("alice", 7), 12)])
        .advance_processing_time(30)
        .advance_watermark_to(15)
        .add_elements([tv(("alice", 1), 6)])  # late for [0, 10)
        .advance_watermark_to(40)
        .add_elements([tv(("bob", 4), 5)])  # beyond allowed lateness: dropped
        .advance_watermark_to_infinity()
    )


TRIGGERS = {
    "default": lambda t: t.DefaultTrigger(),
    "early_late": lambda t: t.AfterWatermark(early=t.AfterCount(2), late=t.AfterCount(1)),
    "repeated_count": lambda t: t.Repeatedly(t.AfterCount(2)),
    "processing_time": lambda t: t.AfterWatermark(early=t.AfterProcessingTime(10)),
}
# Beam's direct runner cannot be the oracle for the other two: with Repeatedly(AfterCount)
# it fails inside its executor ("exceptions must derive from BaseException"), and it fires
# processing-time timers after the watermark has passed the window, marking on-time panes
# LATE. Those triggers are pinned by our transcripts, and below Spark must equal the engine.
BEAM_ORACLE_TRIGGERS = ["default", "early_late"]


def fixed_windows(trigger_name, mode):
    def build(ns, p):
        return (
            p
            | scores_stream(ns)
            | ns.beam.WindowInto(
                ns.window.FixedWindows(10),
                trigger=TRIGGERS[trigger_name](ns.trigger),
                accumulation_mode=getattr(ns.trigger.AccumulationMode, mode),
                allowed_lateness=20,
            )
            | ns.beam.CombinePerKey(sum)
        )

    return build


@pytest.mark.parametrize("mode", ["ACCUMULATING", "DISCARDING"])
@pytest.mark.parametrize("trigger_name", BEAM_ORACLE_TRIGGERS)
def test_fixed_windows_triggers_and_accumulation(spark, trigger_name, mode):
    assert_same_as_beam(fixed_windows(trigger_name, mode), streaming=True, overlapping_window_rule=False)


def emitted_by_step(result, pcoll):
    return sorted(
        (canonical(e.value), e.timestamp.micros, str(e.windows), repr(e.pane), e.step) for e in result.emissions(pcoll)
    )


@pytest.mark.parametrize("mode", ["ACCUMULATING", "DISCARDING"])
@pytest.mark.parametrize("trigger_name", sorted(TRIGGERS))
def test_spark_streaming_equals_the_engine_step_by_step(spark, trigger_name, mode):
    build = fixed_windows(trigger_name, mode)
    results = []
    for run in ("spark", "engine"):
        p = sparkbeam.Pipeline(options=PipelineOptions(streaming=True))
        out = sparkbeam.capture(build(_sparkbeam_ns(), p))
        result = p.run() if run == "spark" else run_in_memory(p)
        results.append(emitted_by_step(result, out))
    assert results[0] == results[1]
    assert results[0]


def test_sessions_with_early_firings_group_by_key(spark):
    def build(ns, p):
        return (
            p
            | scores_stream(ns)
            | ns.beam.WindowInto(
                ns.window.Sessions(5),
                trigger=ns.trigger.AfterWatermark(early=ns.trigger.AfterCount(2)),
                accumulation_mode=ns.trigger.AccumulationMode.ACCUMULATING,
            )
            | ns.beam.GroupByKey()
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_two_grouping_stages_in_a_row(spark):
    def build(ns, p):
        per_user = (
            p
            | scores_stream(ns)
            | "Fixed" >> ns.beam.WindowInto(ns.window.FixedWindows(10))
            | "PerUser" >> ns.beam.CombinePerKey(sum)
        )
        return (
            per_user
            | "Rekey" >> ns.beam.Map(lambda kv: ("all", kv[1]))
            | "Total" >> ns.beam.CombinePerKey(sum)
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


# ---------------------------------------------------------------------------- re-stamped outputs
#
# A TimestampedValue output is windowed again by the input's window fn (Beam Python's
# ``_maybe_propagate_windowing_info``), in streaming as in batch.


def restamp_stream(ns):
    tv = ns.TimestampedValue
    return (
        ns.TestStream()
        .add_elements([tv(("alice", 3), 1), tv(("bob", 5), 2), tv(("alice", 2), 4)])
        .advance_watermark_to(8)
        .add_elements([tv(("bob", 1), 9), tv(("alice", 7), 12)])
        .advance_watermark_to(30)
        .add_elements([tv(("alice", 1), 33)])
        .advance_watermark_to_infinity()
    )


def later_by(ns, seconds):
    return f"Later{seconds}" >> ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam: ns.TimestampedValue(kv, t + seconds))


def test_reify_window_after_a_sessions_grouping_in_a_stream(spark):
    def build(ns, p):
        beam = ns.beam

        def reify(element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
            yield ns.TimestampedValue((element, timestamp.micros // 1000, (float(window.start), float(window.end))), timestamp)

        return (
            p
            | restamp_stream(ns)
            | beam.WindowInto(ns.window.Sessions(5))
            | beam.GroupByKey()
            | "Reify" >> beam.FlatMap(reify)  # lands in a new session at the pane's timestamp
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_a_restamp_moves_an_element_to_another_fixed_window_in_a_stream(spark):
    def build(ns, p):
        return (
            p
            | restamp_stream(ns)
            | ns.beam.WindowInto(ns.window.FixedWindows(10))
            | later_by(ns, 15)
            | ns.beam.GroupByKey()
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_a_restamp_in_sliding_windows_in_a_stream(spark):
    def build(ns, p):
        return (
            p
            | restamp_stream(ns)
            | ns.beam.WindowInto(ns.window.SlidingWindows(10, 5))
            | later_by(ns, 7)
            | ns.beam.CombinePerKey(sum)
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_a_restamp_in_the_global_window_in_a_stream(spark):
    def build(ns, p):
        return (
            p
            | restamp_stream(ns)
            | later_by(ns, 100)
            | ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam: (kv, t.micros // 1000))
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)
