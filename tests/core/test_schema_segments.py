"""Which schema'd aggregations become one SQL plan, and the reason each other one keeps the general path (no Spark)."""

from __future__ import annotations

import typing

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.lowering.ops import CreateOp, GroupOp, lower
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.runners.core.schema import schema_sources
from sparkbeam.runners.core.schema.schema_segments import (
    AggregateSpec,
    SchemaAggregateOp,
    find_segments,
)
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
    from sparkbeam.runners.core.elements.execution import kind_of

    plan, _ = planned(lambda p: rows(p) | beam.GroupBy("shop").aggregate_field("price", sum, "s"))
    op = plan.stages[0].head
    assert op.data
    assert kind_of(op).for_executors(op).data == ()


# -- CSV reads as segment sources (the bytes are scanned on the driver; no Spark) ------------


def csv_file(tmp_path, text, name="scores.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return str(path)


SCORES_CSV = "team,points,t\nx,3,1.5\ny,1,65.0\nx,2,30.0\n"


def csv_aggregation(path, **read_options):
    return lambda p: (
        p
        | beam.io.ReadFromCsv(path, **read_options)
        | AssignTimestamps("t")
        | beam.WindowInto(window.FixedWindows(60))
        | beam.GroupBy("team").aggregate_field("points", sum, "total")
    )


def test_a_csv_read_starts_a_segment_with_the_columns_the_read_inferred(tmp_path):
    path = csv_file(tmp_path, SCORES_CSV)
    plan, notes = planned(csv_aggregation(path))
    (stage,) = plan.stages
    op = stage.head
    assert isinstance(op, SchemaAggregateOp)
    assert op.columns == (("team", "str"), ("points", "int"), ("t", "float"))
    assert op.table.files == (path,) and op.table.header and op.table.width == 3
    assert op.table.positions == (("team", 0), ("points", 1), ("t", 2))
    assert op.table.header_line == "team,points,t"
    assert only_note(notes).endswith(f"CSV read by the plan ({path})")


def test_a_headerless_csv_with_names_and_timestamps_in_milliseconds(tmp_path):
    path = csv_file(tmp_path, "x,3,1500\ny,1,65000\n")
    plan, notes = planned(
        lambda p: p
        | beam.io.ReadFromCsv(path, header=None, names=["team", "points", "ms"])
        | AssignTimestamps("ms", unit="ms")
        | beam.WindowInto(window.FixedWindows(60))
        | beam.GroupBy("team").aggregate_field("points", CountCombineFn(), "n")
    )
    op = plan.stages[0].head
    assert isinstance(op, SchemaAggregateOp)
    assert not op.table.header and op.timestamp_unit == "ms"
    assert "timestamps from ms (ms)" in only_note(notes)


@pytest.mark.parametrize(
    ("content", "options", "reason"),
    [
        ('team,points,t\n"x",3,1.5\n', {}, "holds quote characters"),
        ("team,points,t\r\nx,3,1.5\r\n", {}, "holds carriage returns"),
        ("team,points,t\nx,3,1.5\n   \ny,1,2.0\n", {}, "a line of spaces only"),
        (b"\xef\xbb\xbfteam,points,t\nx,3,1.5\n", {}, "starts with a byte-order mark"),
        (b"team,points,t\nx\xff,3,1.5\n", {"encoding": "latin-1"}, "reads latin-1, not UTF-8"),
        (SCORES_CSV, {"on_bad_lines": "skip"}, "has on_bad_lines='skip'"),
        (SCORES_CSV, {"skiprows": 0, "escapechar": "\\"}, "sets an escape character"),
        ("team,points,t,ok\nx,3,1.5,True\ny,1,2.0,\n", {}, "the column 'ok' had missing values in the sampled records"),
        # the plan drops a header by its text (as the general path reads a repeat: a record)
        ("team,points,t\nteam,points,t\nx,3,1.5\n", {}, "repeats its header line in its data"),
        ("\nteam,points,t\nx,3,1.5\nteam,points,t", {}, "repeats its header line in its data"),
    ],
)
def test_a_csv_read_the_plans_reader_could_read_differently_keeps_the_general_path(tmp_path, content, options, reason):
    path = csv_file(tmp_path, content)
    plan, notes = planned(csv_aggregation(path, **options))
    assert not any(isinstance(stage.head, SchemaAggregateOp) for stage in plan.stages)
    assert reason in only_note(notes)
    assert only_note(notes).startswith("general path: ")


@pytest.mark.parametrize(
    ("content", "repeats"),
    [
        ("team,points,t\nx,3,1.5\nteam,points,t\ny,1,2.0\n", True),
        ("team,points,t\nx,3,1.5\nteam,points,tt\nteam,points\n", False),
    ],
)
def test_a_repeated_header_line_is_found_across_scanned_chunks(tmp_path, monkeypatch, content, repeats):
    monkeypatch.setattr(schema_sources, "_SCAN_CHUNK", 5)
    path = csv_file(tmp_path, content)
    _, notes = planned(csv_aggregation(path))
    assert ("repeats its header line" in only_note(notes)) is repeats


def test_csv_files_with_different_headers_keep_the_general_path(tmp_path):
    csv_file(tmp_path, SCORES_CSV, "a.csv")
    csv_file(tmp_path, "points,team,t\n3,x,1.5\n", "b.csv")
    _, notes = planned(csv_aggregation(str(tmp_path / "*.csv")))
    assert "has another header than" in only_note(notes)


def test_a_csv_read_with_its_bad_records_routed_keeps_the_general_path(tmp_path):
    path = csv_file(tmp_path, SCORES_CSV)

    def build(p):
        rows, _ = p | beam.io.ReadFromCsv(path).with_exception_handling()
        return rows | AssignTimestamps("t") | beam.GroupBy("team").aggregate_field("points", sum, "total")

    _, notes = planned(build)
    assert "with_exception_handling" in only_note(notes)


def parquet_file(tmp_path, columns, name="scores.parquet"):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / name)
    pq.write_table(pa.table(columns), path)
    return path


def test_a_parquet_read_as_rows_starts_a_segment_with_the_files_types(tmp_path):
    import pyarrow as pa

    path = parquet_file(
        tmp_path,
        {"team": ["x", "y"], "points": pa.array([3, 1], pa.int32()), "t": pa.array([1.5, 65.0], pa.float32()), "ok": [True, False]},
    )
    plan, notes = planned(
        lambda p: p
        | beam.io.ReadFromParquet(path, as_rows=True)
        | AssignTimestamps("t")
        | beam.GroupBy("team").aggregate_field("points", sum, "total")
    )
    op = plan.stages[0].head
    assert isinstance(op, SchemaAggregateOp)
    assert op.columns == (("team", "str"), ("points", "int"), ("t", "float"), ("ok", "bool"))
    assert only_note(notes).endswith(f"Parquet read by the plan ({path})")


def test_parquet_reads_the_plan_declines_keep_the_general_path(tmp_path):
    import pyarrow as pa

    dicts = parquet_file(tmp_path, {"team": ["x"], "points": [3]}, "dicts.parquet")
    _, notes = planned(lambda p: p | beam.io.ReadFromParquet(dicts) | beam.GroupBy(lambda d: d["team"]).aggregate_field(lambda d: d["points"], sum, "total"))
    assert "emits dicts" in only_note(notes)
    nested = parquet_file(tmp_path, {"team": ["x"], "points": pa.array([3], pa.decimal128(5, 0))}, "decimal.parquet")
    _, notes = planned(lambda p: p | beam.io.ReadFromParquet(nested, as_rows=True) | beam.GroupBy("team").aggregate_field("points", sum, "total"))
    assert "the column 'points' is decimal128(5, 0)" in only_note(notes)
    (tmp_path / "two").mkdir()
    parquet_file(tmp_path / "two", {"team": ["x"], "points": [3]}, "a.parquet")
    parquet_file(tmp_path / "two", {"points": [3], "team": ["x"]}, "b.parquet")
    pattern = str(tmp_path / "two" / "*.parquet")
    _, notes = planned(lambda p: p | beam.io.ReadFromParquet(pattern, as_rows=True) | beam.GroupBy("team").aggregate_field("points", sum, "total"))
    assert "has another schema than" in only_note(notes)


def test_assign_timestamps_reads_whole_milliseconds_or_microseconds_with_unit():
    from sparkbeam.schemas import _Stamp

    row = beam.Row(ms=61_500)
    assert _Stamp(lambda r: r.ms, "ms")(row).timestamp.micros == 61_500_000
    assert _Stamp(lambda r: r.ms, "us")(row).timestamp.micros == 61_500
    with pytest.raises(TypeError, match=r"Stamp: the timestamp 1.5 .* is not a whole number of ms"):
        _Stamp(lambda r: 1.5, "ms", "Stamp")(row)
    with pytest.raises(ValueError, match="unit must be one of 's', 'ms', 'us', got 'h'"):
        AssignTimestamps("ms", unit="h")


def test_float_milliseconds_keep_the_general_path():
    rows = [beam.Row(team="x", ms=1.5)]
    _, notes = planned(lambda p: p | beam.Create(rows) | AssignTimestamps("ms", unit="ms") | beam.GroupBy("team").aggregate_field("ms", sum, "total"))
    assert "the timestamps in 'ms' are float, not ms" in only_note(notes)
