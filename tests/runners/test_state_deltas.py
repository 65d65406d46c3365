"""Incremental checkpoints of keyed state, without Spark (``runners/spark/state_checkpoints.py``):
what a part file of a base or a delta holds, how a partition's base and deltas make its
state again, and when a checkpoint is a base."""

from __future__ import annotations

import random

import pytest

from sparkbeam.runners.core.grouping.records import KeyedState, StateBucket
from sparkbeam.runners.spark import state_checkpoints
from sparkbeam.runners.spark.state_checkpoints import (
    Chain,
    StateFileError,
    merge_partition,
    needs_base,
)
from tests.core.test_keyed_buckets import S, _bucketed_step, _buckets, _elements, _params


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, amount: int) -> None:
        self.value += amount


def bucket(depth: int, prefix: int, version: int, payload: bytes = b"x") -> StateBucket:
    return StateBucket(depth, prefix, 7, None, None, None, None, None, 1, 1, payload, version)


def part(since, records, index=0):
    counter = Counter()
    return list(state_checkpoints.part_records(since, counter, index, iter(records))), counter.value


def test_a_delta_holds_the_buckets_written_since_the_last_checkpoint_and_a_base_holds_all():
    records = [(None, bucket(1, 0, 3)), (None, bucket(2, 1, 5)), (None, bucket(2, 3, 6))]
    written, size = part(5, records, index=1)
    assert written == [("sparkbeam-state-part", ("delta", 1)), records[1], records[2]]
    assert size == 2 * (1 + 64)
    written, _ = part(None, records)
    assert written == [("sparkbeam-state-part", ("full", 0)), *records]


def test_a_partition_holding_per_key_state_is_written_whole_even_in_a_delta():
    records = [(None, bucket(0, 0, 3)), ("k", KeyedState(1))]
    written, _ = part(5, records)
    assert written == [("sparkbeam-state-part", ("full", 0)), *records]


def test_an_empty_partition_is_written_whole_so_that_state_which_emptied_is_restored_empty():
    written, _ = part(5, [])
    assert written == [("sparkbeam-state-part", ("full", 0))]
    records = [marked(0, "full"), (0, (0, ("k", KeyedState(1)))), marked(1, "full")]
    assert list(merge_partition(4, PATHS[:2], 0, iter(records))) == []


def marked(position: int, kind: str, index: int = 0):
    return index, (position, ("sparkbeam-state-part", (kind, index)))


def layer(position: int, buckets):
    return [(0, (position, (None, b))) for b in buckets]


PATHS = [["base/part-00000"], ["d1/part-00000"], ["d2/part-00000"]]


def merged(records, paths=PATHS):
    return sorted(((b.depth, b.prefix, b.version) for _, b in merge_partition(4, paths, 0, iter(records))), key=lambda x: (x[0], x[1]))


def test_a_delta_replaces_the_buckets_it_splits_and_those_merged_into_it():
    base = [bucket(1, 0, 1), bucket(2, 1, 1), bucket(2, 3, 1)]
    # step 2 splits (1, 0) into (2, 0) and (2, 2); step 3 merges (2, 1) and (2, 3) into (1, 1)
    first = [bucket(2, 0, 2), bucket(2, 2, 2)]
    second = [bucket(1, 1, 3)]
    records = [marked(0, "full"), *layer(0, base), marked(1, "delta"), *layer(1, first), marked(2, "delta"), *layer(2, second)]
    assert merged(records) == [(1, 1, 3), (2, 0, 2), (2, 2, 2)]
    # order of arrival does not matter (a shuffle mixes the files): the positions do
    assert merged(list(reversed(records))) == [(1, 1, 3), (2, 0, 2), (2, 2, 2)]


def test_a_bucket_rewritten_in_place_replaces_its_older_version_and_unchanged_ones_stay():
    base = [bucket(1, 0, 1), bucket(1, 1, 1)]
    records = [marked(0, "full"), *layer(0, base), marked(1, "delta"), *layer(1, [bucket(1, 1, 2)]), marked(2, "delta")]
    assert merged(records) == [(1, 0, 1), (1, 1, 2)]


def test_a_full_part_in_a_delta_replaces_the_partition_whole():
    records = [marked(0, "full"), *layer(0, [bucket(1, 0, 1), bucket(1, 1, 1)]), marked(1, "full"), *layer(1, [bucket(0, 0, 2)])]
    assert merged(records, PATHS[:2]) == [(0, 0, 2)]


def test_a_part_file_without_its_header_is_refused_naming_stage_partition_and_file():
    records = [marked(0, "full"), *layer(0, [bucket(0, 0, 1)]), *layer(1, [bucket(0, 0, 2)])]
    with pytest.raises(StateFileError, match=r"d1/part-00000: the checkpointed state of stage 4, partition 0, is cut short"):
        merged(records, PATHS[:2])


def test_a_part_file_of_another_partition_is_refused():
    records = [marked(0, "full", index=1)]
    with pytest.raises(StateFileError, match=r"base/part-00000: holds the state of partition 1 of stage 4"):
        merged(records, PATHS[:1])


def test_a_checkpoint_is_a_base_when_deltas_outweigh_the_base_or_are_many():
    chain = Chain([(3, "state-1"), (6, "delta-1")], 2, 1000, 100)
    assert not needs_base(chain, 9, 2)
    assert needs_base(None, 9, 2)
    assert needs_base(chain, 9, 4)  # other partitions
    assert needs_base(chain, 6, 2)  # written again at the step of its last file
    assert needs_base(Chain(chain.files, 2, 1000, 501), 9, 2)
    many = [(3, "state-1"), *((step, "delta-1") for step in range(4, 4 + state_checkpoints.MAX_DELTAS))]
    assert needs_base(Chain(many, 2, 1000, 0), 100, 2)  # MAX_DELTAS deltas: the next is a base
    assert not needs_base(Chain(many[:-1], 2, 1000, 0), 100, 2)


def test_a_chain_in_a_manifest_that_is_not_one_sparkbeam_wrote_is_refused_naming_it():
    assert Chain.from_json(Chain([(3, "state-1")], 2, 10, 0).to_json(), "m").files == [(3, "state-1")]
    for content in (None, {"files": []}, {"files": [[3, "../x"]], "partitions": 2, "base_bytes": 1, "delta_bytes": 0}):
        with pytest.raises(StateFileError, match=r"m: a keyed stage's chain"):
            Chain.from_json(content, "m")


def test_base_and_deltas_give_exactly_the_buckets_of_every_step_through_splits_and_merges():
    """Steps over one partition (keys arriving, buckets splitting, a day's windows closing and
    their empty buckets merging), a checkpoint after each: a delta holds only the buckets the
    step wrote, and the base with the deltas applied is exactly the partition's state."""
    rng = random.Random(11)
    keys = [f"k{i}" for i in range(3_000)]
    buckets: list[StateBucket] = []
    state: list = []  # the buckets, then their index (never written: derived when restored)
    files: list[list] = []
    for step in range(1, 7):
        chosen = keys[:200] if step == 1 else rng.sample(keys, 40 if step < 4 else 1_500)
        params = _params(step, (step - 1) * 10 * S, step * 10 * S if step < 6 else 86400 * S)
        before = {id(b) for b in buckets}
        state, _, _, partition = _bucketed_step([(None, b) for b in state] + _elements(chosen, step), params)
        buckets = _buckets(state)
        written, _ = part(None if step == 1 else step, [(None, b) for b in state])
        files.append(written)
        if step > 1:
            # only what the step wrote: the buckets it read (and split) or made by merging
            assert len(written) - 1 == sum(id(b) not in before for b in buckets) <= max(partition.touched, 1) * 64
        records = [(0, (position, record)) for position, written in enumerate(files) for record in written]
        paths = [[f"f{position}"] for position in range(len(files))]
        restored = list(merge_partition(1, paths, 0, iter(records)))
        assert sorted((b.depth, b.prefix, b.version, b.payload) for _, b in restored) == sorted(
            (b.depth, b.prefix, b.version, b.payload) for b in buckets
        )
    assert len(buckets) == 1  # every window closed: the buckets merged back

