"""What the oracle's canonical form leaves out: the Python types sparkbeam outputs, and errors."""

from __future__ import annotations

import typing

import pytest

import sparkbeam as beam
from sparkbeam.schemas import GroupAndAggregate, MissingFieldError
from tests.oracle import assert_same_as_beam, canonical

pytestmark = pytest.mark.spark


class Point(typing.NamedTuple):
    x: int
    y: int


def run(build):
    """The values a sparkbeam pipeline outputs, as Python objects (not canonicalised)."""
    p = beam.Pipeline()
    output = beam.capture(build(p))
    return [e.value for e in p.run().emissions(output)]


ROWS = [beam.Row(shop="x", qty=1), beam.Row(shop="y", qty=2), beam.Row(shop="x", qty=3)]


# -- shapes ---------------------------------------------------------------------------


def test_select_outputs_rows(spark):
    out = run(lambda p: p | beam.Create([Point(1, 2)]) | beam.Select("y", lambda e: e.x, s=lambda e: e.x + e.y))
    assert out == [beam.Row(y=2, arg01=1, s=3)]
    assert type(out[0]) is beam.Row


def test_group_by_keys_are_values_or_key_named_tuples(spark):
    one = run(lambda p: p | beam.Create(ROWS) | beam.GroupBy("shop"))
    assert sorted(key for key, _ in one) == ["x", "y"]

    several = run(lambda p: p | beam.Create(ROWS) | beam.GroupBy("shop", odd=lambda r: r.qty % 2 == 1))
    for key, values in several:
        assert type(key).__name__ == "Key"
        assert type(key)._fields == ("shop", "odd")
        assert key == (key.shop, key.odd)  # a tuple, as Beam's keys are
        assert all(type(v) is beam.Row for v in values)
    assert sorted(tuple(k) for k, _ in several) == [("x", True), ("y", False)]

    forced = run(lambda p: p | beam.Create(ROWS) | beam.GroupBy(lambda r: r.shop).force_tuple_keys())
    assert sorted((type(k)._fields, tuple(k)) for k, _ in forced) == [(("key",), ("x",)), (("key",), ("y",))]

    nothing = run(lambda p: p | beam.Create(ROWS) | beam.GroupBy())
    ((key, values),) = nothing
    assert key == () and type(key).__name__ == "Key" and len(list(values)) == 3


def test_aggregates_are_result_named_tuples(spark):
    out = run(lambda p: p | beam.Create(ROWS) | beam.GroupBy("shop").aggregate_field("qty", sum, "total"))
    assert sorted(out) == [("x", 4), ("y", 2)]
    for result in out:
        assert type(result).__name__ == "Result"
        assert type(result)._fields == ("shop", "total")
    assert {r.shop: r.total for r in out} == {"x": 4, "y": 2}


def test_canonical_form_treats_all_rows_alike_and_keeps_names_and_order():
    from apache_beam.pvalue import Row as BeamRow

    assert canonical(beam.Row(x=1, y=2)) == canonical(BeamRow(x=1, y=2)) == canonical(Point(1, 2))
    assert canonical(beam.Row(x=1, y=2)) != canonical(beam.Row(y=2, x=1))
    assert canonical(beam.Row(x=1, y=2)) != canonical((1, 2))
    assert canonical(beam.Row(x=[2, 1])) == canonical(BeamRow(x=[1, 2]))


def test_the_oracle_fails_on_a_wrong_field_name(spark):
    def build(ns, p):
        name = "count" if ns.beam is beam else "n"
        return p | ns.beam.Create([1]) | ns.beam.Select(**{name: lambda x: x})

    with pytest.raises(AssertionError, match="sparkbeam differs from Beam"):
        assert_same_as_beam(build)


# -- errors at construction ------------------------------------------------------------


def test_fields_must_be_names_or_callables():
    with pytest.raises(TypeError, match=r"Select: the field at 1 must be a field name or a callable, not 3"):
        beam.Select("a", 3)
    with pytest.raises(TypeError, match=r"GroupBy: the field at 'k' must be"):
        beam.GroupBy(k=None)
    with pytest.raises(TypeError, match=r"aggregate_field: the field at 0 must be"):
        beam.GroupBy("a").aggregate_field(1.5, sum, "total")


@pytest.mark.parametrize(
    "make",
    [
        lambda: beam.Select("a", a=lambda r: r),
        lambda: beam.Select(_private="a"),
        lambda: beam.Select(**{"not valid": "a"}),
        lambda: beam.GroupBy("a", "a"),
        lambda: beam.GroupBy(**{"class": "a"}),
        lambda: beam.GroupBy("shop").aggregate_field("qty", sum, "shop"),
        lambda: beam.GroupBy("shop").aggregate_field("qty", sum, "n").aggregate_field("qty", max, "n"),
    ],
    ids=["select-repeat", "select-underscore", "select-space", "group-repeat", "group-keyword", "agg-key-clash", "agg-repeat"],
)
def test_field_names_beam_rejects_are_rejected_when_built(make):
    with pytest.raises(ValueError, match=r"(named twice|cannot name an output field)"):
        make()


def test_beam_rejects_a_repeated_select_name_too():
    import apache_beam

    with pytest.raises(ValueError, match="duplicate"), apache_beam.Pipeline() as p:
        p | apache_beam.Create([apache_beam.Row(a=1)]) | apache_beam.Select("a", a=lambda r: r)


def test_aggregate_field_checks_its_combine_fn_and_output_name():
    with pytest.raises(TypeError, match=r"aggregate_field\('qty', \.\.\., 'n'\): .*CombineFn"):
        beam.GroupBy("a").aggregate_field("qty", 42, "n")
    with pytest.raises(TypeError, match=r"aggregate_field\('qty', \.\.\., 'n'\): pass a CombineFn instance"):
        beam.GroupBy("a").aggregate_field("qty", beam.CombineFn, "n")
    with pytest.raises(TypeError, match="output_name must be a string"):
        beam.GroupBy("a").aggregate_field("qty", sum, None)


def test_aggregate_field_returns_a_new_transform_each_time():
    grouping = beam.GroupBy("a")
    first = grouping.aggregate_field("x", sum, "sx")
    second = first.aggregate_field("y", max, "my")
    assert isinstance(first, GroupAndAggregate)
    assert [a.output_name for a in first.aggregations] == ["sx"]
    assert [a.output_name for a in second.aggregations] == ["sx", "my"]
    assert grouping.force_tuple_keys() is not grouping and grouping.tuple_keys is False


def test_exception_handling_is_not_supported_yet():
    with pytest.raises(NotImplementedError, match=r"with_exception_handling"):
        beam.Select("a").with_exception_handling()


# -- errors at run time ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transform", "label", "kind"),
    [
        (lambda: beam.Select("shop", "price"), "PickPrice", "Select"),
        (lambda: beam.GroupBy("shop", "price"), "ByPrice", "GroupBy"),
        (lambda: beam.GroupBy("price"), "ByPriceOnly", "GroupBy"),
        (lambda: beam.GroupBy("shop").aggregate_field("price", sum, "total"), "SumPrice", "GroupBy"),
    ],
)
def test_a_missing_field_names_the_transform_and_the_element(spark, transform, label, kind):
    p = beam.Pipeline()
    _ = p | beam.Create([beam.Row(shop="x", qty=1)]) | label >> transform()
    with pytest.raises(MissingFieldError) as caught:
        p.run()
    message = str(caught.value)
    assert f"{kind} '{label}' (applied at " in message
    assert "test_shapes_and_errors.py:" in message
    assert "the element Row(shop='x', qty=1) has no field 'price' (its fields: shop, qty)" in message
    assert isinstance(caught.value, AttributeError)  # what Beam raises, so handlers keep working


def test_a_missing_field_of_a_named_tuple_or_a_dict(spark):
    p = beam.Pipeline()
    _ = p | "Points" >> beam.Create([Point(1, 2)]) | "PickZ" >> beam.Select("z")
    with pytest.raises(MissingFieldError, match=r"Point\(x=1, y=2\) has no field 'z' \(its fields: x, y\)"):
        p.run()
    p = beam.Pipeline()
    _ = p | "Dicts" >> beam.Create([{"z": 1}]) | "PickZ" >> beam.Select("z")
    with pytest.raises(MissingFieldError, match=r"it is a dict; read a key with a callable"):
        p.run()
