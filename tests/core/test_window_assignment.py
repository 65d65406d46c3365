"""The runner's cached window assignment equals WindowFn.assign for the built-in window fns."""

from __future__ import annotations

import random

import pytest

from sparkbeam.runners.core.fused import _cached_assignment
from sparkbeam.transforms.window import (
    FixedWindows,
    GlobalWindows,
    Sessions,
    SlidingWindows,
    Timestamp,
    WindowFn,
)


@pytest.mark.parametrize(
    "windowfn",
    [
        FixedWindows(60),
        FixedWindows(10, 3),
        SlidingWindows(60, 20),
        SlidingWindows(30, 7, 2),  # size not a multiple of period: the count of windows varies
        SlidingWindows(10, 20),  # hopping with gaps: some timestamps are in no window
        GlobalWindows(),
    ],
    ids=repr,
)
def test_cached_assignment_matches_assign(windowfn):
    assign = _cached_assignment(windowfn)
    rng = random.Random(7)
    for _ in range(3000):
        micros = rng.choice([rng.randint(-10**10, 10**10), rng.randint(-200, 200)])
        expected = tuple(windowfn.assign(WindowFn.AssignContext(Timestamp.from_micros(micros))))
        assert assign(micros) == expected, micros


def test_subclasses_and_merging_fns_use_their_own_assign():
    class Shifted(FixedWindows):
        def assign(self, context):
            return super().assign(WindowFn.AssignContext(context.timestamp + 1))

    assert _cached_assignment(Shifted(10)) is None
    assert _cached_assignment(Sessions(10)) is None
