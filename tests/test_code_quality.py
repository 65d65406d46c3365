"""The code stays lint-clean (ruff, whole repository) and type-checked (mypy on sdk/ and runners/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the test extra: pip install -e '.[test]'")
def test_ruff_is_clean():
    completed = subprocess.run(["ruff", "check", "."], cwd=ROOT, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout[-4000:]


def test_mypy_is_clean_on_sdk_and_runners():
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    completed = subprocess.run(
        [sys.executable, "-m", "mypy", "sdk", "runners"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stdout[-4000:]
