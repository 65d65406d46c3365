"""Helpers for the IO tests: run a sparkbeam pipeline and collect what a PCollection emitted."""

from __future__ import annotations

import os
from typing import Any

import pytest

import sparkbeam


def run(build: Any, **options: Any) -> Any:
    """Build with ``build(p)`` (returning a PCollection or a dict/tuple of them), run with
    the pipeline ``options`` (``spark_session_kind``'s), return values."""
    from sparkbeam.options.pipeline_options import PipelineOptions

    p = sparkbeam.Pipeline(options=PipelineOptions(**options))
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


@pytest.fixture
def runner(spark: Any) -> Any:
    return run
