"""The code stays lint-clean (ruff, whole repository) and type-checked (mypy on sdk/ and runners/)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_is_clean():
    # ruff and mypy are in the test extra (tests/conftest.py stops the run without them);
    # both run from this interpreter's installation, not whatever is first on PATH.
    completed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stdout[-4000:]


def test_mypy_is_clean_on_sdk_and_runners():
    completed = subprocess.run(
        [sys.executable, "-m", "mypy", "sdk", "runners"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stdout[-4000:]
