"""Which schema'd aggregations become one SQL plan, and the reason each other one keeps the general path (no Spark)."""

from __future__ import annotations

import typing

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.ops import CreateOp, GroupOp, lower
from sparkbeam.runners.core.plan import plan_stages
from sparkbeam.runners.core.schema_segments import AggregateSpec, SchemaAggregateOp, find_segments
from sparkbeam.schemas import AssignTimestamps
from sparkbeam.transforms import trigger, window
from sparkbeam.transforms.combiners import CountCombineFn, MeanCombineFn

SALES = [beam.Row(shop="x", price=3, t=1.5), beam.Row(shop="y", price=1, t=65.0), beam.Row(shop="x", price=2, t=30.0)]


class Sale(typing.NamedTuple):
    shop: str
    price: float


def planned(build):
    """The stage plan of ``build(pipeline)`` with schema'd segments found, and its notes."""
    pipeline = beam.Pipeline()
    beam.capture(build(pipeline))
    segments = find_segments(pipeline)
    lowered = lower(pipeline, substitutes=segments.substitutes, notes=segments.notes)
    return plan_stages(lowered), segments.notes


def only_note(notes):
    (note,) = notes.values()
    return note


def test_rows_through_timestamps_windows_and_select_become_one_source_op():
    plan, notes = planned(
        lambda p: p
        | beam.Create(SALES)
        | AssignTimestamps("t")
        | beam.WindowInto(window.FixedWindows(60))
        | beam.Select("price", store="shop")
        | beam.GroupBy("store").aggregate_field("price", sum, "total").aggregate_field("price", MeanCombineFn(), "avg")
    )
    (stage,) = plan.stages
    op = stage.head
    assert isinstance(op, SchemaAggregateOp)
    assert op.inputs == ()
    assert op.key_columns == (("store", "shop"),)
    assert op.aggregates == (AggregateSpec("sum", "price", "total"), AggregateSpec("mean", "price", "avg"))
    assert op.timestamp_column == "t"
    assert op.windowing.windowfn == window.FixedWindows(60)
    assert op.result_names == ("store", "total", "avg")
    assert only_note(notes).startswith("SQL plan: group by [store=shop] per FixedWindows")
    assert "SQL plan" in plan.describe()


def test_named_tuples_and_builtin_count_min_max():
    plan, _ = planned(
        lambda p: p
        | beam.Create([Sale("x", 2.5), Sale("y", 1.0)])
        | beam.GroupBy("shop")
        .aggregate_field("price", CountCombineFn(), "n")
        .aggregate_field("price", min, "low")
        .aggregate_field("price", max, "high")
    )
    (stage,) = plan.stages
    assert [a.function for a in stage.head.aggregates] == ["count", "min", "max"]
    assert stage.head.columns == (("shop", "str"), ("price", "float"))


def test_the_stages_after_the_aggregation_read_its_output():
    plan, _ = planned(
        lambda p: p | beam.Create(SALES) | beam.GroupBy("shop").aggregate_field("price", sum, "total") | beam.Map(tuple)
    )
    (stage,) = plan.stages
    assert isinstance(stage.head, SchemaAggregateOp)
    assert [op.label for op in stage.body] == ["Map(tuple)"]


class Concat(beam.CombineFn):
    def create_accumulator(self):
        return ""

    def add_input(self, acc, value):
        return acc + str(value)

    def merge_accumulators(self, accs):
        return "".join(accs)

    def extract_output(self, acc):
        return acc


def rows(p):
    return p | beam.Create(SALES)


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda p: rows(p) | beam.GroupBy("shop").aggregate_field("price", Concat(), "all"), "'all' uses Concat"),
        (lambda p: rows(p) | beam.GroupBy(lambda r: r.shop).aggregate_field("price", sum, "s"), "computes 'key' with a Python callable"),
        (lambda p: rows(p) | beam.Select(double=lambda r: 2 * r.price, shop="shop") | beam.GroupBy("shop").aggregate_field("double", sum, "s"), "computes 'double' with a Python callable"),
        (
            lambda p: rows(p) | AssignTimestamps("t") | beam.WindowInto(window.Sessions(10)) | beam.GroupBy("shop").aggregate_field("price", sum, "s"),
            "Sessions windows",
        ),
        (
            lambda p: rows(p) | beam.WindowInto(window.GlobalWindows(), trigger=trigger.Repeatedly(trigger.AfterCount(2)), accumulation_mode=trigger.AccumulationMode.DISCARDING)
            | beam.GroupBy("shop").aggregate_field("price", sum, "s"),
            "the trigger",
        ),
        (lambda p: rows(p) | beam.Map(lambda r: r) | beam.GroupBy("shop").aggregate_field("price", sum, "s"), "its input comes from 'Map(<lambda"),
        (lambda p: rows(p) | beam.GroupBy("shop").aggregate_field("shop", sum, "s"), "sum of 'shop', which holds str values"),
        (lambda p: rows(p) | beam.WindowInto(window.FixedWindows(60)) | beam.GroupBy("shop").aggregate_field("price", sum, "s"), "minimum timestamp in non-global windows"),
        (lambda p: rows(p) | beam.GroupBy("t").aggregate_field("price", sum, "s"), "the key field 't' holds floats"),
        (lambda p: rows(p) | beam.GroupBy("shop").aggregate_field("nope", sum, "s"), "reads 'nope', not a field of its input"),
        (
            lambda p: p | beam.Create([beam.Row(shop="x", price=1), beam.Row(shop="y", price=1.5)]) | beam.GroupBy("shop").aggregate_field("price", sum, "s"),
            "the field 'price' holds float, int values",
        ),
        (
            lambda p: p | beam.Create([beam.Row(shop="x", price=None)]) | beam.GroupBy("shop").aggregate_field("price", sum, "s"),
            "the field 'price' holds NoneType values",
        ),
        (
            lambda p: p | beam.Create([beam.Row(shop="x", price=2**70)]) | beam.GroupBy("shop").aggregate_field("price", sum, "s"),
            "ints beyond 64 bits",
        ),
    ],
    ids=[
        "custom-combine-fn", "callable-key", "callable-select", "sessions", "other-trigger", "python-map",
        "sum-of-strings", "no-timestamps-in-fixed-windows", "float-key", "missing-field", "mixed-types", "none", "big-int",
    ],
)
def test_what_keeps_the_general_path_is_named(build, reason):
    plan, notes = planned(build)
    assert not any(isinstance(stage.head, SchemaAggregateOp) for stage in plan.stages)
    assert any(isinstance(stage.head, GroupOp) for stage in plan.stages)
    label, note = next(iter(notes.items()))
    assert label.endswith("/Combine")
    assert note.startswith("general path: ")
    assert reason in note
    # The note is on the aggregation's grouping stage, as the timeline shows it.
    assert plan.stage_notes() == {label: note}


def test_a_captured_intermediate_keeps_the_general_path():
    pipeline = beam.Pipeline()
    selected = beam.capture(rows(pipeline) | beam.Select("shop", "price"))
    beam.capture(selected | beam.GroupBy("shop").aggregate_field("price", sum, "s"))
    segments = find_segments(pipeline)
    assert not segments.substitutes
    assert "read by more than the aggregation's chain (or captured)" in only_note(segments.notes)


def test_a_stream_or_the_option_keeps_every_aggregation_general():
    pipeline = beam.Pipeline()
    beam.capture(rows(pipeline) | beam.GroupBy("shop").aggregate_field("price", sum, "s"))
    segments = find_segments(pipeline, general_path_reason="--no_sql_plans")
    assert not segments.substitutes
    assert only_note(segments.notes) == "general path: --no_sql_plans"
    lowered = lower(pipeline, substitutes=segments.substitutes, notes=segments.notes)
    assert isinstance(lowered.ops[0], CreateOp)


def test_the_columns_stay_on_the_driver():
    from sparkbeam.runners.core.execution import kind_of

    plan, _ = planned(lambda p: rows(p) | beam.GroupBy("shop").aggregate_field("price", sum, "s"))
    op = plan.stages[0].head
    assert op.data
    assert kind_of(op).for_executors(op).data == ()
