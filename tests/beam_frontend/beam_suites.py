"""A pytest plugin to run Beam's own test modules on sparkbeam's runner, and count honestly.

Beam's ``TestPipeline`` reads ``--test-pipeline-options`` from the command line; Beam's
repository registers that option in its conftest, which the installed package lacks. This
plugin registers it, so that::

    python -m pytest -p tests.beam_frontend.beam_suites -o addopts="" \\
        "$(python -c 'import apache_beam,os;print(os.path.dirname(apache_beam.__file__))')/transforms/util_test.py" \\
        --test-pipeline-options="--runner=sparkbeam.SparkRunner"

runs Beam's tests with every ``TestPipeline()`` on sparkbeam. A pipeline a test builds with
no runner (``beam.Pipeline(options=...)``, ``TestPipeline(options=...)``: its own options
replace ``--test-pipeline-options``) runs on that option's runner too, without its other
options: the plugin makes it Beam's default runner for the run, where Beam would run such
a pipeline on its DirectRunner. ``python -m
tests.beam_frontend.conformance`` runs every module of the README's conformance table this
way and prints the table.

Every test runs under a guard (``beam_guard.py``): a pipeline that would run on one of
Beam's runners (pinned by the test, run eagerly on a list, or built with no runner) fails
the test, naming the runner, and is counted apart ("on Beam's runner"); a test that passed
without running any pipeline is reported as ``no pipeline`` rather than passed. The last
section of the run's output is the table, one line per module; ``--conformance-json=PATH``
writes each test's outcome there too.

For ``transforms/userstate_test.py``, ``-p tests.beam_frontend.beam_records`` has its tests
record their pipelines' outputs through a file (``beam_records.py`` says why).
"""

from __future__ import annotations

import json
import os
import shlex
from collections import Counter, defaultdict
from typing import Any

import pytest

from tests.beam_frontend.beam_guard import BEAM_RUNS, SPARKBEAM_RUNS, RunGuard

#: the outcomes a test is counted under, in the table's order
OUTCOMES = ("passed", "failed", "skipped", "no pipeline", "on Beam's runner")

_GUARD_KEY = pytest.StashKey[RunGuard]()


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--test-pipeline-options", action="store", default=None, help="pipeline options for Beam's TestPipeline")
    parser.addoption("--not-use-test-runner-api", action="store_true", default=False, help="Beam's TestPipeline flag")
    parser.addoption("--conformance-json", action="store", default=None, help="write each test's conformance outcome to this file")


def pytest_configure(config: Any) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.testing.test_pipeline import TestPipeline

    options = config.getoption("--test-pipeline-options")
    if options:
        TestPipeline.pytest_test_pipeline_options = options
        runner = PipelineOptions(shlex.split(options)).view_as(StandardOptions).runner
        if runner:
            # Beam's Pipeline takes its runner from here when neither it nor its options name one.
            StandardOptions.DEFAULT_RUNNER = runner
    if not hasattr(config, "workerinput"):  # the tally is the controller's, which sees every report
        config.pluginmanager.register(_Tally(config), "beam_suites_tally")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    guard = RunGuard()
    item.stash[_GUARD_KEY] = guard
    guard.install()
    try:
        yield
    finally:
        guard.uninstall()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    guard = item.stash.get(_GUARD_KEY, None)
    if guard is None:
        return
    report.user_properties.append((SPARKBEAM_RUNS, guard.record.sparkbeam_runs))
    report.user_properties.append((BEAM_RUNS, list(guard.record.beam_runners)))
    problem = guard.problem()
    if problem is not None and not report.skipped:
        # Failed even where the test caught BeamRunnerUsed itself (assertRaises(Exception)).
        earlier = f"\n\n{report.longreprtext}" if report.failed else ""
        report.outcome = "failed"
        report.longrepr = f"{problem}{earlier}"


def _properties(report: Any) -> dict[str, Any]:
    return dict(report.user_properties)


def conformance_outcome(report: Any) -> str | None:
    """A call report's outcome in the table's terms (None for setup and teardown reports
    that change nothing)."""
    if report.when != "call":
        if report.failed:
            return "failed"
        if report.skipped:
            return "skipped"
        return None
    properties = _properties(report)
    if properties.get(BEAM_RUNS):
        return "on Beam's runner"
    if report.skipped:
        return "skipped"
    if report.failed:
        return "failed"
    if properties.get(SPARKBEAM_RUNS, 0) == 0:
        return "no pipeline"
    return "passed"


def pytest_report_teststatus(report: Any, config: Any) -> Any:
    if report.when == "call" and report.passed and conformance_outcome(report) == "no pipeline":
        return "no pipeline", "n", ("NO PIPELINE", {"yellow": True})
    return None


def module_of(nodeid: str) -> str:
    """The table's name for a test's module: Beam's path below ``apache_beam``."""
    path = nodeid.split("::", 1)[0].replace(os.sep, "/")
    marker = "apache_beam/"
    if marker in path:
        return path[path.rindex(marker) + len(marker):]
    return path


class _Tally:
    """Counts each test once (its call, or the setup that failed or skipped it) per module."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        outcome = conformance_outcome(report)
        if outcome is None:
            return
        # A module outside the rootdir (Beam's, installed) may reach the controller with no
        # path in its node id (xdist): the report's location names the file.
        nodeid = report.nodeid if not report.nodeid.startswith("::") else f"{report.location[0]}{report.nodeid}"
        if report.when == "teardown" and self.outcomes.get(nodeid) not in (None, "passed", "no pipeline"):
            return  # already failed or skipped: an error in its teardown changes nothing
        self.outcomes[nodeid] = outcome
        self._write()

    def _write(self) -> None:
        """The outcomes so far, rewritten after each test: a run stopped early keeps them."""
        path = self.config.getoption("--conformance-json")
        if path:
            with open(f"{path}.part", "w") as out:
                json.dump(self.outcomes, out, indent=1, sort_keys=True)
            os.replace(f"{path}.part", path)

    def table(self) -> dict[str, Counter]:
        by_module: dict[str, Counter] = defaultdict(Counter)
        for nodeid, outcome in self.outcomes.items():
            by_module[module_of(nodeid)][outcome] += 1
        return dict(sorted(by_module.items()))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.outcomes:
            return
        terminalreporter.section("conformance: each test counted once")
        terminalreporter.write_line("| Module | " + " | ".join(OUTCOMES) + " |")
        for module, counts in self.table().items():
            terminalreporter.write_line(f"| `{module}` | " + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
        self._write()
