"""``Select`` against Beam: the same pipelines on apache_beam and on sparkbeam."""

from __future__ import annotations

import typing

import pytest

from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark


class Sale(typing.NamedTuple):
    shop: str
    item: str
    price: float


SALES = [("x", "pen", 2.5), ("y", "ink", 4.0), ("x", "pad", 1.0), ("z", "pen", 3.0)]


def sale_rows(ns, p, data=SALES):
    return p | "Rows" >> ns.beam.Create([ns.beam.Row(shop=s, item=i, price=c) for s, i, c in data])


def test_select_by_name_by_callable_and_renamed(spark):
    def build(ns, p):
        return sale_rows(ns, p) | ns.beam.Select(
            "item", lambda r: r.price * 2, "shop", cents=lambda r: int(r.price * 100), where="shop"
        )

    assert_same_as_beam(build)


def test_select_over_plain_elements_then_select_again(spark):
    # Beam's own SelectTest.test_simple: callables over ints, then fields of the Rows.
    def build(ns, p):
        rows = p | ns.beam.Create([1, 2, 10]) | ns.beam.Select(a=lambda x: x * x, b=lambda x: -x)
        return rows | "Again" >> ns.beam.Select("b", z="a")

    assert_same_as_beam(build)


def test_select_from_named_tuples(spark):
    def build(ns, p):
        sales = p | ns.beam.Create([Sale(*s) for s in SALES])
        return sales | ns.beam.Select("shop", "price", big=lambda s: s.price > 2)

    assert_same_as_beam(build)


def test_rows_built_from_named_tuples_then_selected(spark):
    def build(ns, p):
        sales = p | ns.beam.Create([Sale(*s) for s in SALES])
        rows = sales | ns.beam.Map(lambda s: ns.beam.Row(**s._asdict()))
        return rows | ns.beam.Select("item")

    assert_same_as_beam(build)


def test_select_keeps_none_values(spark):
    def build(ns, p):
        rows = p | ns.beam.Create([ns.beam.Row(a=None, b=1), ns.beam.Row(a="v", b=None)])
        return rows | ns.beam.Select("b", "a", missing=lambda r: r.a is None)

    assert_same_as_beam(build)


def test_select_of_nothing_and_with_no_fields(spark):
    def build(ns, p):
        empty = p | "Empty" >> ns.beam.Create([]) | "SelEmpty" >> ns.beam.Select("a")
        no_fields = sale_rows(ns, p) | "SelNone" >> ns.beam.Select()
        return (empty, no_fields) | ns.beam.Flatten()

    assert_same_as_beam(build)


def test_select_keeps_timestamps_and_windows(spark):
    def build(ns, p):
        stamped = sale_rows(ns, p) | ns.beam.Map(lambda r: ns.TimestampedValue(r, len(r.item) * 20 + r.price))
        windowed = stamped | ns.beam.WindowInto(ns.window.SlidingWindows(60, 30))
        return windowed | ns.beam.Select("shop", "price")

    assert_same_as_beam(build)
