"""The test extra (``setup.cfg``, ``[options.extras_require] test``) must be installed whole.

A declared test dependency that is missing is a broken environment, not a reason to skip:
a skip would let the run pass while whole modules (Beam's transcripts, the oracle pairs,
the notebooks) never ran. ``tests/conftest.py`` calls ``unmet_test_requirements`` before
collecting and stops the run naming what is missing and the command that installs it.

The check reads installed distributions' metadata and imports nothing, so a test may still
block an import (``apache_beam``, ``pyspark``) to prove that some code does not need it.
"""

from __future__ import annotations

import configparser
import importlib.metadata
from pathlib import Path

from packaging.requirements import Requirement

SETUP_CFG = Path(__file__).resolve().parents[1] / "setup.cfg"
INSTALL_COMMAND = "pip install -e '.[test]'"


def declared_requirements(setup_cfg: Path = SETUP_CFG, extra: str = "test") -> list[Requirement]:
    """The requirements of ``extra`` as ``setup_cfg`` declares them (``%(name)s`` expanded)."""
    config = configparser.ConfigParser()
    config.read(setup_cfg)
    lines = config.get("options.extras_require", extra).splitlines()
    return [Requirement(line) for line in (line.strip() for line in lines) if line and not line.startswith("#")]


def unmet(requirements: list[Requirement]) -> list[str]:
    """One line per requirement that is not installed, or installed at a version it excludes."""
    problems = []
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{requirement.name} is not installed (declared: {requirement})")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement.name} {version} is installed, but the test extra declares {requirement}")
    return problems


def unmet_test_requirements(setup_cfg: Path = SETUP_CFG) -> str | None:
    """A message naming every unmet test requirement and the install command, or None."""
    problems = unmet(declared_requirements(setup_cfg))
    if not problems:
        return None
    return (
        "the test extra is not installed as setup.cfg declares it, so tests would be skipped "
        "or fail for the wrong reason:\n  " + "\n  ".join(problems) + f"\ninstall it with: {INSTALL_COMMAND}"
    )
