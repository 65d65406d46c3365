"""Schema'd batch aggregations as Spark SQL plans: the same panes as the general path and as
Beam, the plan taken (its note), and the general path named where it is kept."""

from __future__ import annotations

import collections
import typing

import attrs
import pytest

import sparkbeam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.schema.schema_segments import SchemaAggregateOp
from sparkbeam.schemas import AssignTimestamps
from tests.oracle import _sparkbeam_ns, assert_same_as_beam, canonical

pytestmark = pytest.mark.spark

# t in seconds: whole, fractional, exactly on window edges, and out of order
SCORES = [
    ("x", 3, 1.5), ("y", 1, 65.0), ("x", 2, 30.0), ("x", 5, 70.25), ("z", 4, 59.999999),
    ("y", 7, 60.0), ("x", 1, 119.0), ("z", 2, 0.0), ("y", 3, 125.5), ("x", 6, 10.0),
]


# sums beyond 64 bits, which Python's ints hold exactly
BIG = [("x", 2**62), ("x", 2**62 + 1), ("x", 2**62), ("y", -(2**62)), ("y", -(2**62) - 7)]


class Score(typing.NamedTuple):
    team: str
    points: int
    t: float


def scores(ns, p, label="Scores"):
    return p | label >> ns.beam.Create([ns.beam.Row(team=team, points=points, t=t) for team, points, t in SCORES])


def stamped(ns, pcoll, label):
    if ns.beam is sparkbeam:
        return pcoll | label >> AssignTimestamps("t")
    return pcoll | label >> ns.beam.Map(lambda r: ns.TimestampedValue(r, r.t))


def all_aggregates(ns, grouping):
    return (
        grouping.aggregate_field("points", sum, "total")
        .aggregate_field("points", ns.combiners.CountCombineFn(), "n")
        .aggregate_field("points", ns.combiners.MeanCombineFn(), "mean")
        .aggregate_field("t", min, "first")
        .aggregate_field("points", max, "best")
    )


def tag(ns, pcoll, name):
    return pcoll | f"Tag{name}" >> ns.beam.Map(lambda result, name=name: (name, result))


def shapes(ns, p):
    """Every supported shape once, each its own segment, flattened into one output."""
    window, TC = ns.window, ns.window.TimestampCombiner
    out = [
        tag(ns, scores(ns, p, "Plain") | "AggPlain" >> all_aggregates(ns, ns.beam.GroupBy("team")), "global-default"),
        tag(
            ns,
            stamped(ns, scores(ns, p, "F"), "StampF")
            | "Fixed" >> ns.beam.WindowInto(window.FixedWindows(60))
            | "AggF" >> all_aggregates(ns, ns.beam.GroupBy("team")),
            "fixed-eow",
        ),
        tag(
            ns,
            stamped(ns, scores(ns, p, "S"), "StampS")
            | "Sliding" >> ns.beam.WindowInto(window.SlidingWindows(60, 20, offset=5), timestamp_combiner=TC.OUTPUT_AT_EARLIEST)
            | "AggS" >> ns.beam.GroupBy("team").aggregate_field("points", sum, "total"),
            "sliding-earliest",
        ),
        tag(
            ns,
            stamped(ns, scores(ns, p, "L"), "StampL")
            | "FixedLatest" >> ns.beam.WindowInto(window.FixedWindows(45, offset=10), timestamp_combiner=TC.OUTPUT_AT_LATEST)
            | "SelectL" >> ns.beam.Select("points", who="team")
            | "AggL" >> ns.beam.GroupBy("who").aggregate_field("points", min, "low"),
            "fixed-latest-select",
        ),
        tag(
            ns,
            stamped(ns, scores(ns, p, "G"), "StampG")
            | "GlobalEarliest" >> ns.beam.WindowInto(window.GlobalWindows(), timestamp_combiner=TC.OUTPUT_AT_EARLIEST)
            | "AggG" >> ns.beam.GroupBy().aggregate_field("points", sum, "total"),
            "global-earliest-no-key",
        ),
        tag(
            ns,
            p | "Tuples" >> ns.beam.Create([Score(*s) for s in SCORES])
            | "AggT" >> ns.beam.GroupBy("team", "points").aggregate_field("t", max, "last"),
            "named-tuples-two-keys",
        ),
        tag(
            ns,
            p | "Big" >> ns.beam.Create([ns.beam.Row(team=team, points=points) for team, points in BIG])
            | "AggBig" >> ns.beam.GroupBy("team").aggregate_field("points", sum, "total").aggregate_field("points", ns.combiners.MeanCombineFn(), "mean"),
            "sums-beyond-64-bits",
        ),
    ]
    return out


def reify(element, timestamp=sparkbeam.DoFn.TimestampParam, window=sparkbeam.DoFn.WindowParam, pane=sparkbeam.DoFn.PaneInfoParam):
    from tests import oracle

    # milliseconds, as the oracle compares timestamps (Beam's runner keeps no finer ones)
    return (element, timestamp.micros // 1000, oracle._window_key(window), oracle._pane_key(pane))


def reified_shapes(ns, p):
    """The shapes' panes with their window, timestamp and pane in the value, in one output
    (a Flatten needs one window fn)."""
    do_fn = ns.beam.DoFn
    reify_here = lambda e, t=do_fn.TimestampParam, w=do_fn.WindowParam, pane=do_fn.PaneInfoParam: reify(e, t, w, pane)  # noqa: E731
    return [
        pcoll | f"Reify{index}" >> ns.beam.Map(reify_here) | f"Global{index}" >> ns.beam.WindowInto(ns.window.GlobalWindows())
        for index, pcoll in enumerate(shapes(ns, p))
    ] | ns.beam.Flatten()


def run(build, **options):
    pipeline = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, **options))
    built = build(_sparkbeam_ns(), pipeline)
    outputs = [sparkbeam.capture(pcoll) for pcoll in (built if isinstance(built, list) else [built])]
    result = pipeline.run()
    panes = collections.Counter(
        (canonical(e.value), e.timestamp.micros, e.windows, e.pane) for output in outputs for e in result.emissions(output)
    )
    return panes, result


def test_every_shape_gives_the_general_paths_panes_through_sql_plans(spark_session_kind):
    general, general_result = run(shapes, sql_plans=False, **spark_session_kind)
    through_sql, sql_result = run(shapes, **spark_session_kind)
    assert through_sql == general
    assert {value[0] for value, *_ in general} == {
        "global-default", "fixed-eow", "sliding-earliest", "fixed-latest-select", "global-earliest-no-key", "named-tuples-two-keys",
        "sums-beyond-64-bits",
    }
    # Each aggregation ran as its own SQL plan, and the timeline says so.
    heads = [stage.head for stage in sql_result.plan.stages if isinstance(stage.head, SchemaAggregateOp)]
    assert len(heads) == 7
    notes = sql_result.watermarks().notes
    assert len(notes) == 7
    assert all(note.startswith("SQL plan: ") for note in notes.values())
    assert all(note == "general path: --no_sql_plans" for note in general_result.watermarks().notes.values())
    # The physical plan shows each segment as its stage's planner choice.
    assert sql_result.physical_plan().describe().count("planner: SQL plan: ") == 7


def test_same_as_beam(spark):
    assert_same_as_beam(reified_shapes, overlapping_window_rule=False)


class Concat(sparkbeam.CombineFn):
    def create_accumulator(self):
        return ""

    def add_input(self, acc, value):
        return acc + value

    def merge_accumulators(self, accs):
        return "".join(sorted(accs))

    def extract_output(self, acc):
        return "".join(sorted(acc))


def test_a_custom_combine_fn_runs_on_the_general_path_and_the_timeline_says_why(spark):
    def build(ns, p):
        return scores(ns, p) | ns.beam.GroupBy("team").aggregate_field("team", Concat(), "teams")

    panes, result = run(build)
    assert {value for value, *_ in panes} == {("<row>", (("team", "x"), ("teams", "xxxxx"))), ("<row>", (("team", "y"), ("teams", "yyy"))), ("<row>", (("team", "z"), ("teams", "zz")))}
    ((stage, note),) = result.watermarks().notes.items()
    assert stage.endswith("/Combine")
    assert note.startswith("general path: 'teams' uses Concat")
    assert "general path" in result.watermarks().format()


# -- CSV files read by the plan's own reader -------------------------------------------------

CSV_SCORES = "team,points,t\n" + "".join(f"{team},{points},{t}\n" for team, points, t in SCORES)
# no header; '|' between fields; milliseconds; a team missing ('NA' and ''), which groups as None
CSV_MS = "x|3|1500\ny|1|65000\nNA|2|30000\nx|5|70250\n|4|59999\ny|7|60000\nx|1|119000\n"


def csv_shapes(paths):
    def build(ns, p):
        window = ns.window
        scores_csv, ms_csv, scores_parquet = paths
        plain = (
            stamped(ns, p | "ReadScores" >> ns.beam.io.ReadFromCsv(scores_csv), "StampCsv")
            | "FixedCsv" >> ns.beam.WindowInto(window.FixedWindows(60))
            | "AggCsv" >> all_aggregates(ns, ns.beam.GroupBy("team"))
        )
        read_ms = p | "ReadMs" >> ns.beam.io.ReadFromCsv(ms_csv, sep="|", header=None, names=["team", "points", "ms"])
        if ns.beam is sparkbeam:
            in_ms = read_ms | "StampMs" >> AssignTimestamps("ms", unit="ms")
        else:
            in_ms = read_ms | "StampMs" >> ns.beam.Map(lambda r: ns.TimestampedValue(r, r.ms / 1000))
        sliding = (
            in_ms
            | "SlidingMs" >> ns.beam.WindowInto(window.SlidingWindows(60, 20))
            | "AggMs" >> ns.beam.GroupBy("team").aggregate_field("points", sum, "total").aggregate_field("ms", max, "last")
        )
        parquet = (
            stamped(ns, p | "ReadParquet" >> ns.beam.io.ReadFromParquet(scores_parquet, as_rows=True), "StampParquet")
            | "FixedParquet" >> ns.beam.WindowInto(window.FixedWindows(45, offset=10))
            | "AggParquet" >> all_aggregates(ns, ns.beam.GroupBy("team"))
        )
        return [tag(ns, plain, "csv-fixed"), tag(ns, sliding, "csv-ms-sliding"), tag(ns, parquet, "parquet-fixed")]

    return build


def write_parquet_scores(path, teams):
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {
        "team": teams,
        "points": pa.array([points for _, points, _ in SCORES], pa.int32()),
        "t": pa.array([t for *_, t in SCORES], pa.float64()),
    }
    pq.write_table(pa.table(columns), str(path))


def test_file_reads_give_the_general_paths_panes_through_sql_plans(spark_session_kind, tmp_path):
    paths = (tmp_path / "scores.csv", tmp_path / "ms.csv", tmp_path / "scores.parquet")
    paths[0].write_text(CSV_SCORES)
    paths[1].write_text(CSV_MS)
    write_parquet_scores(paths[2], [None if index == 3 else team for index, (team, *_) in enumerate(SCORES)])
    build = csv_shapes(tuple(map(str, paths)))
    general, _ = run(build, sql_plans=False, **spark_session_kind)
    through_sql, result = run(build, **spark_session_kind)
    assert through_sql == general
    assert any(value[1][1][0] == ("team", None) for value, *_ in general if value[0] == "csv-ms-sliding")
    assert any(value[1][1][0] == ("team", None) for value, *_ in general if value[0] == "parquet-fixed")
    notes = result.watermarks().notes
    assert len(notes) == 3
    assert all(note.startswith("SQL plan: ") and " read by the plan (" in note for note in notes.values())


def test_file_reads_through_sql_plans_same_as_beam(spark, tmp_path):
    paths = (tmp_path / "scores.csv", tmp_path / "ms.csv", tmp_path / "scores.parquet")
    paths[0].write_text(CSV_SCORES)
    write_parquet_scores(paths[2], [team for team, *_ in SCORES])
    paths[1].write_text(CSV_MS.replace("NA|", "z|").replace("\n|", "\nz|"))  # pandas reads NA as NaN

    def build(ns, p):
        do_fn = ns.beam.DoFn
        reify_here = lambda e, t=do_fn.TimestampParam, w=do_fn.WindowParam, pane=do_fn.PaneInfoParam: reify(e, t, w, pane)  # noqa: E731
        return [
            pcoll | f"Reify{index}" >> ns.beam.Map(reify_here) | f"Global{index}" >> ns.beam.WindowInto(ns.window.GlobalWindows())
            for index, pcoll in enumerate(csv_shapes(tuple(map(str, paths)))(ns, p))
        ] | ns.beam.Flatten()

    assert_same_as_beam(build, overlapping_window_rule=False)


@pytest.mark.parametrize(
    ("content", "error", "match"),
    [
        ("team,points,t\nx,3,1.5\ny,1\n", "BadRecordError", "y,1"),
        ("team,points,t\nx,3,1.5\ny,,2.0\n", "TypeError", ""),
    ],
    ids=["bad-record", "missing-summed"],
)
def test_a_csv_record_the_general_path_rejects_fails_the_sql_plan_too(spark_session_kind, tmp_path, content, error, match):
    path = tmp_path / "bad.csv"
    path.write_text(content)

    def build(ns, p):
        return stamped(ns, p | ns.beam.io.ReadFromCsv(str(path)), "Stamp") | ns.beam.GroupBy("team").aggregate_field("points", sum, "total")

    for sql_plans in (False, True):
        with pytest.raises(Exception) as caught:  # the type is checked below, by name
            run(build, sql_plans=sql_plans, **spark_session_kind)
        assert type(caught.value).__name__ == error, (sql_plans, caught.value)
        assert match in str(caught.value)


def test_a_csv_plan_is_built_as_one_query_reading_lines_and_testing_each_field_once(spark, tmp_path, monkeypatch):
    import threading
    import types

    from sparkbeam.runners.core.schema.schema_segments import find_segments
    from sparkbeam.runners.spark import sql_plan

    path = tmp_path / "scores.csv"
    path.write_text(CSV_SCORES)
    pipeline = sparkbeam.Pipeline()
    _ = (
        pipeline
        | sparkbeam.io.ReadFromCsv(str(path))
        | AssignTimestamps("t")
        | sparkbeam.WindowInto(sparkbeam.window.FixedWindows(60))
        | sparkbeam.GroupBy("team").aggregate_field("points", sum, "total")
    )
    (op,) = [builder.op for builder in find_segments(pipeline).substitutes.values() if hasattr(builder, "op")]
    backend = types.SimpleNamespace(spark=spark, sc=spark.sparkContext, num_partitions=2, broadcasts=[], step_cache=[])
    client = spark.sparkContext._gateway._gateway_client
    calls = []
    send = client.send_command
    here = threading.get_ident()  # (other threads, e.g. a run's progress line, call too)

    def counted(*args, **kwargs):
        if threading.get_ident() == here:
            calls.append(1)
        return send(*args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)
    frame = sql_plan.aggregate_dataframe(sql_plan.classic_host(backend), op)
    monkeypatch.undo()
    # Built with DataFrame methods, the plan took about 240 calls into the JVM.
    assert len(calls) < 50
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "FileScan text" in plan
    # points and t are read (try_cast) once each, not once per expression that reads them
    assert plan.count("try_cast(") == 2
    assert not [table.name for table in spark.catalog.listTables() if table.name.startswith("_pyspark")]  # the view is dropped


def test_the_panes_of_many_groups_are_built_without_cyclic_collections(spark, monkeypatch):
    import gc
    import types

    import pyarrow as pa

    from sparkbeam.runners.core.schema.schema_segments import find_segments
    from sparkbeam.runners.spark import sql_plan

    pipeline = sparkbeam.Pipeline()
    _ = (
        scores(_sparkbeam_ns(), pipeline)
        | AssignTimestamps("t")
        | sparkbeam.WindowInto(sparkbeam.window.FixedWindows(60))
        | sparkbeam.GroupBy("team").aggregate_field("points", sum, "total")
    )
    (op,) = [builder.op for builder in find_segments(pipeline).substitutes.values() if hasattr(builder, "op")]
    op = attrs.evolve(op, driver_reads=True)  # as for a capture: the panes are built on the driver
    rows = 20_000
    groups = pa.table({"k0": [f"team{i}" for i in range(rows)], "a0": list(range(rows)), "__window_start": [60_000_000 * (i % 7) for i in range(rows)]})
    monkeypatch.setattr(sql_plan, "checked_groups", lambda host, op: groups)
    backend = types.SimpleNamespace(spark=spark, sc=spark.sparkContext, step_cache=[], num_partitions=2, overlapping_window_rule=True, job_group="test")
    collections_seen = []  # while the panes are built
    build_panes = sql_plan.panes

    def counted(*args):
        seen = lambda phase, info: collections_seen.append(phase)  # noqa: E731
        gc.callbacks.append(seen)  # (the collector calls its own list: append to it)
        try:
            return build_panes(*args)
        finally:
            gc.callbacks.remove(seen)

    monkeypatch.setattr(sql_plan, "panes", counted)
    group = spark.sparkContext.getLocalProperty("spark.jobGroup.id")
    try:
        panes = sql_plan.read_segment(backend, op, None).collected
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", group)  # read_segment names its jobs
        monkeypatch.undo()
    assert collections_seen == []  # tens of thousands of tuples would set off collections
    assert gc.isenabled()
    assert len(panes) == rows
    pane = panes[rows - 1]
    assert (pane.value.team, pane.value.total, pane.windows[0].start.micros) == (f"team{rows - 1}", rows - 1, 60_000_000 * ((rows - 1) % 7))
    assert pane.timestamp.micros == pane.windows[0].end.micros - 1 and type(pane.value).__name__ == "Result"


def test_a_csv_plan_checks_its_records_in_the_jobs_of_its_one_query(spark, tmp_path):
    from sparkbeam.runners.core.loop.clock import ManualClock
    from sparkbeam.runners.core.loop.steps import StepLoop
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.runners.core.schema.schema_segments import find_segments
    from sparkbeam.runners.spark.backend import SparkBackend

    path = tmp_path / "scores.csv"
    path.write_text(CSV_SCORES)
    pipeline = sparkbeam.Pipeline()
    sparkbeam.capture(
        pipeline
        | sparkbeam.io.ReadFromCsv(str(path))
        | AssignTimestamps("t")
        | sparkbeam.WindowInto(sparkbeam.window.FixedWindows(60))
        | sparkbeam.GroupBy("team").aggregate_field("points", sum, "total")
    )
    segments = find_segments(pipeline)
    plan = plan_stages(lower(pipeline, substitutes=segments.substitutes, notes=segments.notes))
    backend = SparkBackend(spark, num_partitions=2)
    try:
        loop = StepLoop(plan, backend, ManualClock(), batch=True)
        loop.run()
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(backend.job_group)
    finally:
        backend.close()
    (totals,) = plan.lowered.captured
    emitted = sorted((e.value.team, e.windows[0].start.micros // 10**6, e.value.total) for e in loop.history.emitted_rows(totals))
    assert emitted == [("x", 0, 11), ("x", 60, 6), ("y", 60, 8), ("y", 120, 3), ("z", 0, 6)]
    # The scan and the aggregation's shuffle, then its result (adaptive execution runs them
    # as two jobs): no job to infer a schema, count, or check the records apart.
    assert 1 <= len(jobs) <= 2


def test_a_file_of_no_records_gives_no_pane_with_no_keys_either(spark, tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("team,points,t\n")

    def build(ns, p):
        return p | ns.beam.io.ReadFromCsv(str(path), dtype={"team": str, "points": int, "t": float}) | ns.beam.GroupBy().aggregate_field("points", sum, "total")

    panes, result = run(build)
    assert panes == collections.Counter()  # as the general path: no elements, no group
    assert next(iter(result.watermarks().notes.values())).startswith("SQL plan: ")
