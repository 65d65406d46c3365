"""A subset of Beam's runner-validation suite (``FnApiRunnerTest``) on sparkbeam's runner.

The whole class takes minutes, so the test suite runs the tests below, one per feature of
the class that sparkbeam's runner lacked before it ran the class (drain, metrics with
bounded tries, bundle finalization, rebatched batched DoFns, combiner packing, an unbounded
read); side inputs, state and timers and windowed combines have tests of their own in the
suite. ``python -m tests.beam_frontend.conformance fn_runner`` runs all of it
(``fn_runner_suite.py``). Each test runs under the guard of
``beam_guard.py``: a pipeline that would run on one of Beam's runners fails it.
"""

from __future__ import annotations

import unittest

import pytest

# The module, not its class: pytest collects every TestCase class a test module's namespace holds.
from tests.beam_frontend import fn_runner_suite
from tests.beam_frontend.beam_guard import RunGuard
from tests.beam_frontend.fn_runner_suite import _shared_spark_session  # noqa: F401

pytestmark = pytest.mark.spark

SUBSET = frozenset(
    {
        "test_batch_rebatch_pardos",
        "test_metrics",
        "test_pack_combiners",
        "test_sdf_with_truncate",
        "test_unbounded_source_read",
        "test_register_finalizations",
    }
)


@pytest.fixture(autouse=True)
def _guarded():
    with RunGuard() as guard:
        yield guard
    problem = guard.problem()
    if problem is not None:
        pytest.fail(problem)


class SparkbeamRunnerSubsetTest(fn_runner_suite.SparkbeamRunnerTest):
    """``SparkbeamRunnerTest`` with only the ``SUBSET`` of its tests (the others set to None,
    which unittest's loader, and so pytest, does not collect)."""


for _name in unittest.TestLoader().getTestCaseNames(fn_runner_suite.SparkbeamRunnerTest):
    if _name not in SUBSET:
        setattr(SparkbeamRunnerSubsetTest, _name, None)
