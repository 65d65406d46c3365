"""A partition's ordered index of its buckets' timers and holds (``runners/core/state/timer_index.py``):
a step finds the due buckets and the partition's earliest hold without reading every
header, and computes what a fold of every header computes."""

from __future__ import annotations

import pickle
import random

import attrs
import pytest

from sparkbeam.runners.core.grouping.grouping_step import GroupingRun
from sparkbeam.runners.core.grouping.records import Pane, StateBucket, StateIndex, Summary
from sparkbeam.runners.core.lowering.step_values import StepParams, nothing_due
from sparkbeam.runners.core.state import timer_index
from sparkbeam.runners.core.state.keyed_buckets import BucketedPartition
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import IntervalWindow
from tests.core.test_keyed_buckets import _engine

S = 1_000_000


def _params(step: int, old: int, new: int, now: int = 0) -> StepParams:
    return StepParams(step=step, old_input_watermark=old, new_input_watermark=new, output_watermark=old, now=now, batch=False)


def _step(records, params):
    """One step: the state records handed on (pickled and back, as Spark's cache does),
    sorted panes, the summary and the partition."""
    partition = BucketedPartition(pickle.dumps, pickle.loads)
    partition.read(records)
    run = GroupingRun(_engine(), params)
    report = partition.run(params, run.run_keys)
    out = list(run.finish(report))
    panes = sorted(record.element.value for _, record in out if type(record) is Pane)
    (summary,) = [record.summary for _, record in out if type(record) is Summary]
    state = pickle.loads(pickle.dumps(list(partition.records())))
    return state, panes, summary, partition


def _summary_fields(summary):
    return (
        summary.earliest_hold,
        summary.hold_key,
        summary.hold_window,
        summary.next_event_timer,
        summary.next_processing_timer,
        summary.state_keys,
        summary.state_windows,
    )


@pytest.mark.parametrize("few", [0.0, 1e9], ids=["sorted-again", "entry-by-entry"])
def test_a_carried_index_gives_what_the_headers_give_through_splits_timers_and_merges(monkeypatch, few):
    monkeypatch.setattr(timer_index, "_FEW", few)  # both ways of updating the sorted lists
    rng = random.Random(27)
    # Windows ending one after the other: each step's watermark closes some of them.
    windows = [IntervalWindow(0, end * 10) for end in range(1, 9)]
    indexed: list = []
    derived: list = []
    for step in range(1, 10):
        keys = rng.sample(range(4_000), 1_500 if step == 1 else 150)
        new = [(f"k{key}", WindowedValue(1, step * S, (rng.choice(windows),))) for key in keys]
        params = _params(step, (step - 1) * 10 * S, step * 10 * S)
        indexed, panes, summary, partition = _step(indexed + new, params)
        # The same buckets without their index: every header read, as before the index.
        derived, derived_panes, derived_summary, again = _step([pair for pair in derived if type(pair[1]) is not StateIndex] + new, params)
        assert again.derived == 1 and (step == 1 or partition.derived == 0)
        assert panes == derived_panes
        assert _summary_fields(summary) == _summary_fields(derived_summary)
        buckets = [record for _, record in indexed if type(record) is StateBucket]
        held = [bucket.earliest_hold for bucket in buckets if bucket.earliest_hold is not None]
        assert summary.earliest_hold == (min(held) if held else None)
        timers = [bucket.next_event_timer for bucket in buckets if bucket.next_event_timer is not None]
        assert summary.next_event_timer == (min(timers) if timers else None)
        assert summary.state_keys == sum(bucket.state_keys for bucket in buckets)
        (index,) = [record for _, record in indexed if type(record) is StateIndex]
        assert index == timer_index.build(buckets)
    assert summary.state_keys == 0  # every window closed: the empty buckets merged back
    assert len([record for _, record in indexed if type(record) is StateBucket]) == 1


def test_a_step_with_nothing_due_reads_no_header_and_hands_the_index_on(monkeypatch):
    early, late = IntervalWindow(0, 10), IntervalWindow(0, 1000)
    records = [(f"k{i}", WindowedValue(1, 1 * S, (late,))) for i in range(3_000)]
    records.append(("early", WindowedValue(1, 1 * S, (early,))))
    state, _, _, _ = _step(records, _params(1, 0, 1 * S))
    (index,) = [record for _, record in state if type(record) is StateIndex]

    def no_scan(buckets):
        raise AssertionError("the headers were read again")

    monkeypatch.setattr(timer_index, "build", no_scan)
    # The watermark moves short of every timer: no bucket read, the same index handed on.
    carried, panes, summary, partition = _step(state, _params(2, 1 * S, 5 * S))
    assert panes == [] and partition.touched == 0 and summary.state_keys == 3_001
    (again,) = [record for _, record in carried if type(record) is StateIndex]
    assert again == index
    # Then it reaches the early window's end: the one bucket holding it, one key run.
    _, panes, summary, partition = _step(carried, _params(3, 5 * S, 10 * S))
    assert panes == [("early", 1)] and partition.touched == 1 and partition.keys_run == 1
    assert summary.state_keys == 3_000 and summary.next_event_timer == 1000 * S


def test_an_index_that_does_not_describe_its_buckets_is_derived_again():
    records = [(f"k{i}", WindowedValue(1, 1 * S, (IntervalWindow(0, 100),))) for i in range(2_000)]
    first, _, _, _ = _step(records, _params(1, 0, 1 * S))
    second, _, _, _ = _step(first + [(f"n{i}", WindowedValue(1, 2 * S, (IntervalWindow(0, 50),))) for i in range(2_000)], _params(2, 1 * S, 2 * S))
    (stale,) = [pair for pair in first if type(pair[1]) is StateIndex]
    mixed = [pair for pair in second if type(pair[1]) is not StateIndex] + [stale]
    _, panes, summary, partition = _step(mixed, _params(3, 2 * S, 50 * S))
    assert partition.derived == 1
    assert len(panes) == 2_000 and summary.state_keys == 2_000 and summary.next_event_timer == 100 * S


def test_the_due_buckets_are_those_nothing_due_says_are_due():
    rng = random.Random(3)

    def header(depth, prefix):
        keys = rng.choice([0, 0, 3])
        event = rng.choice([None, rng.randrange(100)]) if keys else None
        processing = rng.choice([None, None, rng.randrange(100)])
        hold = rng.choice([None, rng.randrange(100)])
        return StateBucket(depth, prefix, 1, hold, "k" if hold is not None else None, "w" if hold is not None else None, event, processing, keys, keys, b"", 0)

    for _ in range(200):
        depth = rng.randrange(0, 6)
        buckets = [header(depth, prefix) for prefix in range(1 << depth)]
        index = timer_index.build(buckets)
        old = rng.randrange(100)
        params = _params(1, old, old + rng.choice([0, 0, rng.randrange(50)]), now=rng.randrange(100))
        expected = {timer_index.node(bucket) for bucket in buckets if not nothing_due(bucket, params, has_state=True, side_inputs=False)}
        assert timer_index.due(index, params) == expected


def test_a_partition_without_its_index_and_with_empty_siblings_has_them_merged_and_steps():
    records = [(f"k{i}", WindowedValue(1, 1 * S, (IntervalWindow(0, 100),))) for i in range(2_000)]
    state, _, _, _ = _step(records, _params(1, 0, 1 * S))
    buckets = [record for _, record in state if type(record) is StateBucket]
    # Two siblings emptied, as a checkpoint of an older step might hold them, and no index.
    first = buckets[0]
    other = next(b for b in buckets if b.depth == first.depth and b.prefix == first.prefix ^ (1 << (first.depth - 1)))
    emptied = {(first.depth, first.prefix), (other.depth, other.prefix)}
    restored = [
        attrs.evolve(b, state_keys=0, state_windows=0, payload=b"", earliest_hold=None, hold_key=None, hold_window=None, next_event_timer=None)
        if (b.depth, b.prefix) in emptied
        else b
        for b in buckets
    ]
    lost = first.state_keys + other.state_keys
    new = [(f"n{i}", WindowedValue(1, 2 * S, (IntervalWindow(0, 100),))) for i in range(50)]
    after, _, summary, partition = _step([(None, b) for b in restored] + new, _params(2, 1 * S, 2 * S))
    assert partition.derived == 1
    assert summary.state_keys == 2_000 - lost + 50
    assert len([record for _, record in after if type(record) is StateBucket]) <= len(buckets) - 1  # the pair merged
