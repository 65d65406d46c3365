"""The tutorials run: each notebook executes top to bottom on a fresh namespace of a kernel
running this interpreter (two kernels share the notebooks, each starting its embedded Spark
once), and the outputs committed with it are the ones it produces now.

When a notebook's code or sparkbeam's behaviour changes, regenerate the committed outputs:

    python notebooks/regenerate.py

Run these tests alone with ``pytest -m notebook tests/test_notebooks.py`` (a minute or two).
"""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
REGENERATE = "python notebooks/regenerate.py"


def _load_regenerate():
    spec = importlib.util.spec_from_file_location("sparkbeam_notebooks_regenerate", REPO / "notebooks" / "regenerate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


regenerate = _load_regenerate()
NOTEBOOKS = regenerate.notebooks()


def test_the_tutorials_are_there():
    assert [path.name for path in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_watermarks_between_stages.ipynb",
        "03_triggers_and_panes.ipynb",
        "04_overlapping_windows.ipynb",
        "05_event_time_sort.ipynb",
    ]


def _render(outputs: list[tuple[str, ...]]) -> list[str]:
    lines = []
    for output in outputs:
        kind, *parts = output
        lines.append(f"--- {kind} {' '.join(parts[:-1]) if kind == 'stream' else ''}".rstrip())
        if kind == "image":
            lines.append("<an image>")
        else:
            lines.extend(parts[-1].splitlines())
    return lines


@pytest.fixture(scope="module")
def executed_notebooks(request):
    """Every notebook whose test runs here executed once (those of the full matrix only
    there, ``tests/full_matrix.py``), on one kernel per two notebooks, each with its Spark."""
    running = {
        item.callspec.params["path"]
        for item in request.session.items
        if item.originalname == "test_notebook_runs_and_its_committed_outputs_are_current"
        and not any(mark.name == "skip" for mark in item.iter_markers())
    }
    chosen = [path for path in NOTEBOOKS if path in running]
    return regenerate.execute_all(chosen, at_once=max(1, len(chosen) // 2))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_and_its_committed_outputs_are_current(path, executed_notebooks):
    from nbclient.exceptions import CellExecutionError

    committed = nbformat.read(path, as_version=4)
    executed = executed_notebooks[path]
    if isinstance(executed, CellExecutionError):
        pytest.fail(f"{path.name} fails when run top to bottom:\n{executed}", pytrace=False)
    if isinstance(executed, Exception):
        raise executed

    code_cells = [cell for cell in committed.cells if cell.cell_type == "code"]
    stale = []
    for cell, want, got in zip(code_cells, regenerate.comparable_outputs(committed), regenerate.comparable_outputs(executed)):
        if want != got:
            diff = "\n".join(
                difflib.unified_diff(_render(want), _render(got), "committed", "executed now", lineterm="", n=2)
            )
            stale.append(f"cell starting {cell.source.splitlines()[0]!r}:\n{diff}")
    if stale:
        pytest.fail(
            f"the committed outputs of {path.name} are not what it produces now; regenerate them with "
            f"`{REGENERATE} {path.stem[:2]}` (or `{REGENERATE}` for all) and commit the notebook.\n\n"
            + "\n\n".join(stale),
            pytrace=False,
        )
