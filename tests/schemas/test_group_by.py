"""``GroupBy`` and ``GroupBy(...).aggregate_field`` against Beam, output shapes and keys included."""

from __future__ import annotations

import typing

import pytest

from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark


class Sale(typing.NamedTuple):
    shop: str
    item: str
    price: float
    qty: int


SALES = [
    ("x", "pen", 2.5, 1),
    ("y", "ink", 4.0, 2),
    ("x", "pad", 1.0, 5),
    ("z", "pen", 3.0, 1),
    ("x", "pen", 2.0, 3),
    ("y", "pen", 2.5, 4),
]


def sale_rows(ns, p, data=SALES, label="Rows"):
    return p | label >> ns.beam.Create([ns.beam.Row(shop=s, item=i, price=c, qty=q) for s, i, c, q in data])


def tagged(ns, **pcolls):
    """One PCollection of (tag, element) from several, so one pipeline checks several shapes."""
    return [pc | f"Tag{tag}" >> ns.beam.Map(lambda e, tag=tag: (tag, e)) for tag, pc in pcolls.items()] | ns.beam.Flatten()


def make_mean(ns):
    class Mean(ns.beam.CombineFn):
        def create_accumulator(self):
            return (0.0, 0)

        def add_input(self, acc, value):
            return (acc[0] + value, acc[1] + 1)

        def merge_accumulators(self, accs):
            sums, counts = zip(*accs)
            return (sum(sums), sum(counts))

        def extract_output(self, acc):
            return acc[0] / acc[1] if acc[1] else None

    return Mean()


# -- keys ---------------------------------------------------------------------------


def test_one_field_key_is_its_value(spark):
    def build(ns, p):
        rows = sale_rows(ns, p)
        return tagged(
            ns,
            by_name=rows | "ByName" >> ns.beam.GroupBy("shop"),
            by_callable=rows | "ByCallable" >> ns.beam.GroupBy(lambda r: r.qty % 2),
        )

    assert_same_as_beam(build)


def test_several_fields_key_is_a_named_tuple(spark):
    def build(ns, p):
        rows = sale_rows(ns, p)
        return tagged(
            ns,
            names=rows | "Names" >> ns.beam.GroupBy("shop", "item"),
            mixed=rows | "Mixed" >> ns.beam.GroupBy("item", lambda r: r.qty > 2, big=lambda r: r.price > 2),
            named=rows | "Named" >> ns.beam.GroupBy(s="shop"),
        )

    assert_same_as_beam(build)


def test_force_tuple_keys_and_group_by_nothing(spark):
    def build(ns, p):
        rows = sale_rows(ns, p)
        return tagged(
            ns,
            forced=rows | "Forced" >> ns.beam.GroupBy("shop").force_tuple_keys(),
            forced_callable=rows | "ForcedFn" >> ns.beam.GroupBy(lambda r: r.item).force_tuple_keys(),
            unforced=rows | "Unforced" >> ns.beam.GroupBy("shop").force_tuple_keys().force_tuple_keys(False),
            all=rows | "All" >> ns.beam.GroupBy(),
        )

    assert_same_as_beam(build)


def test_beams_own_group_by_lambdas(spark):
    # ptransform_test.TestGroupBy.test_lambdas
    def build(ns, p):
        numbers = p | ns.beam.Create(range(6))
        return tagged(
            ns,
            all=numbers | "All" >> ns.beam.GroupBy(),
            one=numbers | "One" >> ns.beam.GroupBy(lambda x: x % 2),
            one_tuple=numbers | "OneTuple" >> ns.beam.GroupBy(lambda x: x % 2).force_tuple_keys(),
            two=numbers | "Two" >> ns.beam.GroupBy(a=lambda x: x % 2, b=lambda x: x < 4),
        )

    assert_same_as_beam(build)


def test_named_tuple_elements(spark):
    def build(ns, p):
        sales = p | ns.beam.Create([Sale(*s) for s in SALES])
        return tagged(
            ns,
            grouped=sales | "Group" >> ns.beam.GroupBy("shop", "item"),
            totals=sales | "Agg" >> ns.beam.GroupBy("item").aggregate_field("qty", sum, "units"),
        )

    assert_same_as_beam(build)


def test_row_keys_through_group_by_key(spark):
    # Grouping by a Row key needs Rows to hash alike in every Spark worker.
    def build(ns, p):
        rows = sale_rows(ns, p)
        keyed = rows | ns.beam.Map(lambda r: (ns.beam.Row(shop=r.shop, pen=r.item == "pen"), r.qty))
        return keyed | ns.beam.GroupByKey()

    assert_same_as_beam(build)


# -- aggregation ----------------------------------------------------------------------


def test_aggregate_one_field(spark):
    def build(ns, p):
        return sale_rows(ns, p) | ns.beam.GroupBy("shop").aggregate_field("qty", sum, "units")

    assert_same_as_beam(build)


def test_several_aggregations_with_callables_and_combine_fns(spark):
    def build(ns, p):
        return sale_rows(ns, p) | ns.beam.GroupBy("shop", pen=lambda r: r.item == "pen").aggregate_field(
            "qty", sum, "units"
        ).aggregate_field(lambda r: r.price * r.qty, sum, "revenue").aggregate_field(
            "price", make_mean(ns), "mean_price"
        ).aggregate_field("price", max, "top_price").aggregate_field("item", lambda items: len(set(items)), "n")

    assert_same_as_beam(build)


def test_beams_own_aggregate(spark):
    # ptransform_test.TestGroupBy.test_aggregate
    def build(ns, p):
        rows = p | ns.beam.Create(range(-2, 3)) | ns.beam.Map(
            lambda x: ns.beam.Row(value=x, square=x * x, sign=x // abs(x) if x else 0)
        )
        return rows | ns.beam.GroupBy("square", big=lambda x: x.value > 1).aggregate_field(
            "value", sum, "sum"
        ).aggregate_field(lambda x: x.sign == 1, all, "positive")

    assert_same_as_beam(build)


def test_global_aggregate_and_forced_keys(spark):
    # Beam's groupby_global_aggregate snippet, plus force_tuple_keys (aggregates always use Key).
    def build(ns, p):
        rows = sale_rows(ns, p)
        return tagged(
            ns,
            everything=rows
            | "Global" >> ns.beam.GroupBy()
            .aggregate_field("price", min, "min_price")
            .aggregate_field("price", make_mean(ns), "mean_price")
            .aggregate_field("price", max, "max_price"),
            forced=rows | "Forced" >> ns.beam.GroupBy("shop").force_tuple_keys().aggregate_field("qty", max, "most"),
        )

    assert_same_as_beam(build)


# -- edges ----------------------------------------------------------------------------


def test_empty_input(spark):
    def build(ns, p):
        rows = sale_rows(ns, p, data=[])
        return tagged(
            ns,
            grouped=rows | "Group" >> ns.beam.GroupBy("shop"),
            keyed=rows | "Keyed" >> ns.beam.GroupBy("shop", "item"),
            aggregated=rows | "Agg" >> ns.beam.GroupBy("shop").aggregate_field("qty", sum, "n"),
            global_=rows | "Global" >> ns.beam.GroupBy().aggregate_field("qty", sum, "n"),
        )

    # Emptiness is the point: no group, not even a global one, comes from no rows (Beam's
    # GroupBy() aggregates per key, with the empty key, so it has no default row).
    assert_same_as_beam(build, expect_empty=True)


def test_none_values_in_keys_and_aggregated_fields(spark):
    data = [("x", None, 1.0, 1), (None, "pen", 2.0, 2), ("x", None, None, 3), (None, "pen", 4.0, 4)]

    def build(ns, p):
        rows = sale_rows(ns, p, data=data)

        def total(prices):
            return sum(price for price in prices if price is not None)

        return tagged(
            ns,
            one=rows | "One" >> ns.beam.GroupBy("shop"),
            two=rows | "Two" >> ns.beam.GroupBy("shop", "item").aggregate_field("price", total, "total"),
        )

    assert_same_as_beam(build)


@pytest.mark.parametrize("window_fn", ["fixed", "sliding", "sessions"])
def test_windowed_input(spark, window_fn):
    def build(ns, p):
        make = {
            "fixed": lambda: ns.window.FixedWindows(60),
            "sliding": lambda: ns.window.SlidingWindows(60, 30),
            "sessions": lambda: ns.window.Sessions(45),
        }[window_fn]
        stamped = sale_rows(ns, p) | ns.beam.Map(lambda r: ns.TimestampedValue(r, r.qty * 25 + r.price))
        windowed = stamped | ns.beam.WindowInto(make())
        return tagged(
            ns,
            grouped=windowed | "Group" >> ns.beam.GroupBy("shop"),
            aggregated=windowed | "Agg" >> ns.beam.GroupBy("item").aggregate_field("qty", sum, "units"),
        )

    assert_same_as_beam(build)


class Opaque:
    """A value with no __eq__: Beam groups it by its encoded bytes, Python by identity."""

    def __init__(self, value):
        self.value = value


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="runner gap: GroupByKey groups keys by Python equality, Beam by their encoding",
)
def test_key_field_without_value_equality(spark):
    # ptransform_test.TestGroupBy.test_pickled_field
    def build(ns, p):
        rows = p | ns.beam.Create(["a", "a", "b"]) | ns.beam.Map(
            lambda s: ns.beam.Row(key1=Opaque(s), key2=s.upper(), value=0)
        )
        grouped = rows | ns.beam.GroupBy("key1", "key2")
        return grouped | ns.beam.MapTuple(lambda k, vs: (k.key1.value, k.key2, len(list(vs))))

    assert_same_as_beam(build)


def test_streaming_aggregate_with_early_panes(spark):
    def build(ns, p):
        row = ns.beam.Row
        stream = (
            ns.TestStream()
            .add_elements([ns.TimestampedValue(row(shop="x", qty=1), 5), ns.TimestampedValue(row(shop="y", qty=2), 12)])
            .advance_watermark_to(30)
            .add_elements([ns.TimestampedValue(row(shop="x", qty=3), 40), ns.TimestampedValue(row(shop="x", qty=4), 70)])
            .advance_watermark_to(65)
            .add_elements([ns.TimestampedValue(row(shop="x", qty=5), 75)])
            .advance_watermark_to_infinity()
        )
        windowed = p | stream | ns.beam.WindowInto(
            ns.window.FixedWindows(60),
            trigger=ns.trigger.AfterWatermark(early=ns.trigger.AfterCount(2)),
            accumulation_mode=ns.trigger.AccumulationMode.ACCUMULATING,
        )
        return windowed | ns.beam.GroupBy("shop").aggregate_field("qty", sum, "units").aggregate_field(
            "qty", make_mean(ns), "mean"
        )

    assert_same_as_beam(build, streaming=True)
