"""The read-back of a chain of state files in one Python pass, without Spark
(``state_checkpoints.read_chain``): each task checks its part of a file and keys the pieces
still pickled (``checked_part``); the merge unpickles them (``merge_pieces``) and gives what
the record-by-record path (``opened_part``, then ``merge_partition``) gives."""

from __future__ import annotations

import base64
import os

import pytest

from sparkbeam.runners.spark import sealed_files, state_checkpoints
from sparkbeam.runners.spark.sealing import Sealer, UnauthenticatedFileError
from tests.runners.test_state_deltas import bucket, part

SEALER = Sealer(os.urandom(32), scope="test")
PATHS = [["base/part-00000", "base/part-00001"], ["d1/part-00000", "d1/part-00001"]]


def lines_of(records, monkeypatch, per_piece=3):
    monkeypatch.setattr(sealed_files, "PIECE_RECORDS", per_piece)
    return list(sealed_files.sealed_lines(SEALER, "state", records))


def test_pieces_keyed_unpickled_by_the_merge_give_the_records_merge_partition_gives(monkeypatch):
    base = [(None, bucket(2, prefix, 1, b"base%d" % prefix)) for prefix in range(4)]
    delta = [(None, bucket(3, 1, 4, b"split")), (None, bucket(3, 5, 4, b"split too"))]
    files = {
        (0, 1): lines_of(part(None, base, index=1)[0], monkeypatch),
        (1, 1): lines_of(part(2, delta, index=1)[0], monkeypatch),
    }
    assert len(files[(0, 1)]) == 2  # a marker and 4 buckets, 3 records a piece
    # Each line a task of its own (a file split by Hadoop), tasks in any order: the shuffle's.
    place = [(position, index) for (position, index), lines in files.items() for _ in lines]
    tasks = [line for lines in files.values() for line in lines]
    keyed = [item for task in reversed(range(len(tasks))) for item in state_checkpoints.checked_part(SEALER, 4, PATHS, place, task, [tasks[task]])]
    assert {written_to for written_to, _ in keyed} == {1}
    assert all(type(payload) is bytes for _, (_, payload) in keyed)  # not unpickled yet
    expected = [
        item
        for (position, index), lines in files.items()
        for item in state_checkpoints.opened_part(SEALER, PATHS[position][index], 4, index, position, lines)
    ]
    got = list(state_checkpoints.merge_pieces(4, PATHS, 1, iter(keyed)))
    assert sorted((b.depth, b.prefix, b.payload) for _, b in got) == sorted(
        (b.depth, b.prefix, b.payload) for _, b in state_checkpoints.merge_partition(4, PATHS, 1, iter(expected))
    )
    assert sorted(b.payload for _, b in got) == [b"base0", b"base2", b"base3", b"split", b"split too"]


def test_a_changed_piece_is_refused_before_anything_is_unpickled_naming_stage_partition_and_file(monkeypatch):
    lines = lines_of(part(None, [(None, bucket(0, 0, 1))], index=1)[0], monkeypatch)
    changed = base64.b64encode(base64.b64decode(lines[0])[:-1] + b"!")
    with pytest.raises(UnauthenticatedFileError, match=r"d1/part-00001.*stage 4, partition 1"):
        list(state_checkpoints.checked_part(SEALER, 4, PATHS, [(1, 1)], 0, [changed]))


def test_a_file_cut_short_is_refused_by_the_merge_naming_it(monkeypatch):
    # The base's file of partition 0 lost its marker's piece: its other pieces arrive alone.
    lines = lines_of(part(None, [(None, bucket(1, p, 1)) for p in range(2)])[0], monkeypatch, per_piece=1)
    keyed = [item for task, line in enumerate(lines[1:]) for item in state_checkpoints.checked_part(SEALER, 4, PATHS[:1], [(0, 0)] * 2, task, [line])]
    with pytest.raises(state_checkpoints.StateFileError, match=r"base/part-00000.*cut short"):
        list(state_checkpoints.merge_pieces(4, PATHS[:1], 0, iter(keyed)))
