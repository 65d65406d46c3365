"""Bounded tries (Beam's ``Metrics.bounded_trie``) as the engine keeps them: Beam's sequences
below the bound, a bound that holds however values are added and combined, and a value
that survives the trip a failed attempt's metrics make to the driver."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from apache_beam.metrics import cells as beam_cells

from sparkbeam.metrics.cells import BoundedTrieData
from sparkbeam.metrics.execution import MetricKey, MetricUpdates
from sparkbeam.metrics.metricbase import MetricName
from sparkbeam.runners.spark.attempt_reports import BadReport, report_from_json, updates_to_json


def _sequences(rng: random.Random) -> list[tuple[str, ...]]:
    return [tuple(rng.choice("abc") for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(2, 15))]


@pytest.mark.parametrize("seed", range(40))
def test_below_the_bound_the_sequences_are_beams(seed):
    rng = random.Random(seed)
    ours, beams = BoundedTrieData(), beam_cells.BoundedTrieData()
    for sequence in _sequences(rng):
        ours = ours.add(sequence)
        beams.add(sequence)
    assert ours.get_result() == beams.get_result()
    assert ours.size() == beams.size()
    if beams._singleton is None:  # Beam's one-sequence form matches only itself, not its prefixes
        for probe in itertools.product("abc", repeat=2):
            assert ours.contains(probe) == beams.contains(probe), probe


@pytest.mark.parametrize("seed", range(40))
def test_past_the_bound_prefixes_are_truncated_and_nothing_added_is_lost(seed):
    rng = random.Random(seed)
    bound = rng.randint(1, 6)
    sequences = _sequences(rng)
    whole = BoundedTrieData(bound=bound)
    for sequence in sequences:
        whole = whole.add(sequence)
    half = len(sequences) // 2
    left, right = BoundedTrieData(bound=bound), BoundedTrieData(bound=bound)
    for sequence in sequences[:half]:
        left = left.add(sequence)
    for sequence in sequences[half:]:
        right = right.add(sequence)
    combined = left.combine(right)
    assert combined == right.combine(left)
    for trie in (whole, combined):
        assert trie.size() <= bound
        assert all(trie.contains(sequence) for sequence in sequences)


def test_a_combination_keeps_the_smaller_bound():
    small = BoundedTrieData(bound=1).add(("a",))
    large = BoundedTrieData().add(("b",))
    assert small.combine(large) == BoundedTrieData(frozenset({(True,)}), 1)


def test_a_failed_attempts_bounded_trie_reaches_the_driver_whole():
    trie = BoundedTrieData(bound=2).add(("a", "b")).add(("a", "c")).add(("d",))
    updates = MetricUpdates(bounded_tries={MetricKey("step", MetricName("ns", "trie")): trie})
    assert report_from_json(updates_to_json(updates)) == updates


@pytest.mark.parametrize(
    "data",
    [[0, []], [2, [["a"]]], [2, [[1, False]]], [2, "a"], [2, [[]]], [True, []]],
)
def test_a_report_with_what_is_not_a_bounded_trie_is_refused(data):
    body = json.dumps([["bounded_tries", "step", "ns", "trie", data]]).encode()
    with pytest.raises(BadReport):
        report_from_json(body)
