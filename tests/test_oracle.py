"""The oracle helper itself: two empty outputs are not an agreement unless the test says so."""

from __future__ import annotations

import pytest

from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark


def nothing(ns, p):
    return p | ns.beam.Create([1, 2]) | ns.beam.Filter(lambda x: x > 5)


def something(ns, p):
    return p | ns.beam.Create([1, 2]) | ns.beam.Map(lambda x: x * 10)


def test_empty_outputs_on_both_sides_fail(spark):
    with pytest.raises(AssertionError, match="both output nothing, so the comparison proves nothing"):
        assert_same_as_beam(nothing)


def test_empty_outputs_pass_when_expected(spark):
    assert not assert_same_as_beam(nothing, expect_empty=True)


def test_output_fails_when_emptiness_was_expected(spark):
    with pytest.raises(AssertionError, match=r"expect_empty=True, but Beam and sparkbeam both output \[\(10,"):
        assert_same_as_beam(something, expect_empty=True)


def test_matching_output_passes(spark):
    assert sorted(value for value, *_ in assert_same_as_beam(something).elements()) == [10, 20]
