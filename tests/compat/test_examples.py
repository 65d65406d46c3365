"""Beam's example pipelines, unmodified but for their imports, against apache_beam's output.

One test per example (``family/name``); see ``examples.py`` for how each is driven and
the README's compatibility table for the status of each.
"""

from __future__ import annotations

import pytest

from tests.compat.examples import ALL
from tests.compat.harness import Example, run_example

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("example", [example.param() for example in ALL])
def test_example_runs_as_on_beam(example: Example, spark, tmp_path):
    run_example(example, tmp_path)
