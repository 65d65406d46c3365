"""``--requirements_file`` and ``--setup_file`` install packages for the executors, or the
run is refused naming the option.

Packages are built here, offline: a wheel written by hand for requirements files, and for
setup files a pyproject.toml project whose build backend lives in the project itself (so
pip's isolated build environment needs nothing from an index). Each test uses module
names of its own, so no Python worker of another test can have imported them.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import uuid
import zipfile

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.spark.dependencies import (
    DependencyError,
    install_for_executors,
    zip_for_executors,
)
from tests.runners.wheels import write_requirements, write_wheel

pytestmark = pytest.mark.timeout(600)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


IN_TREE_BACKEND = '''
import os, zipfile

NAME, VERSION, DEPENDENCY = {name!r}, "0.1", {dependency!r}


def _metadata():
    requires = "Requires-Dist: " + DEPENDENCY + "\\n" if DEPENDENCY else ""
    return "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n" + requires


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist_info = NAME + "-" + VERSION + ".dist-info"
    filename = NAME + "-" + VERSION + "-py3-none-any.whl"
    with open(os.path.join(os.path.dirname(__file__), NAME + ".py")) as handle:
        source = handle.read()
    files = {{
        NAME + ".py": source,
        dist_info + "/METADATA": _metadata(),
        dist_info + "/WHEEL": "Wheel-Version: 1.0\\nGenerator: in-tree\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    }}
    files[dist_info + "/RECORD"] = "".join(path + ",,\\n" for path in list(files) + [dist_info + "/RECORD"])
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return filename
'''


def write_project(folder, name: str, source: str, dependency: str | None = None) -> str:
    """A project whose pyproject.toml builds it with a backend inside the project."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "pyproject.toml"), "w") as handle:
        handle.write('[build-system]\nrequires = []\nbuild-backend = "in_tree_backend"\nbackend-path = ["."]\n')
    with open(os.path.join(folder, "in_tree_backend.py"), "w") as handle:
        handle.write(IN_TREE_BACKEND.format(name=name, dependency=dependency))
    with open(os.path.join(folder, f"{name}.py"), "w") as handle:
        handle.write(source)
    return os.path.join(folder, "pyproject.toml")


def call_on_executors(module: str, function: str):
    """A function that imports ``module`` where it runs (on the executors), not here."""

    def call(x):
        return getattr(importlib.import_module(module), function)(x)

    return call


def run_map(fn, **options):
    p = beam.Pipeline(options=PipelineOptions(**options))
    out = beam.capture(p | beam.Create([1, 2]) | "Call" >> beam.Map(fn))
    return sorted(e.value for e in p.run().emissions(out))


@pytest.mark.spark
def test_a_requirements_file_installs_what_the_executors_lack(spark, tmp_path):
    name = unique("sbdep")
    write_wheel(tmp_path / "wheels", name, "def triple(x):\n    return 3 * x\n")
    requirements = write_requirements(tmp_path / "requirements.txt", tmp_path / "wheels", f"{name}==1.0")
    with pytest.raises(ModuleNotFoundError, match=name):
        run_map(call_on_executors(name, "triple"))
    environment_before, path_before = dict(spark.sparkContext.environment), list(sys.path)
    assert run_map(call_on_executors(name, "triple"), requirements_file=requirements) == [3, 6]
    assert dict(spark.sparkContext.environment) == environment_before
    assert sys.path == path_before


@pytest.mark.spark
def test_a_setup_file_installs_its_project_and_the_projects_dependencies(spark, tmp_path, monkeypatch):
    dependency = unique("sbdep")
    project = unique("sbproject")
    write_wheel(tmp_path / "wheels", dependency, "FACTOR = 10\n")
    setup_file = write_project(
        tmp_path / "project",
        project,
        f"import {dependency}\n\ndef scale(x):\n    return {dependency}.FACTOR * x\n",
        dependency=f"{dependency}==1.0",
    )
    # pip reads its settings from the environment: the dependency comes from the wheelhouse.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    assert run_map(call_on_executors(project, "scale"), setup_file=setup_file) == [10, 20]


@pytest.mark.spark
def test_what_this_interpreter_has_is_not_installed_again(spark, tmp_path, caplog):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("attrs\n")
    environment_before = dict(spark.sparkContext.environment)
    with caplog.at_level(logging.INFO, logger="sparkbeam.runners.spark.dependencies"):
        assert run_map(str, requirements_file=str(requirements)) == ["1", "2"]
    assert "already installed in" in caplog.text
    assert dict(spark.sparkContext.environment) == environment_before


def test_a_requirements_file_reaches_a_spark_connect_servers_workers(connect_server, tmp_path):
    """Under Spark Connect the packages are zipped here and added to the server's session
    (``addArtifacts(pyfile=True)``); its Python workers import them."""
    name = unique("sbdep")
    write_wheel(tmp_path / "wheels", name, "def triple(x):\n    return 3 * x\n")
    requirements = write_requirements(tmp_path / "requirements.txt", tmp_path / "wheels", f"{name}==1.0")
    with pytest.raises(Exception, match=name):
        run_map(call_on_executors(name, "triple"), spark_remote=connect_server.url)
    assert run_map(call_on_executors(name, "triple"), spark_remote=connect_server.url, requirements_file=requirements) == [3, 6]
    # the same packages again: added once (the server refuses a second artifact of one name)
    assert run_map(call_on_executors(name, "triple"), spark_remote=connect_server.url, requirements_file=requirements) == [3, 6]


@pytest.mark.spark
def test_executors_elsewhere_get_the_packages_as_a_zip(spark, tmp_path):
    """The path for a cluster master, taken here on the local session: the packages are
    zipped and added with addPyFile, which puts them on the executors' sys.path."""
    name = unique("sbdep")
    write_wheel(tmp_path / "wheels", name, "def square(x):\n    return x * x\n")
    requirements = write_requirements(tmp_path / "requirements.txt", tmp_path / "wheels", f"{name}==1.0")
    undo = install_for_executors(spark.sparkContext, requirements, None, same_machine=False)
    undo()
    assert run_map(call_on_executors(name, "square")) == [1, 4]


def test_compiled_packages_cannot_go_in_the_zip(tmp_path):
    (tmp_path / "fastthing").mkdir()
    (tmp_path / "fastthing" / "__init__.py").write_text("")
    (tmp_path / "fastthing" / "_speedups.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    (tmp_path / "plain.py").write_text("x = 1\n")
    with pytest.raises(DependencyError, match=r"--requirements_file=r.txt: fastthing contain compiled modules") as failure:
        zip_for_executors("--requirements_file=r.txt", str(tmp_path))
    assert "spark.archives" in str(failure.value)


def test_pure_packages_zip_the_same_way_each_time(tmp_path):
    (tmp_path / "plain.py").write_text("x = 1\n")
    first = zip_for_executors("--requirements_file=r.txt", str(tmp_path))
    assert zip_for_executors("--requirements_file=r.txt", str(tmp_path)) == first
    assert zipfile.ZipFile(first).namelist() == ["plain.py"]


@pytest.mark.spark
def test_bad_dependency_options_are_refused_naming_them(spark, tmp_path):
    with pytest.raises(DependencyError, match=r"--requirements_file=.*missing.txt: no such file"):
        run_map(str, requirements_file=str(tmp_path / "missing.txt"))
    (tmp_path / "build.cfg").write_text("")
    with pytest.raises(DependencyError, match=r"--setup_file=.*build.cfg: name the project's setup.py or pyproject.toml"):
        run_map(str, setup_file=str(tmp_path / "build.cfg"))
    requirements = write_requirements(tmp_path / "requirements.txt", tmp_path, "no-such-package-anywhere==1.0")
    environment_before = dict(spark.sparkContext.environment)
    with pytest.raises(DependencyError, match=r"(?s)--requirements_file=.*pip could not install it.*no-such-package-anywhere"):
        run_map(str, requirements_file=requirements)
    assert dict(spark.sparkContext.environment) == environment_before
