"""Side inputs against Beam: every view, as arguments of ParDo, Map, FlatMap and Filter.

A side input is read per window: a window-matched side input gives the main input's
window the side window that contains its end (for sliding side windows, the earliest
such one, as Beam), and a side input in the global window is seen whole from any window.
"""

from __future__ import annotations

import pytest

import sparkbeam as beam
from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark


def stamped(ns, p, label, rows):
    """(value, event time in seconds) rows as timestamped values."""
    return p | label >> ns.beam.Create(rows) | f"{label}Time" >> ns.beam.Map(lambda e: ns.TimestampedValue(e[0], e[1]))


def test_every_view_in_the_global_window(spark):
    def build(ns, p):
        b, pv = ns.beam, ns.pvalue
        main = p | "Main" >> b.Create([1, 2, 3])
        nums = p | "Nums" >> b.Create([10, 20, None])
        one = p | "One" >> b.Create([100])
        kv = p | "KV" >> b.Create([("a", 1), ("b", 2), ("a", 3)])
        empty = p | "Empty" >> b.Create([])

        class AddSide(b.DoFn):
            def process(self, element, single, listed=None):
                yield ("ParDo", element + single, sorted(v for v in listed if v is not None))

        branches = [
            main | "Singleton" >> b.Map(lambda x, s: ("Singleton", x + s), pv.AsSingleton(one)),
            main | "Default" >> b.Map(lambda x, s: ("Default", x, s), pv.AsSingleton(empty, default_value=-1)),
            main | "DefaultNone" >> b.Map(lambda x, s: ("DefaultNone", x, s), pv.AsSingleton(empty, default_value=None)),
            main | "Iter" >> b.Map(lambda x, s: ("Iter", x, list(s)), pv.AsIter(nums)),
            main | "IterEmpty" >> b.Map(lambda x, s: ("IterEmpty", x, list(s)), pv.AsIter(empty)),
            main | "List" >> b.FlatMap(lambda x, s: [("List", x, v) for v in s], pv.AsList(nums)),
            main | "Dict" >> b.Map(lambda x, d: ("Dict", x, d.get("b"), len(d)), pv.AsDict(kv | "B" >> b.Filter(lambda e: e[0] == "b"))),
            main | "DictEmpty" >> b.Map(lambda x, d: ("DictEmpty", x, dict(d)), pv.AsDict(empty)),
            main | "MultiMap" >> b.Map(lambda x, m: ("MultiMap", x, list(m["a"]), list(m["b"])), pv.AsMultiMap(kv)),
            main | "Filter" >> b.Filter(lambda x, limit: x > limit, pv.AsSingleton(p | "Limit" >> b.Create([1]))),
            main | "ParDo" >> b.ParDo(AddSide(), pv.AsSingleton(one), listed=pv.AsList(nums)),
            main | "Keyword" >> b.Map(lambda x, factor=0: ("Keyword", x * factor), factor=pv.AsSingleton(one)),
            main | "Mixed" >> b.Map(lambda x, k, s, d: ("Mixed", x * k + s + len(d)), 10, pv.AsSingleton(one), d=pv.AsDict(kv)),
            main | "Twice" >> b.Map(lambda x, s, t: ("Twice", x, s + t), pv.AsSingleton(one), pv.AsSingleton(one)),
            main | "OfItself" >> b.Map(lambda x, s: ("OfItself", x, list(s)), pv.AsList(main)),
            main | "Combined" >> b.Map(lambda x, s: ("Combined", x, s), pv.AsSingleton(main | b.CombineGlobally(sum))),
            main | "Chain" >> b.Map(lambda x, s: x * s, pv.AsSingleton(one)) | "Then" >> b.Map(lambda x, s: ("Chain", x, list(s)), pv.AsList(main)),
        ]
        return branches | b.Flatten()

    assert_same_as_beam(build)


def test_windowed_side_inputs_are_matched_to_the_main_window(spark):
    def build(ns, p):
        b, pv, w = ns.beam, ns.pvalue, ns.window
        main = stamped(ns, p, "Main", [(1, 5), (2, 65), (3, 125), (4, 130), (5, 300)]) | "MainWindows" >> b.WindowInto(w.FixedWindows(60))
        side = stamped(ns, p, "Side", [(10, 1), (20, 70), (30, 80)]) | "SideWindows" >> b.WindowInto(w.FixedWindows(60))
        wide = stamped(ns, p, "Wide", [(100, 1), (200, 130)]) | "WideWindows" >> b.WindowInto(w.FixedWindows(120))
        sliding = stamped(ns, p, "Sliding", [(7, 1), (8, 40), (9, 80)]) | "SlidingWindows" >> b.WindowInto(w.SlidingWindows(60, 30))
        everywhere = stamped(ns, p, "Global", [(-1, 1), (-2, 500)])
        per_window_sum = side | "Sum" >> b.CombineGlobally(sum).without_defaults()
        branches = [
            main | "Fixed" >> b.Map(lambda x, s: ("Fixed", x, list(s)), pv.AsList(side)),
            main | "Wider" >> b.Map(lambda x, s: ("Wider", x, list(s)), pv.AsIter(wide)),
            main | "SlidingSide" >> b.Map(lambda x, s: ("SlidingSide", x, list(s)), pv.AsList(sliding)),
            main | "GlobalSide" >> b.Map(lambda x, s: ("GlobalSide", x, list(s)), pv.AsList(everywhere)),
            main | "SumOrNone" >> b.Map(lambda x, s: ("SumOrNone", x, s), pv.AsSingleton(per_window_sum, default_value=None)),
            main | "Filter" >> b.Filter(lambda x, s: x * 10 in s, pv.AsList(side)),
            main | "DictPerWindow" >> b.Map(lambda x, d: ("DictPerWindow", x, dict(d)), pv.AsDict(side | "Pair" >> b.Map(lambda v: (v, v // 10)))),
        ]
        return branches | b.Flatten()

    assert_same_as_beam(build)


def test_main_inputs_in_other_windows_read_fixed_windowed_side_inputs(spark):
    def build(ns, p):
        b, pv, w = ns.beam, ns.pvalue, ns.window
        side = stamped(ns, p, "Side", [(10, 1), (20, 40), (30, 80)]) | "SideWindows" >> b.WindowInto(w.FixedWindows(60))
        sliding_main = stamped(ns, p, "Sliding", [(1, 5), (2, 65)]) | "SlidingWindows" >> b.WindowInto(w.SlidingWindows(60, 30))
        # The global window ends far beyond any fixed window of the side input: it sees none.
        global_main = stamped(ns, p, "Global", [(3, 5)])
        branches = [
            sliding_main | "FromSliding" >> b.Map(lambda x, s: ("FromSliding", x, list(s)), pv.AsList(side)),
            global_main
            | "FromGlobal" >> b.Map(lambda x, s: ("FromGlobal", x, list(s)), pv.AsList(side))
            | "Rewindow" >> b.WindowInto(w.SlidingWindows(60, 30)),
        ]
        return branches | b.Flatten()

    assert_same_as_beam(build)


def test_a_singleton_with_several_values_names_the_side_input_the_transform_and_the_element(spark):
    p = beam.Pipeline()
    side = p | "Three" >> beam.Create([1, 2, 3])
    p | "Main" >> beam.Create(["elem"]) | "UseSide" >> beam.Map(lambda x, s: s, beam.pvalue.AsSingleton(side))
    with pytest.raises(ValueError, match=r"AsSingleton\(Three\) needs exactly one element per window, found 3") as error:
        p.run()
    notes = " ".join(getattr(error.value, "__notes__", []))
    assert "in transform 'UseSide'" in notes
    assert "test_side_inputs.py:" in notes
    assert "while processing 'elem'" in notes


def test_a_session_windowed_side_input_is_refused(spark):
    p = beam.Pipeline()
    side = p | "Side" >> beam.Create([1]) | "Sessions" >> beam.WindowInto(beam.window.Sessions(10))
    main = p | "Main" >> beam.Create(["elem"]) | "Fixed" >> beam.WindowInto(beam.window.FixedWindows(10))
    main | "UseSide" >> beam.Map(lambda x, s: s, beam.pvalue.AsList(side))
    with pytest.raises(ValueError, match=r"Sessions.*cannot be side inputs") as error:
        p.run()
    assert "in transform 'UseSide'" in " ".join(getattr(error.value, "__notes__", []))


def test_an_empty_singleton_without_default_is_an_error(spark):
    p = beam.Pipeline()
    empty = p | "Empty" >> beam.Create([])
    beam.capture(p | "Main" >> beam.Create(["elem"]) | "UseSide" >> beam.Map(lambda x, s: s, beam.pvalue.AsSingleton(empty)))
    try:
        p.run()
    except ValueError as error:
        assert "AsSingleton(Empty)" in str(error)
        return
    raise AssertionError("an empty AsSingleton without default_value gave a value")


def test_a_multimap_gives_no_values_for_a_missing_key(spark):
    def build(ns, p):
        kv = p | "KV" >> ns.beam.Create([("a", 1)])
        return p | "Main" >> ns.beam.Create([0]) | ns.beam.Map(lambda x, m: list(m["zz"]), ns.pvalue.AsMultiMap(kv))

    assert_same_as_beam(build)
