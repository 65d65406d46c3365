"""Side inputs to CombineFns against Beam: CombinePerKey, CombineGlobally and CombineValues
pass their extra arguments, side inputs of every view read in the combined window, to
each method of the CombineFn (and to a callable's extra parameters)."""

from __future__ import annotations

import collections

import pytest

import sparkbeam as beam
from sparkbeam.errors import PipelineConstructionError
from tests.oracle import assert_same_as_beam, run_sparkbeam

pytestmark = pytest.mark.spark


def cap_sum(ns):
    """Sums values capped at a side input; every method sees the cap (and a fixed offset)."""

    class CapSum(ns.beam.CombineFn):
        def create_accumulator(self, cap, offset=0):
            return offset

        def add_input(self, accumulator, value, cap, offset=0):
            return accumulator + min(value, cap)

        def merge_accumulators(self, accumulators, cap, offset=0):
            return sum(accumulators) - offset * (len(accumulators) - 1)

        def extract_output(self, accumulator, cap, offset=0):
            return (accumulator, cap, offset)

    return CapSum()


def stamped(ns, p, label, rows):
    return p | label >> ns.beam.Create(rows) | f"{label}Time" >> ns.beam.Map(lambda e: ns.TimestampedValue(e[0], e[1]))


def test_combine_per_key_with_a_singleton_and_a_fixed_argument(spark):
    def build(ns, p):
        b, pv = ns.beam, ns.pvalue
        cap = p | "Cap" >> b.Create([5])
        pairs = p | "Pairs" >> b.Create([("a", 1), ("a", 9), ("b", 7), ("b", 2), ("c", 3)])
        return pairs | b.CombinePerKey(cap_sum(ns), pv.AsSingleton(cap))

    assert_same_as_beam(build)


def test_callables_take_every_view(spark):
    def build(ns, p):
        b, pv = ns.beam, ns.pvalue
        weights = p | "Weights" >> b.Create([("a", 10), ("b", 100)])
        extra = p | "Extra" >> b.Create([1, 20])
        pairs = p | "Pairs" >> b.Create([("a", 1), ("a", 2), ("b", 3)])

        # A callable is applied to partial results too (Beam's rule): these are associative.
        def capped(values, weights, extra, scale):
            return min(sum(values), len(weights) + len(extra) * scale - 6)

        per_key = pairs | "PerKey" >> b.CombinePerKey(capped, pv.AsDict(weights), pv.AsList(extra), scale=3)
        overall = (
            pairs
            | "Values" >> b.Map(lambda kv: kv[1])
            | "Globally" >> b.CombineGlobally(lambda vs, extra: max([*vs, *extra]), extra=pv.AsIter(extra))
        )
        grouped = pairs | "Group" >> b.GroupByKey() | "CombineValues" >> b.CombineValues(
            lambda vs, n: min([*vs, n]), pv.AsSingleton(p | "N" >> b.Create([2]))
        )
        return (
            (per_key | "TagKey" >> b.Map(lambda kv: ("per_key", kv)),
             overall | "TagAll" >> b.Map(lambda v: ("globally", v)),
             grouped | "TagValues" >> b.Map(lambda kv: ("values", kv)))
            | b.Flatten()
        )

    assert_same_as_beam(build)


def test_side_inputs_are_read_in_each_window(spark):
    def build(ns, p):
        b, w, pv = ns.beam, ns.window, ns.pvalue
        caps = stamped(ns, p, "Caps", [(4, 1), (6, 12)]) | "CapWindows" >> b.WindowInto(w.FixedWindows(10))
        pairs = (
            stamped(ns, p, "Pairs", [(("a", 5), 2), (("a", 3), 3), (("a", 9), 15), (("b", 5), 16)])
            | "PairWindows" >> b.WindowInto(w.FixedWindows(10))
        )
        per_key = pairs | "PerKey" >> b.CombinePerKey(cap_sum(ns), pv.AsSingleton(caps), offset=100)
        overall = (
            pairs
            | b.Map(lambda kv: kv[1])
            | "Globally" >> b.CombineGlobally(cap_sum(ns), pv.AsSingleton(caps)).without_defaults()
        )
        return (per_key, overall) | b.Flatten()

    assert_same_as_beam(build)


def test_a_stream_waits_for_the_side_input_of_its_window(spark):
    def build(ns, p):
        b, w, pv = ns.beam, ns.window, ns.pvalue
        main = (
            ns.TestStream()
            .add_elements([ns.TimestampedValue(("a", 5), 1), ns.TimestampedValue(("b", 8), 2)])
            .advance_watermark_to(12)
            .add_elements([ns.TimestampedValue(("a", 9), 13)])
            .advance_watermark_to_infinity()
        )
        side = (
            ns.TestStream()
            .add_elements([ns.TimestampedValue(6, 0)])
            .advance_watermark_to(11)
            .add_elements([ns.TimestampedValue(7, 10)])
            .advance_watermark_to_infinity()
        )
        caps = p | "Side" >> side | "SideWindows" >> b.WindowInto(w.FixedWindows(10))
        return (
            p
            | "Main" >> main
            | "MainWindows" >> b.WindowInto(w.FixedWindows(10))
            | b.CombinePerKey(cap_sum(ns), pv.AsSingleton(caps))
        )

    # Beam's streaming DirectRunner outputs nothing for a combine with side inputs (its
    # LiftedCombinePerKey); the expected panes are written out instead.
    window = lambda start: (start * 1000, start * 1000 + 10000)  # noqa: E731 (ms)
    assert run_sparkbeam(build, streaming=True) == collections.Counter({
        (("a", (5, 6, 0)), 9999, window(0), (True, False, "ON_TIME", 0, 0)): 1,
        (("b", (6, 6, 0)), 9999, window(0), (True, False, "ON_TIME", 0, 0)): 1,
        (("a", (7, 7, 0)), 19999, window(10), (True, False, "ON_TIME", 0, 0)): 1,
    })


def test_what_cannot_take_side_inputs_says_so():
    p = beam.Pipeline()
    cap = beam.pvalue.AsSingleton(p | "Cap" >> beam.Create([5]))
    with pytest.raises(NotImplementedError, match=r"CombinePerKey\(sum\)\.with_hot_key_fanout: a CombineFn with side inputs"):
        beam.CombinePerKey(sum, cap).with_hot_key_fanout(2)
    values = p | "Values" >> beam.Create([1, 2])
    with pytest.raises(PipelineConstructionError, match=r"View: as_singleton_view\(\).*add \.without_defaults\(\)"):
        _ = values | "View" >> beam.CombineGlobally(lambda vs, cap: sum(vs), cap).as_singleton_view()
