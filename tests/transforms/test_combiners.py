"""Beam's combiners against Beam: every transform in ``combiners`` as an oracle pair.

Branches of one pipeline are tagged with the transform's name and flattened, so a failure
lists the differing outputs by transform. The CombineFns are also checked alone against
Beam's (no Spark), including partial accumulators merged as the lifted combine does.
"""

from __future__ import annotations

import random

import apache_beam.transforms.combiners as beam_combiners
import pytest

from sparkbeam.transforms import combiners
from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark

NUMS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
WORDS = ["fig", "apple", "kiwi", "banana", "cherries"]
# A hot key with many values next to keys with few, a None key and a None value.
KEYED = [("hot", i) for i in range(300)] + [("a", 5), ("a", 1), ("b", 7), (None, 2), ("c", None)]
NUMERIC_KEYED = [kv for kv in KEYED if kv[1] is not None]
# (key, value, event time in seconds): distinct times per key, across two fixed windows.
STAMPED = [("a", 1, 5.0), ("b", 2, 65.0), ("a", 3, 30.0), ("a", 4, 70.0), ("c", 5, 119.0), ("b", 6, 61.0), ("a", 7, 100.0)]


def tag(ns, name, pcoll):
    return pcoll | f"Tag[{name}]" >> ns.beam.Map(lambda value, name=name: (name, value))


def nan_safe(value):
    # nan != nan, so a mean over nothing would never compare equal.
    return "nan" if value != value else value


def stamped(ns, p, rows=STAMPED, label="Stamped"):
    return (
        p
        | label >> ns.beam.Create(rows)
        | f"{label}Time" >> ns.beam.Map(lambda e: ns.TimestampedValue((e[0], e[1]), e[2]))
    )


# -- the CombineFns alone, against Beam's -------------------------------------------------------


def _combine_in_parts(fn, elements, parts=3):
    """Add each slice to its own accumulator, merge them, extract: as a lifted combine does."""
    accumulators = []
    for index in range(parts):
        accumulator = fn.create_accumulator()
        for element in elements[index::parts]:
            accumulator = fn.add_input(accumulator, element)
        accumulators.append(fn.compact(accumulator))
    return fn.extract_output(fn.merge_accumulators(accumulators))


@pytest.mark.parametrize(
    ("name", "make", "elements"),
    [
        ("count", lambda c: c.CountCombineFn(), [*NUMS, None]),
        ("count-empty", lambda c: c.CountCombineFn(), []),
        ("mean", lambda c: c.MeanCombineFn(), NUMS),
        ("top", lambda c: c.TopCombineFn(3), NUMS * 5),
        ("top-zero", lambda c: c.TopCombineFn(0), NUMS),
        ("top-key", lambda c: c.TopCombineFn(2, key=len), WORDS),
        ("top-reverse", lambda c: c.TopCombineFn(3, reverse=True), NUMS * 5),
        ("top-key-reverse", lambda c: c.TopCombineFn(2, key=len, reverse=True), WORDS),
        ("top-more-than-there-are", lambda c: c.TopCombineFn(50), NUMS),
        ("largest", lambda c: c.Largest(2), NUMS),
        ("smallest", lambda c: c.Smallest(2), NUMS),
        ("to-list", lambda c: c.ToListCombineFn(), NUMS),
        ("to-dict", lambda c: c.ToDictCombineFn(), [("a", 1), ("b", 2), ("c", None)]),
        ("to-set", lambda c: c.ToSetCombineFn(), NUMS),
        ("concat", lambda c: c.ConcatListCombineFn(), [[1, 2], [], [3]]),
        ("tuple", lambda c: c.TupleCombineFn(max, sum, c.CountCombineFn()), [(1, 2, "x"), (5, 1, "y"), (3, 3, "z")]),
        ("single-input-tuple", lambda c: c.SingleInputTupleCombineFn(min, max, c.MeanCombineFn()), NUMS),
        ("latest", lambda c: c.LatestCombineFn(), [("x", 3), ("y", 9), ("z", 1)]),
        ("latest-empty", lambda c: c.LatestCombineFn(), []),
    ],
)
def test_combine_fn_matches_beams(name, make, elements):
    ours, beams = make(combiners), make(beam_combiners)
    # Our Top keeps Beam's order (greatest first), so results compare as lists.
    assert ours.apply(elements) == beams.apply(elements)
    if elements:
        in_parts, whole = _combine_in_parts(ours, elements), beams.apply(elements)
        if name in ("to-list", "concat"):  # a list's order depends on how it was split
            in_parts, whole = sorted(in_parts), sorted(whole)
        assert in_parts == whole


def test_mean_of_nothing_is_nan():
    result = combiners.MeanCombineFn().apply([])
    assert result != result


def test_sample_combine_fn_draws_distinct_inputs_uniformly():
    random.seed(7)
    fn = combiners.SampleCombineFn(3)
    assert sorted(fn.apply(range(3))) == [0, 1, 2]
    assert sorted(_combine_in_parts(fn, list(range(2)))) == [0, 1]
    seen = set()
    for _ in range(200):
        sample = _combine_in_parts(fn, list(range(10)))
        assert len(sample) == len(set(sample)) == 3
        seen.update(sample)
    assert seen == set(range(10))


def test_bad_counts_are_refused():
    for make in (lambda: combiners.Top.Of(-1), lambda: combiners.TopCombineFn("3"), lambda: combiners.Sample.FixedSizeGlobally(-2), lambda: combiners.Sample.Any(-1)):
        with pytest.raises(ValueError, match="n must be a non-negative int"):
            make()


# -- the transforms, against Beam ---------------------------------------------------------------


def test_global_combiners(spark):
    def build(ns, p):
        c = ns.combiners
        nums = p | "Nums" >> ns.beam.Create(NUMS)
        words = p | "Words" >> ns.beam.Create(WORDS)
        with_none = p | "WithNone" >> ns.beam.Create([None, 1, None])
        pairs = p | "Pairs" >> ns.beam.Create([("a", 1), ("b", None)])
        latest = stamped(ns, p) | "Values" >> ns.beam.Map(lambda kv: kv[1])
        branches = [
            tag(ns, "CountNone", with_none | "CountNone" >> c.Count.Globally()),
            tag(ns, "Mean", nums | "Mean" >> c.Mean.Globally()),
            tag(ns, "TopOf", nums | "TopOf" >> c.Top.Of(3)),
            tag(ns, "TopKey", words | "TopKey" >> c.Top.Of(2, key=len)),
            tag(ns, "Largest", nums | "Largest" >> c.Top.Largest(2)),
            tag(ns, "Smallest", words | "Smallest" >> c.Top.Smallest(2, key=len)),
            tag(ns, "SampleAll", nums | "SampleAll" >> c.Sample.FixedSizeGlobally(20)),
            tag(ns, "SampleSome", nums | "SampleSome" >> c.Sample.FixedSizeGlobally(4) | "Shape" >> ns.beam.Map(lambda s: (len(s), set(s) <= set(NUMS)))),
            tag(ns, "Any", nums | "Any" >> c.Sample.Any(20)),
            tag(ns, "ToList", with_none | "ToList" >> c.ToList()),
            tag(ns, "ToDict", pairs | "ToDict" >> c.ToDict()),
            tag(ns, "ToSet", nums | "ToSet" >> c.ToSet()),
            tag(ns, "Latest", latest | "Latest" >> c.Latest.Globally()),
        ]
        return branches | ns.beam.Flatten()

    assert_same_as_beam(build)


def test_global_combiners_on_empty_input(spark):
    def build(ns, p):
        c = ns.combiners
        empty = p | ns.beam.Create([])
        branches = [
            tag(ns, "Count", empty | "Count" >> c.Count.Globally()),
            tag(ns, "CountNoDefault", empty | "CountNoDefault" >> c.Count.Globally().without_defaults()),
            tag(ns, "Mean", empty | "Mean" >> c.Mean.Globally() | "NanSafe" >> ns.beam.Map(nan_safe)),
            # Beam's global Top outputs [] even without defaults.
            tag(ns, "TopOf", empty | "TopOf" >> c.Top.Of(3)),
            tag(ns, "TopNoDefault", empty | "TopNoDefault" >> c.Top.Of(3).without_defaults()),
            tag(ns, "Largest", empty | "Largest" >> c.Top.Largest(2, has_defaults=False)),
            tag(ns, "Sample", empty | "Sample" >> c.Sample.FixedSizeGlobally(3)),
            tag(ns, "Any", empty | "Any" >> c.Sample.Any(3)),
            tag(ns, "ToList", empty | "ToList" >> c.ToList()),
            tag(ns, "ToDict", empty | "ToDict" >> c.ToDict()),
            tag(ns, "ToSet", empty | "ToSet" >> c.ToSet()),
            tag(ns, "Latest", empty | "Latest" >> c.Latest.Globally()),
            tag(ns, "LatestNoDefault", empty | "LatestNoDefault" >> c.Latest.Globally().with_defaults(False)),
        ]
        return branches | ns.beam.Flatten()

    assert_same_as_beam(build)


def test_per_key_combiners_with_a_hot_key_a_none_key_and_none_values(spark):
    def build(ns, p):
        c = ns.combiners
        keyed = p | "Keyed" >> ns.beam.Create(KEYED)
        numeric = p | "Numeric" >> ns.beam.Create(NUMERIC_KEYED)
        one_key = p | "OneKey" >> ns.beam.Create([("only", w) for w in WORDS])
        branches = [
            tag(ns, "CountPerKey", keyed | "CountPerKey" >> c.Count.PerKey()),
            tag(ns, "CountPerElement", p | "Elements" >> ns.beam.Create(["x", None, "y", "x", None, None]) | c.Count.PerElement()),
            tag(ns, "MeanPerKey", numeric | "MeanPerKey" >> c.Mean.PerKey()),
            tag(ns, "TopPerKey", numeric | "TopPerKey" >> c.Top.PerKey(2)),
            tag(ns, "TopPerKeyReverse", numeric | "TopPerKeyReverse" >> c.Top.PerKey(2, key=lambda v: -v, reverse=True)),
            tag(ns, "LargestPerKey", one_key | "LargestPerKey" >> c.Top.LargestPerKey(2, key=len)),
            tag(ns, "SmallestPerKey", numeric | "SmallestPerKey" >> c.Top.SmallestPerKey(3)),
            tag(ns, "SamplePerKey", numeric | "SamplePerKey" >> c.Sample.FixedSizePerKey(3) | "Sizes" >> ns.beam.MapTuple(lambda k, s: (k, len(s), len(set(s))))),
            tag(ns, "SampleOneKeyAll", one_key | "SampleOneKeyAll" >> c.Sample.FixedSizePerKey(10)),
            tag(ns, "LatestPerKey", stamped(ns, p) | "LatestPerKey" >> c.Latest.PerKey()),
        ]
        return branches | ns.beam.Flatten()

    assert_same_as_beam(build)


def test_combiners_in_fixed_windows(spark):
    def build(ns, p):
        c = ns.combiners
        windowed = stamped(ns, p) | ns.beam.WindowInto(ns.window.FixedWindows(60))
        values = windowed | "Values" >> ns.beam.Map(lambda kv: kv[1])
        branches = [
            tag(ns, "Count", values | "Count" >> c.Count.Globally().without_defaults()),
            tag(ns, "TopOf", values | "TopOf" >> c.Top.Of(2).without_defaults()),
            tag(ns, "Any", values | "Any" >> c.Sample.Any(10)),
            tag(ns, "ToDict", windowed | "ToDict" >> c.ToDict().without_defaults()),
            tag(ns, "Latest", values | "Latest" >> c.Latest.Globally().without_defaults()),
            tag(ns, "CountPerKey", windowed | "CountPerKey" >> c.Count.PerKey()),
            tag(ns, "CountPerElement", values | "CountPerElement" >> c.Count.PerElement()),
            tag(ns, "MeanPerKey", windowed | "MeanPerKey" >> c.Mean.PerKey()),
            tag(ns, "TopPerKey", windowed | "TopPerKey" >> c.Top.PerKey(1)),
            tag(ns, "LatestPerKey", windowed | "LatestPerKey" >> c.Latest.PerKey()),
        ]
        return branches | ns.beam.Flatten()

    assert_same_as_beam(build)


def test_combiners_in_sessions(spark):
    def build(ns, p):
        c = ns.combiners
        sessions = stamped(ns, p) | ns.beam.WindowInto(ns.window.Sessions(20))
        branches = [
            tag(ns, "Count", sessions | "Count" >> c.Count.Globally().without_defaults()),
            tag(ns, "CountPerKey", sessions | "CountPerKey" >> c.Count.PerKey()),
            tag(ns, "TopPerKey", sessions | "TopPerKey" >> c.Top.LargestPerKey(1)),
            tag(ns, "LatestPerKey", sessions | "LatestPerKey" >> c.Latest.PerKey()),
        ]
        return branches | ns.beam.Flatten()

    assert_same_as_beam(build)


@pytest.mark.parametrize(
    ("make", "element"),
    [
        (lambda c: c.Count.Globally(), 1),
        (lambda c: c.Mean.Globally(), 1),
        (lambda c: c.Top.Of(2), 1),
        (lambda c: c.Sample.FixedSizeGlobally(2), 1),
        (lambda c: c.ToList(), 1),
        (lambda c: c.ToDict(), ("a", 1)),
        (lambda c: c.ToSet(), 1),
        (lambda c: c.Latest.Globally(), 1),
    ],
    ids=["Count", "Mean", "Top", "Sample", "ToList", "ToDict", "ToSet", "Latest"],
)
def test_a_default_outside_the_global_window_is_refused_as_in_beam(make, element):
    import apache_beam
    from apache_beam.transforms import window as beam_window

    import sparkbeam
    from sparkbeam.transforms import window

    beam_pipeline = apache_beam.Pipeline()
    beam_input = beam_pipeline | apache_beam.Create([element]) | apache_beam.WindowInto(beam_window.FixedWindows(60))
    with pytest.raises(ValueError, match=r"(?i)default"):
        beam_input | make(beam_combiners)
    ours = sparkbeam.Pipeline()
    our_input = ours | sparkbeam.Create([element]) | sparkbeam.WindowInto(window.FixedWindows(60))
    with pytest.raises(ValueError, match="without_defaults"):
        our_input | make(combiners)


def test_combiners_are_reachable_where_beam_has_them():
    import sparkbeam

    assert sparkbeam.combiners is combiners
    assert sparkbeam.transforms.combiners is combiners
    assert set(beam_combiners.__all__) <= set(combiners.__all__)
    assert combiners.Count.PerKey().label == "Count.PerKey"
    assert combiners.Top.Of(3).label == "Top(3)"
