"""A pytest plugin to run Beam's own test modules on sparkbeam's runner.

Beam's ``TestPipeline`` reads ``--test-pipeline-options`` from the command line; Beam's
repository registers that option in its conftest, which the installed package lacks. This
plugin registers it, so that::

    python -m pytest -p tests.beam_frontend.beam_suites -o addopts="" \\
        "$(python -c 'import apache_beam,os;print(os.path.dirname(apache_beam.__file__))')/transforms/util_test.py" \\
        --test-pipeline-options="--runner=sparkbeam.SparkRunner"

runs Beam's tests with every ``TestPipeline()`` on sparkbeam (the README's conformance table).
For ``transforms/userstate_test.py`` add ``-p tests.beam_frontend.beam_records``, which has
its tests record their pipelines' outputs through a file (``beam_records.py`` says why).
Beam's test modules import packages of Beam's own test extra:
``pip install mock parameterized pyhamcrest``, in a virtualenv of its own: with them Beam's
modules export more names, and ``tests/sdk/test_beam_surface.py``'s record of Beam's names
no longer matches what it finds.
"""

from __future__ import annotations

from typing import Any


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--test-pipeline-options", action="store", default=None, help="pipeline options for Beam's TestPipeline")
    parser.addoption("--not-use-test-runner-api", action="store_true", default=False, help="Beam's TestPipeline flag")


def pytest_configure(config: Any) -> None:
    from apache_beam.testing.test_pipeline import TestPipeline

    options = config.getoption("--test-pipeline-options")
    if options:
        TestPipeline.pytest_test_pipeline_options = options
