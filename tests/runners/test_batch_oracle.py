"""Batch oracle pairs: every primitive, and every window fn x timestamp combiner, against Beam.

The tests taking ``spark_session_kind`` run twice: on the classic session, and through
Spark Connect (tests/conftest.py).
"""

from __future__ import annotations

import pytest

from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark

SCORES = [("a", 1, 5.0), ("b", 2, 65.5), ("a", 3, 30.0), ("a", 4, 70.0), ("c", 5, 119.0), ("b", 6, 61.0), ("a", 7, 200.0)]


def timestamped(ns, p):
    return (
        p
        | "Create" >> ns.beam.Create(SCORES)
        | "Stamp" >> ns.beam.Map(lambda e: ns.TimestampedValue((e[0], e[1]), e[2]))
    )


def test_create_map_flatmap_filter(spark_session_kind):
    def build(ns, p):
        return (
            p
            | ns.beam.Create(["a b", "c", "", "d e f"])
            | ns.beam.FlatMap(str.split)
            | ns.beam.Map(str.upper)
            | ns.beam.Filter(lambda w: w != "C")
        )

    assert_same_as_beam(build, **spark_session_kind)


def test_maptuple_flatmaptuple_extra_arguments(spark):
    def build(ns, p):
        return (
            p
            | ns.beam.Create([(1, 2), (3, 4)])
            | ns.beam.MapTuple(lambda a, b, k=1: (a + b) * k, 10)
            | ns.beam.FlatMap(lambda x, *, times: [x] * times, times=2)
        )

    assert_same_as_beam(build)


def test_pardo_with_lifecycle_params_and_tagged_outputs(spark_session_kind):
    def build(ns, p):
        beam = ns.beam

        class Split(beam.DoFn):
            def setup(self):
                self.prefix = "n"

            def process(self, element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
                if element % 2:
                    yield beam.pvalue.TaggedOutput("odd", (self.prefix, element, float(timestamp) > 0))
                else:
                    yield ns.TimestampedValue(element * 10, element)

        even, odd = p | beam.Create([1, 2, 3, 4]) | beam.ParDo(Split()).with_outputs("odd", main="even")
        return (even, odd | "Wrap" >> beam.Map(lambda t: t[1])) | beam.Flatten()

    assert_same_as_beam(build, **spark_session_kind)


def test_group_by_key_in_global_window(spark):
    def build(ns, p):
        return p | ns.beam.Create([("a", 1), ("b", 2), ("a", 3)]) | ns.beam.GroupByKey()

    assert_same_as_beam(build)


def test_combine_per_key_and_combine_values(spark_session_kind):
    def build(ns, p):
        grouped = p | ns.beam.Create([("a", 1), ("b", 2), ("a", 3)])
        summed = grouped | "Sum" >> ns.beam.CombinePerKey(sum)
        maxed = grouped | "Group" >> ns.beam.GroupByKey() | "Max" >> ns.beam.CombineValues(max)
        return (summed, maxed) | ns.beam.Flatten()

    assert_same_as_beam(build, **spark_session_kind)


def test_combine_globally_with_and_without_defaults(spark_session_kind):
    def build(ns, p):
        full = p | "Full" >> ns.beam.Create([1, 2, 3]) | "SumFull" >> ns.beam.CombineGlobally(sum)
        empty = p | "Empty" >> ns.beam.Create([]) | "SumEmpty" >> ns.beam.CombineGlobally(sum)
        bare = p | "Bare" >> ns.beam.Create([]) | "SumBare" >> ns.beam.CombineGlobally(sum).without_defaults()
        return (full, empty, bare) | ns.beam.Flatten()

    assert_same_as_beam(build, **spark_session_kind)


def test_flatten_of_three(spark_session_kind):
    def build(ns, p):
        parts = [p | f"C{i}" >> ns.beam.Create([i, i + 10]) for i in range(3)]
        return parts | ns.beam.Flatten()

    assert_same_as_beam(build, **spark_session_kind)


WINDOW_FNS = {
    "global": lambda w: w.GlobalWindows(),
    "fixed": lambda w: w.FixedWindows(60),
    "sliding": lambda w: w.SlidingWindows(60, 20),
    "sessions": lambda w: w.Sessions(30),
}
COMBINERS = ["OUTPUT_AT_EOW", "OUTPUT_AT_EARLIEST", "OUTPUT_AT_LATEST"]


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("window_fn", sorted(WINDOW_FNS))
@pytest.mark.parametrize("transform", ["GroupByKey", "CombinePerKey"])
def test_window_fn_by_timestamp_combiner(spark, window_fn, combiner, transform):
    def build(ns, p):
        windowed = timestamped(ns, p) | ns.beam.WindowInto(
            WINDOW_FNS[window_fn](ns.window),
            timestamp_combiner=getattr(ns.window.TimestampCombiner, combiner),
        )
        if transform == "GroupByKey":
            return windowed | ns.beam.GroupByKey()
        return windowed | ns.beam.CombinePerKey(sum)

    # Beam no longer applies the overlapping-window rule, so parity needs it off.
    assert_same_as_beam(build, overlapping_window_rule=False)


def test_window_into_then_map_sees_windows(spark):
    def build(ns, p):
        return (
            timestamped(ns, p)
            | ns.beam.WindowInto(ns.window.SlidingWindows(60, 30))
            | ns.beam.Map(lambda kv, w=ns.beam.DoFn.WindowParam: (kv[0], float(w.start)))
        )

    assert_same_as_beam(build)


def test_side_inputs_as_list_and_singleton(spark_session_kind):
    def build(ns, p):
        words = p | "Words" >> ns.beam.Create(["a", "bb", "ccc"])
        total = p | "Numbers" >> ns.beam.Create([1, 2, 3]) | ns.beam.CombineGlobally(sum)
        return words | ns.beam.Map(
            lambda w, seen, n: (w, sorted(seen), n),
            seen=ns.beam.pvalue.AsList(words),
            n=ns.beam.pvalue.AsSingleton(total),
        )

    assert_same_as_beam(build, **spark_session_kind)


def test_impulse(spark_session_kind):
    def build(ns, p):
        return p | ns.beam.Impulse() | ns.beam.Map(lambda b: (b, len(b)))

    assert_same_as_beam(build, **spark_session_kind)


def test_read_from_text_with_glob_and_header(spark_session_kind, tmp_path):
    for index in range(3):
        (tmp_path / f"part-{index}.txt").write_text("header\n" + "".join(f"line {index}.{n}\n" for n in range(4)))
    (tmp_path / "other.csv").write_text("not matched\n")
    pattern = str(tmp_path / "part-*.txt")

    def build(ns, p):
        return p | ns.beam.io.ReadFromText(pattern, skip_header_lines=1)

    assert len(assert_same_as_beam(build, **spark_session_kind)) == 12


def test_write_to_text_matches_beam_shard_names_and_contents(spark_session_kind, tmp_path):
    import apache_beam

    import sparkbeam
    from sparkbeam.options.pipeline_options import PipelineOptions

    rows = [f"row {n}" for n in range(20)]
    for name, beam in (("beam", apache_beam), ("ours", sparkbeam)):
        pipeline = apache_beam.Pipeline(runner="FnApiRunner") if beam is apache_beam else sparkbeam.Pipeline(options=PipelineOptions(**spark_session_kind))
        with pipeline as p:
            p | beam.Create(rows) | beam.io.WriteToText(
                str(tmp_path / name / "out"), file_name_suffix=".txt", num_shards=3, header="h", footer="f"
            )
    names = {name: sorted(path.name for path in (tmp_path / name).iterdir()) for name in ("beam", "ours")}
    assert names["ours"] == names["beam"] == [f"out-0000{i}-of-00003.txt" for i in range(3)]

    def lines(name):
        return sorted(line for path in (tmp_path / name).iterdir() for line in path.read_text().splitlines())

    assert lines("ours") == lines("beam")
    assert not [p for p in (tmp_path / "ours").iterdir() if p.name.startswith(".")]  # no temp left


def test_a_lifted_combine_fn_is_set_up_on_the_executors(spark):
    def build(ns, p):
        class NeedsSetup(ns.beam.CombineFn):
            def setup(self):
                self.offset = 100

            def create_accumulator(self):
                return 0

            def add_input(self, accumulator, x):
                return accumulator + x + self.offset

            def merge_accumulators(self, accumulators):
                return sum(accumulators)

            def extract_output(self, accumulator):
                return accumulator

        return p | ns.beam.Create([("a", 1), ("a", 2), ("b", 5)]) | ns.beam.CombinePerKey(NeedsSetup())

    assert_same_as_beam(build)


# ---------------------------------------------------------------------------- re-stamped outputs
#
# A DoFn that outputs a TimestampedValue gets the output windowed again by its input
# PCollection's window fn, from the new timestamp, with an unknown pane (Beam Python's
# ``_maybe_propagate_windowing_info``).


def reify_window(ns):
    """Beam's ``Reify.Window()`` with plain values: Beam's own fails to size its output
    after a grouping on the FnApiRunner ("'Timestamp' object is not iterable")."""
    beam = ns.beam

    def reify(element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
        # Milliseconds, as Beam's runner keeps time.
        yield ns.TimestampedValue((element, timestamp.micros // 1000, (float(window.start), float(window.end))), timestamp)

    return "Reify" >> beam.FlatMap(reify)


def test_reify_window_after_a_sessions_grouping_is_windowed_again(spark_session_kind):
    def build(ns, p):
        return (
            timestamped(ns, p)
            | ns.beam.WindowInto(ns.window.Sessions(10))
            | ns.beam.GroupByKey()
            # The pane is stamped at its session's end: re-windowed, it starts a session there.
            | reify_window(ns)
        )

    assert_same_as_beam(build, **spark_session_kind)


def test_a_restamp_in_fixed_windows_moves_the_element_to_its_new_window(spark):
    def build(ns, p):
        return (
            timestamped(ns, p)
            | ns.beam.WindowInto(ns.window.FixedWindows(60))
            | "Later" >> ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam: ns.TimestampedValue(kv, t + 45))
            | ns.beam.GroupByKey()
        )

    assert_same_as_beam(build)


def test_a_restamp_in_sliding_windows_is_assigned_per_input_window(spark):
    def build(ns, p):
        return (
            timestamped(ns, p)
            | ns.beam.WindowInto(ns.window.SlidingWindows(60, 20))
            # Each input element is in three windows: each output is assigned three times over.
            | "Later" >> ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam: ns.TimestampedValue(kv, t + 25))
            | ns.beam.CombinePerKey(sum)
        )

    assert_same_as_beam(build)


def test_a_restamp_in_the_global_window_keeps_the_global_window(spark):
    def build(ns, p):
        return (
            p
            | ns.beam.Create([("a", 1), ("b", 2), ("a", 3)])
            | ns.beam.Map(lambda kv: ns.TimestampedValue(kv, kv[1] * 100))
            | ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam, w=ns.beam.DoFn.WindowParam: (kv, float(t), str(w)))
        )

    assert_same_as_beam(build)


def test_a_restamp_uses_a_custom_window_fn_of_the_input(spark):
    def build(ns, p):
        window = ns.window

        class Decades(window.NonMergingWindowFn):
            """Windows of ten seconds starting at multiples of ten, written as a user would."""

            def assign(self, context):
                start = int(float(context.timestamp)) // 10 * 10
                return [window.IntervalWindow(start, start + 10)]

            def get_window_coder(self):
                from apache_beam.coders.coders import IntervalWindowCoder

                return IntervalWindowCoder()

        return (
            timestamped(ns, p)
            | ns.beam.WindowInto(Decades())
            | "Later" >> ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam: ns.TimestampedValue(kv, t + 7))
            | ns.beam.GroupByKey()
        )

    assert_same_as_beam(build)
