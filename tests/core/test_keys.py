"""What the engine groups a key by (``runners/core/grouping/keys.py``), with no Spark."""

from __future__ import annotations

import collections
import math
import pickle
import subprocess
import sys

import pytest

from sparkbeam.runners.core.grouping.keys import (
    GroupingKey,
    UngroupableKeyError,
    grouping_key,
    user_key,
)

INF = float("inf")
NEGATIVE_NAN = INF - INF  # x86's default NaN has its sign bit set


def groups(keys):
    """The keys' positions per group, each key pickled first as a shuffle would."""
    found = collections.defaultdict(list)
    for position, key in enumerate(keys):
        found[pickle.loads(pickle.dumps(grouping_key(key)))].append(position)
    return sorted(found.values())


@pytest.mark.parametrize("key", ["a", 1, b"a", None, ("a", 1), ("a", (1, b"x", None)), 2**80])
def test_keys_that_group_alike_by_equality_are_their_own_grouping_key(key):
    assert grouping_key(key) is key


def test_nans_group_by_their_bits_as_beams_coder_writes_them():
    copies = [float("nan"), math.nan, pickle.loads(pickle.dumps(float("nan")))]
    assert groups([*copies, NEGATIVE_NAN, -NEGATIVE_NAN]) in ([[0, 1, 2, 4], [3]], [[0, 1, 2, 3], [4]])


@pytest.mark.parametrize(
    "keys",
    [[0.0, -0.0], [1, 1.0, True], [0, False, 0.0], [(1, "x"), (1.0, "x")], [[1], (1,)], [{1}, frozenset({1})]],
)
def test_keys_equal_in_python_but_encoded_differently_are_apart(keys):
    assert groups(keys) == [[i] for i in range(len(keys))]


def test_lists_dicts_and_sets_group_by_their_contents_in_beams_order():
    keys = [[1, [2.5]], [1, [2.5]], {"b": 1, "a": 2}, {"a": 2, "b": 1}, {3, 1, 2}, {1, 2, 3}, ([math.nan], "t"), ([float("nan")], "t")]
    assert groups(keys) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert user_key(grouping_key(keys[2])) is keys[2]  # what a pane shows: the key as given


Point = collections.namedtuple("Point", "x y")


def test_a_named_tuple_groups_as_its_values():
    """(Beam also writes its class: a documented difference.)"""
    point = Point(1, "a")
    assert grouping_key(point) is point and groups([Point(1, "a"), (1, "a")]) == [[0, 1]]
    assert groups([Point(1.0, "a"), (1.0, "a"), (1, "a")]) == [[0, 1], [2]]


def test_a_grouping_key_hashes_alike_in_another_process():
    """Partitions are chosen by hash in each worker; str and bytes hash with PYTHONHASHSEED."""
    key = grouping_key(([1.5, "a"], {"k": b"v"}, True))
    code = (
        "import pickle, sys; from sparkbeam.runners.core.grouping.keys import grouping_key; "
        "print(hash(grouping_key(([1.5, 'a'], {'k': b'v'}, True))))"
    )
    env = {"PYTHONHASHSEED": "0"}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert other.stdout == again.stdout
    assert isinstance(key, GroupingKey) and repr(key) == "([1.5, 'a'], {'k': b'v'}, True)"


@pytest.mark.parametrize(
    ("key", "problem"),
    [(bytearray(b"x"), "bytearray is unhashable"), ([bytearray()], "bytearray is unhashable"), ({1: 1, "a": 2}, "cannot sort the keys of a dict"), ({1, "a"}, "cannot sort the members of a set")],
)
def test_a_key_neither_can_group_is_refused_with_its_type(key, problem):
    with pytest.raises(UngroupableKeyError, match=problem):
        grouping_key(key)
