"""Where a SQL plan's panes go: made on the executors for sinks and later stages, collected
on the driver only for a capture or a side input (``runners/spark/sql_plan.py``).

The panes made on the executors equal the driver's (and the general path's: see
``test_sql_plans.py``, whose tagged outputs read the plans through a later Map), a file's
bad record or a 64-bit overflow is found before anything reads them, and a plan of a million
groups written to files runs in a driver process capped at 512 MB of JVM heap and 8 MB of
results, its Python well below what the panes would take.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

import sparkbeam
from sparkbeam.io import BadRecordError
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.schemas import AssignTimestamps

pytestmark = pytest.mark.spark

HERE = os.path.dirname(__file__)


def totals(p, path, **window):
    windowing = sparkbeam.window.SlidingWindows(60, 20) if window else sparkbeam.window.FixedWindows(60)
    return (
        p
        | "Read" >> sparkbeam.io.ReadFromCsv(str(path))
        | "Stamp" >> AssignTimestamps("t")
        | "Windows" >> sparkbeam.WindowInto(windowing, **window)
        | "Totals" >> sparkbeam.GroupBy("team").aggregate_field("points", sum, "total").aggregate_field("points", max, "best")
    )


def describe(element, timestamp=sparkbeam.DoFn.TimestampParam, window=sparkbeam.DoFn.WindowParam, pane=sparkbeam.DoFn.PaneInfoParam):
    return repr((tuple(element), timestamp.micros, window.start.micros, window.end.micros, pane))


def written(prefix):
    return sorted(line for path in glob.glob(f"{prefix}*") for line in open(path).read().splitlines())


@pytest.mark.parametrize("window", [{}, {"timestamp_combiner": sparkbeam.window.TimestampCombiner.OUTPUT_AT_EARLIEST}])
def test_panes_a_sink_writes_are_made_on_the_executors_as_the_driver_makes_them(spark_session_kind, tmp_path, window):
    path = tmp_path / "scores.csv"
    rows = [(f"team{i % 7}", i % 11, i * 3.5) for i in range(400)]
    path.write_text("team,points,t\n" + "".join(f"{team},{points},{t}\n" for team, points, t in rows))

    captured = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, **spark_session_kind))
    on_driver = sparkbeam.capture(totals(captured, path, **window))
    driver_result = captured.run()

    written_out = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, **spark_session_kind))
    totals(written_out, path, **window) | "Describe" >> sparkbeam.Map(describe) | "Write" >> sparkbeam.io.WriteToText(str(tmp_path / "out"))
    result = written_out.run()

    assert written(tmp_path / "out") == sorted(describe(e.value, e.timestamp, e.windows[0], e.pane) for e in driver_result.emissions(on_driver))
    assert result.watermarks().notes["Totals"].endswith(f"panes made on the executors; CSV read by the plan ({path})")
    assert driver_result.watermarks().notes["Totals"].endswith(f"panes collected on the driver (captured or a side input); CSV read by the plan ({path})")
    (record,) = result.watermarks().for_stage("Totals")
    assert record.elements_out == len(written(tmp_path / "out"))  # counted without collecting them


def test_panes_captured_and_read_by_a_later_stage_are_the_drivers_spread_once(spark_session_kind, tmp_path):
    path = tmp_path / "scores.csv"
    path.write_text("team,points,t\n" + "".join(f"team{i % 5},{i},{i * 7.0}\n" for i in range(100)))
    p = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, **spark_session_kind))
    aggregated = totals(p, path)
    both = sparkbeam.capture(aggregated), sparkbeam.capture(aggregated | "Describe" >> sparkbeam.Map(describe))
    result = p.run()
    on_driver, described = (list(result.emissions(pcoll)) for pcoll in both)
    assert sorted(e.value for e in described) == sorted(describe(e.value, e.timestamp, e.windows[0], e.pane) for e in on_driver)
    assert "panes collected on the driver" in result.watermarks().notes["Totals"]
    # The physical plan shows the segment (on Spark Connect too), as the planner's choice for its stage.
    assert "    planner: SQL plan: group by [team] per FixedWindows" in result.physical_plan().describe()


def test_a_bad_record_fails_the_plan_before_its_sink_writes_anything(spark_session_kind, tmp_path):
    path = tmp_path / "scores.csv"
    path.write_text("team,points,t\nx,3,1.5\ny,1\n")
    p = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, **spark_session_kind))
    totals(p, path) | "Write" >> sparkbeam.io.WriteToText(str(tmp_path / "out"))
    with pytest.raises(BadRecordError, match="y,1"):
        p.run()
    assert not glob.glob(str(tmp_path / "out*"))


def test_sums_beyond_64_bits_are_exact_when_made_on_the_executors(spark_session_kind, tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("team,points,t\n" + "".join(f"{team},{points},1.0\n" for team, points in [("x", 2**62), ("x", 2**62 + 1), ("x", 2**62), ("y", 5)]))
    p = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, **spark_session_kind))
    totals(p, path) | "Format" >> sparkbeam.Map(lambda r: f"{r.team} {r.total}") | "Write" >> sparkbeam.io.WriteToText(str(tmp_path / "out"))
    p.run()
    assert written(tmp_path / "out") == [f"x {3 * 2**62 + 1}", "y 5"]


def test_an_empty_file_gives_no_pane_and_writes_nothing(spark_session_kind, tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("team,points,t\n")
    p = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, **spark_session_kind))
    (
        p
        | sparkbeam.io.ReadFromCsv(str(path), dtype={"team": str, "points": int, "t": float})
        | "Totals" >> sparkbeam.GroupBy("team").aggregate_field("points", sum, "total")
        | "Write" >> sparkbeam.io.WriteToText(str(tmp_path / "out"))
    )
    result = p.run()
    assert written(tmp_path / "out") == []
    (record,) = result.watermarks().for_stage("Totals")
    assert record.elements_out == 0


@pytest.mark.parametrize(
    "groups, result_cap",
    [(200_000, "2m"), pytest.param(1_000_000, "8m", marks=pytest.mark.full)],
    ids=["200k", "1M"],
)
def test_many_groups_written_to_files_never_pass_through_the_driver(tmp_path, groups, result_cap):
    """A driver of its own, with 512 MB of JVM heap and task results capped at a fraction of
    what the groups' panes would weigh if they were collected (about 40 bytes a group as Arrow
    would pass them): Spark fails any job whose results pass the cap, so the run can only
    succeed when the panes are made and written on the executors. The driver's peak memory is
    a figure for benchmarks/README.md (``python tests/runners/sql_plan_job.py``), not a test."""
    events = tmp_path / "events.csv"
    with open(events, "w") as out:
        out.writelines(f"k{i},{i % 100},{(i % 600) * 100}\n" for i in range(groups))
    prefix = tmp_path / "out" / "totals"
    caps = ["--spark_conf", "spark.driver.memory=512m", "--spark_conf", f"spark.driver.maxResultSize={result_cap}"]
    completed = subprocess.run(
        [sys.executable, os.path.join(HERE, "sql_plan_job.py"), str(events), str(prefix), *caps],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    (line,) = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    report = json.loads(line.removeprefix("RESULT "))
    assert report["lines"] == groups
    assert report["notes"]["Totals"].startswith("SQL plan: ") and "panes made on the executors" in report["notes"]["Totals"]
    assert report["jvm_heap_mb"] <= 512


@pytest.mark.parametrize("read_later", [False, True], ids=["captured", "read-by-a-later-stage"])
@pytest.mark.parametrize(
    "content", ["team,points,t\nx,,1.0\ny,2,2.0\ny,4,3.0\n", "team,points,t\nx,,1.0\ny,2,2.0\ny,,3.0\n"], ids=["alone", "among-others"]
)
def test_a_missing_value_under_max_is_none_alone_and_fails_among_others_on_both_routes(spark_session_kind, tmp_path, content, read_later):
    path = tmp_path / "scores.csv"
    path.write_text(content)

    def outcome(sql_plans):
        p = sparkbeam.Pipeline(options=PipelineOptions(quiet=True, sql_plans=sql_plans, **spark_session_kind))
        best = p | sparkbeam.io.ReadFromCsv(str(path)) | "Totals" >> sparkbeam.GroupBy("team").aggregate_field("points", max, "best")
        out = sparkbeam.capture(best | sparkbeam.Map(tuple) if read_later else best)
        try:
            result = p.run()
        except Exception as error:  # the general path's failure is the reference
            return type(error).__name__
        return sorted(tuple(e.value) for e in result.emissions(out))

    expected = outcome(False)
    assert expected in ([("x", None), ("y", 4)], "TypeError")
    assert outcome(True) == expected
