"""The README's conformance table, reproduced: ``python -m tests.beam_frontend.conformance``.

Runs Beam's installed test modules of the table, and Beam's runner-validation suite
(``FnApiRunnerTest``, subclassed in ``fn_runner_suite.py`` as Beam's portable runners
subclass it), with every ``TestPipeline()`` on ``--runner=sparkbeam.SparkRunner
--state_partitions=2``, under the guard of ``beam_suites.py``: a test whose pipeline would
run on one of Beam's runners fails, and a test that runs no pipeline is counted apart.
``userstate_test.py`` runs a second time with ``beam_records.py``, which has its tests
record their outputs through a file instead of a list on the test class. Prints one line
per module (passed, failed, skipped, no pipeline, on Beam's runner) and the time each run
took; arguments after ``--`` go to pytest (``-- -x``, ``-- -n 1``). Arguments before it
choose the runs by part of their name (``util_test``, ``fn_runner``, ``beam_records``):
``python -m tests.beam_frontend.conformance combiners_test fn_runner`` runs those two only. Beam's test modules
need Beam's test extra (mock, parameterized, pyhamcrest, tenacity), which sparkbeam's test
extra includes. About an hour on two quiet cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

from tests.beam_frontend.beam_suites import OUTCOMES, module_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIPELINE_OPTIONS = "--runner=sparkbeam.SparkRunner --state_partitions=2"

SNIPPETS = "examples/snippets/transforms"
#: a snippet test module that imports what Beam's test extra does not bring (SQLAlchemy,
#: Google Cloud's enrichment handlers): left out of the run
SNIPPETS_LEFT_OUT = ("examples/snippets/transforms/elementwise/enrichment_test.py",)
#: Beam's modules of the table, below the installed apache_beam package
BEAM_MODULES = (
    "transforms/window_test.py",
    "transforms/sideinputs_test.py",
    "transforms/combiners_test.py",
    "transforms/util_test.py",
    "transforms/userstate_test.py",
    "transforms/ptransform_test.py",
    "transforms/trigger_test.py",
    # Beam's snippet tests of every transform (the documentation's examples, each with its
    # own check of what it prints), tallied as one row
    SNIPPETS,
)
#: Beam's runner-validation suite, whole (the test suite runs a subset of it)
FN_RUNNER_SUITE = "tests/beam_frontend/fn_runner_suite.py::SparkbeamRunnerTest"
RECORDS_LABEL = "transforms/userstate_test.py, outputs recorded through a file (beam_records)"


def _beam_dir() -> str:
    import apache_beam

    return os.path.dirname(apache_beam.__file__)


def _run(paths: list[str], plugins: list[str], extra: list[str], folder: str, name: str) -> tuple[dict[str, str], float]:
    report = os.path.join(folder, f"{name}.json")
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q", "-rfE"]
    for plugin in plugins:
        command += ["-p", plugin]
    # Test by test over two workers: Beam's modules share nothing between their tests but
    # the worker's Spark session, and trigger_test's transcripts take minutes each.
    command += ["-n", "2", "--dist", "load", *extra, *paths]
    command += [f"--test-pipeline-options={PIPELINE_OPTIONS}", f"--conformance-json={report}"]
    print("$", " ".join(command), flush=True)
    started = time.monotonic()
    subprocess.run(command, cwd=ROOT, check=False)
    took = time.monotonic() - started
    if not os.path.exists(report):
        msg = f"pytest wrote no outcomes ({report}): see its output above"
        raise SystemExit(msg)
    with open(report) as outcomes:
        return json.load(outcomes), took


def _tally(outcomes: dict[str, str], rename: str | None = None) -> dict[str, Counter]:
    table: dict[str, Counter] = {}
    for nodeid, outcome in outcomes.items():
        module = rename or module_of(nodeid)
        if module.startswith(SNIPPETS + "/"):
            module = f"{SNIPPETS}/ (Beam's snippet tests, every module)"
        if "fn_runner_suite.py" in module:
            module = "runners/portability/fn_api_runner/fn_runner_test.py (FnApiRunnerTest)"
        table.setdefault(module, Counter())[outcome] += 1
    return table


def main(argv: list[str]) -> None:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    chosen = argv[: argv.index("--")] if "--" in argv else argv
    beam = _beam_dir()
    # trigger_test last: its transcripts are the slowest.
    names = [m for m in BEAM_MODULES if "trigger" not in m] + ["fn_runner_test.py"]
    names += [m for m in BEAM_MODULES if "trigger" in m]
    runs_records = not chosen or any(c in "beam_records userstate_test" for c in chosen)
    names = [n for n in names if not chosen or any(c in n for c in chosen)]
    if not names and not runs_records:
        msg = f"no module of the table matches {chosen}: name one of {', '.join(BEAM_MODULES)}, fn_runner_test or beam_records"
        raise SystemExit(msg)
    suites = "tests.beam_frontend.beam_suites"
    # Each test's outcome is written as it comes (beam_suites.py): a run stopped early keeps them here.
    folder = tempfile.mkdtemp(prefix="sparkbeam-conformance-")
    print(f"outcomes in {folder}", flush=True)
    table: dict[str, Counter] = {}
    timings = []
    if names:
        paths = [FN_RUNNER_SUITE if n == "fn_runner_test.py" else os.path.join(beam, n) for n in names]
        if SNIPPETS in names:
            paths += [f"--ignore={os.path.join(beam, left_out)}" for left_out in SNIPPETS_LEFT_OUT]
        outcomes, took = _run(paths, [suites], extra, folder, "modules")
        table.update(_tally(outcomes))
        timings.append(f"{took:.0f} s for {', '.join(names)}")
    if runs_records:
        userstate = [os.path.join(beam, "transforms/userstate_test.py")]
        records, took = _run(userstate, [suites, "tests.beam_frontend.beam_records"], extra, folder, "records")
        table.update(_tally(records, rename=RECORDS_LABEL))
        timings.append(f"{took:.0f} s for userstate_test with beam_records")
    print()
    print("| Module | " + " | ".join(OUTCOMES) + " |")
    print("| --- |" + " --- |" * len(OUTCOMES))
    for module, counts in sorted(table.items()):
        print(f"| `{module}` | " + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
    print("\n" + "; ".join(timings))


if __name__ == "__main__":
    main(sys.argv[1:])
