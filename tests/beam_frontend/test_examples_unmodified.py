"""Beam's example pipelines as installed, importing apache_beam, on sparkbeam by the flag alone.

Each example is driven as ``tests/compat`` drives it (``tests/compat/examples.py``: its
own tests' inputs, local files), once on Beam's FnApiRunner and once with
``--runner=sparkbeam.SparkRunner``, and the outputs are compared. ``tests/compat`` runs all
of them import-rewritten; here a selection covering each family and each kind of driver
(``run(argv)`` on text, transforms applied to a test's data, metrics, windows and
triggers, side inputs, tagged outputs, keys grouped by their coder's bytes) keeps the
suite fast. An example the runner cannot run yet is a strict xfail naming its error.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from tests.compat.examples import ALL
from tests.compat.harness import Example, Gap, run_example_unmodified

pytestmark = pytest.mark.spark

SELECTED = [
    "wordcount/wordcount",
    "wordcount/wordcount_with_metrics",
    "wordcount/wordcount_dataframe",
    "game/user_score",
    "game/hourly_team_score",
    "game/leader_board",
    "game/game_stats",
    "cookbook/coders",
    "cookbook/group_with_coder",
    "cookbook/multiple_output_pardo",
    "cookbook/bigquery_side_input",
    "cookbook/ordered_window_elements_batch",
    "complete/autocomplete",
    "complete/tfidf",
    "complete/top_wikipedia_sessions",
]

#: how an example fails on sparkbeam's runner, where it does
GAPS: dict[str, Gap] = {}

BY_ID = {example.id: example for example in ALL}


def _param(example_id: str):
    example = BY_ID[example_id]
    gap = GAPS.get(example_id)
    marks = [gap.xfail()] if gap else []
    return pytest.param(example, gap, id=example_id, marks=marks)


@pytest.mark.parametrize(("example", "gap"), [_param(example_id) for example_id in SELECTED])
def test_unmodified_example_runs_as_on_beam(example: Example, gap: Gap | None, spark_session_kind, tmp_path):
    if not _installed(example.module):
        # tests/oldest_versions.sh runs this with the oldest apache-beam setup.cfg admits.
        pytest.skip(f"apache-beam {importlib.metadata.version('apache-beam')} does not ship {example.module}")
    run_example_unmodified(example, tmp_path, gap, tuple(f"--{name}={value}" for name, value in spark_session_kind.items()))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
