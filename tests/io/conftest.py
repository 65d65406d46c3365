"""Helpers for the IO tests: run a sparkbeam pipeline and collect what a PCollection emitted."""

from __future__ import annotations

import os
from typing import Any

import pytest

import sparkbeam


def run(build: Any) -> Any:
    """Build with ``build(p)`` (returning a PCollection or a dict/tuple of them), run, return values."""
    p = sparkbeam.Pipeline()
    outputs = build(p)
    single = not isinstance(outputs, (tuple, list))
    captured = [sparkbeam.capture(o) for o in ([outputs] if single else outputs)]
    result = p.run()
    values = [[e.value for e in result.emissions(pc)] for pc in captured]
    return values[0] if single else values


def listing(directory: Any) -> list[str]:
    """Every file under ``directory``, in hidden folders too, relative and sorted."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), str(directory))
        for folder, _, names in os.walk(str(directory))
        for name in names
    )


def beam_dataframe_imports() -> bool:
    """Whether Beam's dataframe API (behind its CSV and JSON transforms) imports here."""
    try:
        import apache_beam.dataframe.convert  # noqa: F401
    except Exception:  # it breaks on import with pandas 3
        return False
    return True


needs_beam_dataframe = pytest.mark.skipif(
    not beam_dataframe_imports(),
    reason="Beam's dataframe API (behind its ReadFromCsv/ReadFromJson) does not import with this pandas",
)


@pytest.fixture
def runner(spark: Any) -> Any:
    return run
