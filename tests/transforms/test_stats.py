"""ApproximateQuantiles and ApproximateUnique: Beam's results where Beam's are deterministic
(exactly), and the algorithms' guarantees where they are not."""

from __future__ import annotations

import random

import pytest

import sparkbeam as beam
from sparkbeam.transforms.stats import (
    ApproximateQuantiles,
    ApproximateQuantilesCombineFn,
    ApproximateUnique,
    ApproximateUniqueCombineFn,
)
from tests.oracle import assert_same_as_beam


def beam_stats():
    from apache_beam.transforms import stats

    return stats


def combine(fn, inputs, parts=1):
    """Combine ``inputs`` in ``parts`` accumulators, merged at the end (as a runner does)."""
    chunks = [inputs[i::parts] for i in range(parts)]
    accumulators = []
    for chunk in chunks:
        accumulator = fn.create_accumulator()
        for element in chunk:
            accumulator = fn.add_input(accumulator, element)
        accumulators.append(accumulator)
    return fn.extract_output(fn.merge_accumulators(accumulators))


QUANTILE_CASES = [
    {"num_quantiles": 5},
    {"num_quantiles": 2},
    {"num_quantiles": 4, "reverse": True},
    {"num_quantiles": 7, "key": abs},
    {"num_quantiles": 3, "key": abs, "reverse": True},
    {"num_quantiles": 5, "weighted": True},
    {"num_quantiles": 4, "weighted": True, "key": abs, "reverse": True},
]


def quantile_inputs(rng, options, size):
    values = [rng.randrange(-50, 50) for _ in range(size)]
    if options.get("weighted"):
        return [(v, rng.choice([1, 2, 0.5, 3])) for v in values]
    return values


@pytest.mark.parametrize("options", QUANTILE_CASES, ids=str)
def test_quantiles_equal_beams_while_exact(options):
    rng = random.Random(repr(options))
    for size in (0, 1, 2, 3, 5, 17, 100, 500, 800):
        inputs = quantile_inputs(rng, options, size)
        ours = ApproximateQuantilesCombineFn.create(**options)
        theirs = beam_stats().ApproximateQuantilesCombineFn.create(**options)
        for parts in (1, 3):
            assert combine(ours, inputs, parts) == combine(theirs, inputs, parts), (size, parts)
        if "key" not in options:  # exact, and without ties between keys: the split does not matter
            assert combine(ours, inputs, 3) == combine(ours, inputs, 1)


@pytest.mark.parametrize("options", [{"num_quantiles": 5}, {"num_quantiles": 11, "weighted": True}], ids=str)
def test_quantiles_equal_beams_when_combined_in_the_same_order_beyond_the_buffers(options):
    rng = random.Random(5)
    inputs = quantile_inputs(rng, options, 30_000)
    ours = ApproximateQuantilesCombineFn.create(**options)
    theirs = beam_stats().ApproximateQuantilesCombineFn.create(**options)
    assert combine(ours, inputs, 4) == combine(theirs, inputs, 4)


def test_batched_input_gives_what_unbatched_input_gives():
    rng = random.Random(8)
    values = [rng.random() for _ in range(600)]
    weights = [rng.choice([1, 2, 3]) for _ in values]
    plain = ApproximateQuantilesCombineFn.create(5)
    batched = ApproximateQuantilesCombineFn.create(5, input_batched=True)
    assert combine(batched, [values[i : i + 50] for i in range(0, 600, 50)]) == combine(plain, values)
    weighted = ApproximateQuantilesCombineFn.create(5, weighted=True)
    weighted_batched = ApproximateQuantilesCombineFn.create(5, weighted=True, input_batched=True)
    batches = [(values[i : i + 50], weights[i : i + 50]) for i in range(0, 600, 50)]
    assert combine(weighted_batched, batches) == combine(weighted, list(zip(values, weights)))
    theirs = beam_stats().ApproximateQuantilesCombineFn.create(5, weighted=True, input_batched=True)
    assert combine(weighted_batched, batches) == combine(theirs, batches)


@pytest.mark.parametrize("num_quantiles", [3, 5, 11])
def test_quantile_ranks_are_within_the_error_bound_on_large_input(num_quantiles):
    # MRL98's guarantee with Beam's parameters: |rank - exact rank| < N / num_quantiles.
    rng = random.Random(num_quantiles)
    n = 200_000
    values = list(range(n))
    rng.shuffle(values)
    fn = ApproximateQuantilesCombineFn.create(num_quantiles)
    result = combine(fn, values, parts=7)
    assert len(result) == num_quantiles
    assert result[0] == 0 and result[-1] == n - 1
    for index, value in enumerate(result):
        exact_rank = index * (n - 1) / (num_quantiles - 1)
        assert abs(value - exact_rank) < n / num_quantiles


def test_quantile_parameters_are_checked_at_construction():
    with pytest.raises(ValueError, match="num_quantiles"):
        ApproximateQuantiles.Globally(1)
    with pytest.raises(TypeError, match="key must be a function"):
        ApproximateQuantiles.Globally(3, key="name")


@pytest.mark.parametrize("sample", [16, 100, 1000])
@pytest.mark.parametrize("distinct", [10, 700, 5000])
def test_unique_estimates_equal_beams(sample, distinct):
    rng = random.Random(sample * distinct)
    inputs = [rng.randrange(distinct) for _ in range(distinct * 2)] + [f"s{i}" for i in range(distinct // 3)]
    ours = ApproximateUniqueCombineFn(sample)
    import apache_beam.coders as beam_coders

    theirs = beam_stats().ApproximateUniqueCombineFn(sample, beam_coders.FastPrimitivesCoder())
    expected = combine(theirs, inputs)
    assert combine(ours, inputs, 1) == expected
    assert combine(ours, inputs, 5) == expected  # only the set of elements matters


def test_unique_estimate_is_within_its_error():
    inputs = list(range(50_000))
    estimate = combine(ApproximateUniqueCombineFn(ApproximateUnique.parse_input_params(error=0.05)), inputs, 3)
    assert abs(estimate - 50_000) < 3 * 0.05 * 50_000


def test_unique_parameters_are_beams():
    assert ApproximateUnique.parse_input_params(size=16) == beam_stats().ApproximateUnique.parse_input_params(size=16)
    assert ApproximateUnique.parse_input_params(error=0.03) == beam_stats().ApproximateUnique.parse_input_params(error=0.03)
    for bad in ({"size": 15}, {"error": 0.6}, {"size": 20, "error": 0.1}, {}):
        with pytest.raises(ValueError):
            ApproximateUnique.Globally(**bad)


# -- through pipelines, against Beam -------------------------------------------------------------

SCORES = [(f"k{i % 3}", (i * 37) % 101) for i in range(300)]


def negated(value):
    return -value


def stats_ns(ns):
    from apache_beam.transforms import stats as beam_stats_module

    from sparkbeam.transforms import stats as our_stats

    return beam_stats_module if ns.beam.__name__ == "apache_beam" else our_stats


@pytest.mark.spark
@pytest.mark.parametrize(
    "case",
    ["globally", "per key", "weighted per key", "batched globally", "reverse with key", "windowed per key",
     "unique globally", "unique per key", "top-level names"],
)
def test_approximate_statistics_match_beam_on_spark(spark, case):
    def build(ns, p):
        stats = stats_ns(ns)
        pairs = p | ns.beam.Create(SCORES)
        values = pairs | ns.beam.Values()
        if case == "globally":
            return values | stats.ApproximateQuantiles.Globally(5)
        if case == "per key":
            return pairs | stats.ApproximateQuantiles.PerKey(4)
        if case == "weighted per key":
            return pairs | ns.beam.MapTuple(lambda k, v: (k, (v, 1 + v % 3))) | stats.ApproximateQuantiles.PerKey(5, weighted=True)
        if case == "batched globally":
            return values | ns.beam.combiners.ToList() | stats.ApproximateQuantiles.Globally(3, input_batched=True)
        if case == "reverse with key":
            # A module-level key (Beam pickles the accumulator, key included, with pickle)
            # that ties only equal elements, so the result does not depend on input order.
            return values | stats.ApproximateQuantiles.Globally(6, key=negated, reverse=True)
        if case == "windowed per key":
            return (
                pairs
                | ns.beam.MapTuple(lambda k, v: ns.TimestampedValue((k, v), v))
                | ns.beam.WindowInto(ns.window.FixedWindows(25))
                | stats.ApproximateQuantiles.PerKey(3)
            )
        if case == "unique globally":
            return values | stats.ApproximateUnique.Globally(size=16)
        if case == "unique per key":
            return pairs | stats.ApproximateUnique.PerKey(error=0.5)
        return values | ns.beam.ApproximateQuantiles.Globally(3)

    assert_same_as_beam(build)


def test_the_names_are_where_beam_has_them():
    assert beam.ApproximateQuantiles is ApproximateQuantiles
    assert beam.transforms.stats.ApproximateUnique is ApproximateUnique
    assert beam.ApproximateUnique.Globally(size=16).label == "ApproximateUnique.Globally"
