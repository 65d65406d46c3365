"""The same apache_beam pipeline on Beam's local runner and on sparkbeam's: same output.

Each builder is written once against apache_beam and run unchanged on Beam's direct runner
(streaming: ``BundleBasedDirectRunner``) and with ``--runner=sparkbeam.SparkRunner``;
outputs are compared as multisets of (value, timestamp, window, pane), the
overlapping-window rule off (current Beam).
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.transforms import window as beam_window

from tests.beam_frontend.pairs import assert_runners_agree

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
        .add_elements([tv(("alice", 1), 6)])  # late for [0, 10), within the allowed lateness
        .advance_watermark_to(40)
        .add_elements([tv(("bob", 4), 5)])  # behind the allowed lateness: dropped
        .advance_watermark_to_infinity()
    )


@pytest.mark.parametrize("mode", ["ACCUMULATING", "DISCARDING"])
def test_test_stream_with_early_and_late_firings(spark, mode):
    def build(ns, p):
        t = ns.trigger
        return (
            p
            | scores_stream(ns)
            | ns.beam.WindowInto(
                ns.window.FixedWindows(10),
                trigger=t.AfterWatermark(early=t.AfterCount(2), late=t.AfterCount(1)),
                accumulation_mode=getattr(t.AccumulationMode, mode),
                allowed_lateness=20,
            )
            | ns.beam.CombinePerKey(sum)
        )

    result = assert_runners_agree(build, streaming=True)
    # The timeline names stages by Beam's labels and counts the element that came too late.
    grouping = result.watermarks().for_stage("CombinePerKey(sum)")
    assert sum(record.late_dropped for record in grouping) == 1


def test_sessions_grouped_in_a_stream_with_pane_info_seen_by_a_dofn(spark):
    def build(ns, p):
        tv = ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv(("u", 1), 1), tv(("u", 2), 3), tv(("v", 1), 2)])
            .advance_watermark_to(5)
            .add_elements([tv(("u", 3), 4)])
            .advance_watermark_to(20)
            .add_elements([tv(("u", 4), 30)])
            .advance_watermark_to_infinity()
        )
        return (
            p
            | stream
            | ns.beam.WindowInto(ns.window.Sessions(5), trigger=ns.trigger.AfterWatermark(early=ns.trigger.AfterCount(1)),
                                 accumulation_mode=ns.trigger.AccumulationMode.ACCUMULATING)
            | ns.beam.GroupByKey()
            | ns.beam.Map(lambda kv, pane=ns.beam.DoFn.PaneInfoParam: (kv[0], sorted(kv[1]), pane.index))
        )

    assert_runners_agree(build, streaming=True)


def test_sliding_windows_stamped_at_the_earliest_element(spark):
    def build(ns, p):
        return (
            p
            | ns.beam.Create([("a", 1), ("a", 7), ("b", 12), ("a", 14)])
            | ns.beam.Map(lambda kv: ns.TimestampedValue(kv, kv[1]))
            | ns.beam.WindowInto(ns.window.SlidingWindows(10, 5), timestamp_combiner=ns.window.TimestampCombiner.OUTPUT_AT_EARLIEST)
            | ns.beam.CombinePerKey(sum)
        )

    assert_runners_agree(build)


def test_side_inputs_by_window_and_global(spark):
    def build(ns, p):
        beam, window, pvalue = ns.beam, ns.window, ns.pvalue
        stamped = beam.Map(lambda kv: ns.TimestampedValue(kv, kv[1]))
        main = p | "Main" >> beam.Create([("a", 1), ("b", 12), ("a", 15)]) | "StampMain" >> stamped | "WinMain" >> beam.WindowInto(window.FixedWindows(10))
        side = p | "Side" >> beam.Create([("a", 2), ("b", 11), ("c", 13)]) | "StampSide" >> stamped | "WinSide" >> beam.WindowInto(window.FixedWindows(10))
        factor = p | "Factor" >> beam.Create([100])
        return main | beam.Map(
            lambda kv, same_window, by_key, f: (kv, sorted(same_window), sorted(by_key.items()), f),
            pvalue.AsList(side),
            pvalue.AsDict(side),
            pvalue.AsSingleton(factor),
        )

    assert_runners_agree(build)


def test_reshuffle_flatten_and_combine_globally_with_its_default(spark):
    def build(ns, p):
        beam = ns.beam
        first = p | "First" >> beam.Create([1, 2, 3])
        second = p | "Second" >> beam.Create([10, 20])
        empty = p | "Empty" >> beam.Create([])
        merged = (first, second) | beam.Flatten() | beam.Reshuffle()
        total = merged | "Total" >> beam.CombineGlobally(sum)
        nothing = empty | "Nothing" >> beam.CombineGlobally(sum)  # the default: 0
        return (total, nothing) | "Both" >> beam.Flatten()

    assert_runners_agree(build)


class EvenSeconds(beam_window.NonMergingWindowFn):
    """A custom WindowFn: two-second windows starting on even seconds."""

    def assign(self, context):
        start = context.timestamp.micros // 2_000_000 * 2
        return [beam_window.IntervalWindow(start, start + 2)]

    def get_window_coder(self):
        return beam.coders.coders.IntervalWindowCoder()


def test_a_custom_window_fn(spark):
    def build(ns, p):
        return (
            p
            | ns.beam.Create([("k", 1), ("k", 2), ("k", 3), ("j", 3)])
            | ns.beam.Map(lambda kv: ns.TimestampedValue(kv, kv[1]))
            | ns.beam.WindowInto(EvenSeconds())
            | ns.beam.GroupByKey()
        )

    assert_runners_agree(build)


def test_keys_equal_in_python_but_encoded_differently_are_different_keys(spark):
    def build(ns, p):
        return p | ns.beam.Create([(1, "int"), (1.0, "float"), (1, "int again")]) | ns.beam.GroupByKey()

    assert_runners_agree(build)


def test_nan_signed_zero_and_list_keys_group_by_their_encoding(spark):
    def build(ns, p):
        inf = float("inf")
        keys = [float("nan"), inf - inf, float("nan"), 0.0, -0.0, [1, 2], [1, 2], [1.0, 2], {"a": 1}, {"a": 1}]
        return (
            p
            | ns.beam.Create(list(enumerate(keys)))
            | ns.beam.Map(lambda e: (keys[e[0]], e[0]))
            | ns.beam.GroupByKey()
            | ns.beam.MapTuple(lambda k, vs: (f"{type(k).__name__} {k!r}", sorted(vs)))
        )

    assert_runners_agree(build)


def test_streaming_main_elements_wait_for_their_side_window_in_every_view(spark):
    # sparkbeam's own side-input oracle (tests/transforms/test_side_inputs.py), here written
    # once against apache_beam and run by both runners: each main element waits in the
    # stage until its side window is complete, for every view kind and a grouped side input.
    from tests.transforms.test_side_inputs import every_view_over_a_stream, main_then_side

    assert_runners_agree(every_view_over_a_stream(main_then_side, "fixed"), streaming=True)


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_top_per_key_with_a_key_function_crosses_shuffles_and_steps(spark, streaming):
    """Beam's ``TopCombineFn`` with ``key=`` holds comparables that lose their key function
    when pickled: its accumulators are compacted before they cross the shuffle and before
    they wait in a stream's state for a later step's firing, as Beam's runners compact them
    (Beam's ``top_per_key`` snippet failed its ``extract_output`` without it)."""

    def build(ns, p):
        tv = ns.TimestampedValue
        first = [tv(("spring", "Carrot"), 1), tv(("spring", "Strawberry"), 2), tv(("summer", "Corn"), 3), tv(("fall", "Carrot"), 4)]
        second = [tv(("summer", "Green apple"), 6), tv(("summer", "Carrot"), 7), tv(("fall", "Green apple"), 8)]
        if streaming:
            stamped = p | ns.TestStream().add_elements(first).advance_watermark_to(5).add_elements(second).advance_watermark_to_infinity()
        else:
            stamped = p | ns.beam.Create([(e.value, e.timestamp) for e in first + second]) | ns.beam.MapTuple(lambda kv, t: tv(kv, t))
        shortest = stamped | ns.beam.WindowInto(ns.window.FixedWindows(100)) | ns.beam.combiners.Top.PerKey(2, key=len, reverse=True)
        return shortest | ns.beam.MapTuple(lambda season, names: (season, sorted(names)))

    assert_runners_agree(build, streaming=streaming)
