"""``--requirements_file`` and ``--setup_file`` (Beam's options): the packages they name,
installed where the executors' Python imports them, or the run refused naming the option.

pip runs on the driver, with the user's pip configuration (index, find-links, build
isolation: ``pip.conf`` and ``PIP_*`` variables apply). ``--setup_file`` is the project's
``setup.py`` or ``pyproject.toml``; the project in its folder is installed with its
dependencies, as Beam's workers install the sdist it builds.

- **Executors on this machine running this interpreter** (a ``local`` or ``local-cluster``
  master): pip's dry run lists what this interpreter lacks; only that is installed, into a
  directory of the run that goes first on the ``PYTHONPATH`` of the Python workers Spark
  starts for the run (``SparkContext.environment``). Compiled packages work.
- **Other executors**: everything the files name, with its dependencies, is installed into
  a directory that is zipped and shipped with ``addPyFile``; Spark puts it on each
  executor's ``sys.path`` before a task's code is unpickled. Python imports only
  pure-Python code from a zip, so a package with compiled modules is refused, naming it
  and Spark's way to ship such environments (a packed virtualenv or conda environment
  through ``spark.archives`` and ``spark.pyspark.python``).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from sparkbeam.io import commits
from sparkbeam.runners.spark import private_temp

__all__ = ["DependencyError", "check_dependency_options", "install_for_executors", "ship_to_connect", "zip_for_executors"]

_LOG = logging.getLogger(__name__)

_COMPILED_SUFFIXES = tuple({*importlib.machinery.EXTENSION_SUFFIXES, ".so", ".pyd", ".dylib"})


class DependencyError(RuntimeError):
    """``--requirements_file`` or ``--setup_file`` cannot be installed for the executors."""


@attrs.frozen
class _Request:
    option: str  # "--requirements_file=reqs.txt"
    pip_arguments: tuple[str, ...]  # what pip installs: ("-r", path) or (project folder,)


def check_dependency_options(requirements_file: str | None, setup_file: str | None) -> list[_Request]:
    """The installs the options ask for; refused before Spark starts if a file is missing
    or the setup file is not a project's setup.py or pyproject.toml."""
    requests = []
    if requirements_file is not None:
        option = f"--requirements_file={requirements_file}"
        if not os.path.isfile(requirements_file):
            msg = f"{option}: no such file"
            raise DependencyError(msg)
        requests.append(_Request(option, ("-r", os.path.abspath(requirements_file))))
    if setup_file is not None:
        option = f"--setup_file={setup_file}"
        if os.path.basename(setup_file) not in ("setup.py", "pyproject.toml"):
            msg = f"{option}: name the project's setup.py or pyproject.toml (its folder is the project that is installed)"
            raise DependencyError(msg)
        if not os.path.isfile(setup_file):
            msg = f"{option}: no such file"
            raise DependencyError(msg)
        requests.append(_Request(option, (os.path.dirname(os.path.abspath(setup_file)),)))
    return requests


def _pip(option: str, arguments: list[str]) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", *arguments]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        msg = f"{option}: cannot run pip with {sys.executable}: {error}"
        raise DependencyError(msg) from None
    if completed.returncode != 0:
        details = "\n".join((completed.stderr or completed.stdout).strip().splitlines()[-12:])
        msg = f"{option}: pip could not install it on the driver for the executors:\n{details}"
        raise DependencyError(msg)


def _missing_here(request: _Request, work: str) -> list[str]:
    """What this interpreter lacks of the request, as exact pip requirements (pip's report)."""
    report_path = os.path.join(work, "report.json")
    _pip(request.option, ["--dry-run", "--quiet", "--report", report_path, *request.pip_arguments])
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)
    missing = []
    for item in report.get("install", []):
        download = item["download_info"]
        vcs = download.get("vcs_info")
        missing.append(f"{vcs['vcs']}+{download['url']}@{vcs['commit_id']}" if vcs else download["url"])
    return missing


def _compiled_packages(directory: str) -> list[str]:
    found = set()
    for folder, _, files in os.walk(directory):
        for name in files:
            if name.endswith(_COMPILED_SUFFIXES):
                found.add(os.path.relpath(os.path.join(folder, name), directory).split(os.sep)[0])
    return sorted(found)


def _digest(members: Iterable[tuple[str, bytes]]) -> str:
    """What a set of files is: their names and contents, each length-prefixed (so no two
    different sets give the same bytes to hash)."""
    digest = hashlib.sha256()
    for name, data in members:
        for part in (name.encode(), data):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _cached_archive_holds(path: str, digest: str) -> bool:
    """Whether the archive already at ``path`` holds exactly the files ``digest`` names; a
    file that is missing, not a private file of this user's, or does not hold them is not
    used (and the last two are said, naming it)."""
    try:
        handle = private_temp.open_private_file(path)
    except FileNotFoundError:
        return False
    except OSError as error:  # a symlink (ELOOP), another owner, open to others
        _LOG.warning("the cached dependency archive %s is not used (%s); it is built again", path, error)
        return False
    try:
        with handle, zipfile.ZipFile(handle) as archive:
            found = _digest((info.filename, archive.read(info)) for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        problem = f"it cannot be read: {error}"
    else:
        if found == digest:
            return True
        problem = f"its files' digest is {found}"
    _LOG.warning(
        "the cached dependency archive %s does not hold the packages its name says (changed or damaged "
        "since it was written: %s); it is built again", path, problem
    )
    return False


def zip_for_executors(options: str, directory: str) -> str:
    """The installed packages as one zip for ``addPyFile``; refused if any has compiled
    modules.

    The zip is kept in this user's private folder (``<tmp>/sparkbeam-<uid>/dependencies``)
    under the digest of the files it holds, so that the same packages are added once; a
    zip found there is shipped only after its members are checked against that digest."""
    compiled = _compiled_packages(directory)
    if compiled:
        msg = (
            f"{options}: {', '.join(compiled)} contain compiled modules, which Python cannot import from "
            "the zip sparkbeam ships to executors that are not on this machine. Install these "
            "packages in the executors' Python, or ship a packed environment the Spark way "
            "(venv-pack or conda-pack, then --spark_conf spark.archives=env.tar.gz#env and "
            "spark.pyspark.python=./env/bin/python when the session starts)"
        )
        raise DependencyError(msg)
    files: list[tuple[str, str]] = []  # (path, name in the zip)
    for folder, dirnames, names in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "bin"))
        for name in sorted(names):
            if not name.endswith(".pyc"):
                path = os.path.join(folder, name)
                files.append((path, os.path.relpath(path, directory).replace(os.sep, "/")))
    digest = _digest((name, _read(path)) for path, name in files)
    folder, _ = private_temp.folder_for("dependencies")
    target = os.path.join(folder, f"deps-{digest}.zip")
    if _cached_archive_holds(target, digest):
        return target
    temp = commits.temporary_beside(target)
    try:
        with private_temp.create_private_file(temp) as handle, zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, name in files:
                archive.write(path, name)
        commits.commit(temp, target)
    except BaseException:
        commits.remove(temp, missing_ok=True)
        raise
    return target


def ship_to_connect(session: Any, requirements_file: str | None, setup_file: str | None) -> None:
    """Under Spark Connect: everything the options name, with its dependencies, installed
    here by pip and added to the server's session as one zip of Python files
    (``SparkSession.addArtifacts(..., pyfile=True)``), which the server puts on the Python
    path of the session's workers. Pure-Python packages only (as for executors elsewhere,
    ``zip_for_executors``); the same packages are added once per session."""
    requests = check_dependency_options(requirements_file, setup_file)
    if not requests:
        return
    options = " and ".join(request.option for request in requests)
    work = tempfile.mkdtemp(prefix="sparkbeam-dependencies-")
    try:
        target = os.path.join(work, "site")
        for request in requests:
            _pip(request.option, ["--quiet", "--target", target, *request.pip_arguments])
        archive = zip_for_executors(options, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    shipped: set = getattr(session, "_sparkbeam_dependencies", set())
    if archive in shipped:
        return
    try:
        session.addArtifacts(archive, pyfile=True)
    except Exception as error:
        msg = f"{options}: the Spark Connect server did not take the packages' zip ({archive}): {str(error).splitlines()[0]}"
        raise DependencyError(msg) from None
    session._sparkbeam_dependencies = shipped | {archive}
    _LOG.info("%s: added to the Spark Connect session as %s", options, archive)


def install_for_executors(
    spark_context: Any, requirements_file: str | None, setup_file: str | None, *, same_machine: bool
) -> Callable[[], None]:
    """Install what the options name for the executors (see the module docs); returns what
    undoes it when the run ends (the run's directory, the workers' PYTHONPATH)."""
    requests = check_dependency_options(requirements_file, setup_file)
    if not requests:
        return lambda: None
    options = " and ".join(request.option for request in requests)
    work = tempfile.mkdtemp(prefix="sparkbeam-dependencies-")
    target = os.path.join(work, "site")

    def remove() -> None:
        try:
            shutil.rmtree(work)
        except OSError as error:  # the run's outcome stands; the leftover is named
            _LOG.warning("could not remove the run's install folder %s: %s", work, error)

    try:
        if same_machine:
            missing = [m for request in requests for m in _missing_here(request, work)]
            if not missing:
                _LOG.info("%s: already installed in %s, which the executors run", options, sys.executable)
                remove()
                return lambda: None
            _pip(options, ["--quiet", "--no-deps", "--target", target, *missing])
        else:
            for request in requests:
                _pip(request.option, ["--quiet", "--target", target, *request.pip_arguments])
            archive = zip_for_executors(options, target)
            shipped: set = getattr(spark_context, "_sparkbeam_dependencies", set())
            if archive not in shipped:
                spark_context.addPyFile(archive)
                spark_context._sparkbeam_dependencies = shipped | {archive}
            _LOG.info("%s: shipped to the executors as %s", options, archive)
            remove()
            return lambda: None
    except BaseException:
        remove()
        raise
    environment = spark_context.environment
    before = environment.get("PYTHONPATH")
    environment["PYTHONPATH"] = target if not before else target + os.pathsep + before
    # The driver unpickles what executors send back (captured elements of the packages' types).
    sys.path.append(target)
    _LOG.info("%s: installed for the executors in %s", options, target)

    def undo() -> None:
        if before is None:
            environment.pop("PYTHONPATH", None)
        else:
            environment["PYTHONPATH"] = before
        if target in sys.path:
            sys.path.remove(target)
        remove()

    return undo
