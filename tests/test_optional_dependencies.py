"""A missing optional dependency fails with a message naming the extra that installs it, and
before Spark starts where the run has not begun yet.

Each check runs in a fresh interpreter in which importing the package fails, as it does on a
machine where only ``pip install sparkbeam`` ran (``.ci/run`` also runs the main example in
such an environment).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# None in sys.modules: importing the package (or a submodule) raises ImportError, and
# importlib.util.find_spec answers None, as on a machine that lacks it.
BLOCKER = """
import sys
sys.modules[%r] = None
"""


def run_without(module: str, body: str) -> subprocess.CompletedProcess[str]:
    script = BLOCKER % module + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120)


def last_line(completed: subprocess.CompletedProcess[str]) -> str:
    return (completed.stdout + completed.stderr).strip().splitlines()[-1]


def test_parquet_without_pyarrow_names_the_extra_when_the_transform_is_built(tmp_path):
    completed = run_without(
        "pyarrow",
        f"""
        import sparkbeam as beam
        p = beam.Pipeline()
        try:
            p | beam.io.ReadFromParquet({str(tmp_path / "x.parquet")!r})
        except ImportError as error:
            print("refused:", error)
        assert "pyspark" not in sys.modules  # before any Spark
        """,
    )
    assert completed.returncode == 0, completed.stderr
    assert last_line(completed) == (
        "refused: ReadFromParquet needs pyarrow, an optional extra of sparkbeam: pip install 'sparkbeam[parquet]'"
    )


def test_a_schemad_aggregation_without_pyarrow_takes_the_general_path_and_says_why(tmp_path):
    # The SQL plan reads its groups through Arrow; without pyarrow the run is still exact,
    # on the general path, and the plan's note says what would enable the SQL plan.
    scores = tmp_path / "scores.csv"
    scores.write_text("team,score\nred,1\nblue,2\nred,3\n")
    completed = run_without(
        "pyarrow",
        f"""
        import sparkbeam as beam
        from sparkbeam.runners.core.lowering.settings import RunSettings
        from sparkbeam.runners.spark.runner import _lower
        p = beam.Pipeline()
        rows = p | beam.io.ReadFromCsv({str(scores)!r})
        rows | "Totals" >> beam.GroupBy("team").aggregate_field("score", sum, "total")
        lowered = _lower(p, RunSettings(sql_plans=True))
        print(lowered.notes["Totals/Combine"])
        """,
    )
    assert completed.returncode == 0, completed.stderr
    assert last_line(completed) == (
        "general path: pyarrow is not installed (pip install 'sparkbeam[parquet]' for SQL plans)"
    )


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        # Plots need matplotlib alone; tables of the timeline need pandas alone.
        ("matplotlib", ["no error", "plot_watermarks needs matplotlib: pip install 'sparkbeam[plot]'"]),
        ("pandas", ["Timeline.to_pandas needs pandas: pip install 'sparkbeam[plot]'", "no error"]),
    ],
)
def test_plots_and_tables_without_their_extra_name_it(module, expected):
    completed = run_without(
        module,
        """
        import sparkbeam as beam
        from sparkbeam.options.pipeline_options import PipelineOptions
        from sparkbeam.runners.core.loop.memory import run_in_memory
        from sparkbeam.testing.test_stream import TestStream
        from sparkbeam.transforms import window

        p = beam.Pipeline(options=PipelineOptions(streaming=True))
        events = (TestStream().add_elements([window.TimestampedValue(("a", 1), 10)])
                  .advance_watermark_to(70).advance_watermark_to_infinity())
        totals = beam.capture(p | events | beam.WindowInto(window.FixedWindows(60)) | beam.CombinePerKey(sum))
        result = run_in_memory(p, streaming=True)
        for call in (lambda: result.watermarks().to_pandas(), lambda: result.plot_watermarks({"totals": totals})):
            try:
                call()
                print("no error")
            except ImportError as error:
                print(error)
        """,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().splitlines() == expected


def test_the_beam_front_end_without_apache_beam_names_the_extra():
    completed = run_without("apache_beam", "import sparkbeam.runners.beam\n")
    assert completed.returncode != 0
    assert last_line(completed) == (
        "ImportError: sparkbeam.runners.beam runs apache_beam pipelines and needs apache-beam: "
        "pip install 'sparkbeam[beam]' (sparkbeam's own pipeline API needs nothing more)"
    )
