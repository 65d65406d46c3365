"""Beam's runner-validation suite, ``FnApiRunnerTest``, against sparkbeam's runner.

Beam validates its portable runners with this one class: ``PortableRunnerTest``,
``SparkRunnerTest``, ``FlinkRunnerTest`` and ``PrismRunnerTest`` subclass it, override
``create_pipeline`` and ``create_options``, and skip, with a reason, what their runner
cannot do. ``SparkbeamRunnerTest`` here does the same for sparkbeam's runner and skips
nothing: every test Beam itself does not skip passes. (Not ``SparkRunnerTest``: Beam skips
its event-time timer tests by class name for its own Spark runner's class.) The module is not named ``test_*`` so that the
test suite does not run the whole class (several minutes): ``test_fn_runner_suite.py`` runs
a subset of it, and ``python -m tests.beam_frontend.conformance`` all of it, under the guard
that fails a test whose pipeline runs on one of Beam's runners instead.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner_test

import sparkbeam
from sparkbeam.runners.beam.options import SparkBeamOptions


@pytest.fixture(autouse=True)
def _shared_spark_session(spark):
    """The runner finds the tests' shared session (tests/conftest.py) and runs on it."""
    return spark


class SparkbeamRunnerTest(fn_runner_test.FnApiRunnerTest):
    def create_options(self):
        return PipelineOptions(["--state_partitions=2"])

    def create_pipeline(self, is_drain=False):
        options = self.create_options()
        # As FnApiRunner(is_drain=True): restrictions truncated, as when a pipeline is drained.
        options.view_as(SparkBeamOptions).drain = is_drain
        return beam.Pipeline(runner=sparkbeam.SparkRunner(), options=options)

    def test_metrics(self):
        # Beam's default leaves bounded tries unchecked (its portable runners drop them);
        # sparkbeam keeps them, so this checks them too.
        super().test_metrics(check_bounded_trie=True)
