"""Every third-party module the code imports is provided by a requirement declared for that code.

Read from the source (no import runs), so an undeclared import fails this test on every
machine, whatever happens to be installed there: a package installed by hand for earlier work
once hid from the suite that the first command of the README failed on a fresh machine.

- ``sdk/``, ``transforms/``, ``runners/``: what ``import sparkbeam`` and a run need is in
  ``install_requires``; a module of an extra (``[beam]``, ``[plot]``, ``[parquet]``) is imported
  only inside the extra's own package (``runners/beam``) or lazily, inside a function or an
  ``ImportError`` guard, so that the core works without it and the feature names the extra.
- ``tests/`` may also use the test extra; ``benchmarks/`` the test extra and guarded extras.
- Modules that are optional by design are imported lazily or under an ``ImportError`` guard.
"""

from __future__ import annotations

import ast
import configparser
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]

#: The distribution that provides each third-party top-level module the code imports. Kept by
#: hand on purpose: reading it from the installed packages would let whatever is installed
#: answer for a declaration.
PROVIDERS = {
    "pyspark": "pyspark",
    "attrs": "attrs",
    "cloudpickle": "cloudpickle",
    "apache_beam": "apache-beam",
    "pandas": "pandas",
    "matplotlib": "matplotlib",
    "pyarrow": "pyarrow",
    "pytest": "pytest",
    "hypothesis": "hypothesis",
    "yaml": "pyyaml",
    "nbclient": "nbclient",
    "nbformat": "nbformat",
    "zstandard": "zstandard",
    "scipy": "scipy",
    "moto": "moto",
    "confluent_kafka": "confluent-kafka",
}

#: Modules that come with a declared distribution as its own requirement, never declared alone.
CARRIED = {
    "numpy": ("pandas", "pandas and pyarrow are built on it"),
    "packaging": ("pytest", "pytest requires it"),
    "jupyter_client": ("nbclient", "nbclient runs kernels through it"),
    "boto3": ("moto", "moto requires it; its S3 is set up and read with it"),
    "grpc": ("pyspark", "PySpark's connect extra (in sparkbeam's connect and test extras) brings it: the Connect client's transport"),
}

#: Optional by design: used when installed, with a fallback or an install hint when not.
OPTIONAL = {
    "mmh3": "ApproximateUnique hashes with MurmurHash3 when it is installed, as Beam does, else MD5",
    "dill": "DillCoder, Beam's coder for what pickle cannot handle, needs it; the others do not",
    "zstandard": "reading and writing .zst files; every other compression is in the standard library",
    "psutil": "benchmarks read memory from /proc when it is missing",
}

#: Folders whose modules belong to an extra as a whole (the package itself says so on import).
PACKAGE_EXTRAS = {"runners/beam": "beam", "runners/spark/connect": "connect"}

PRODUCT = ("sdk", "transforms", "runners")
NOT_PRODUCT_EXTRAS = {"test", "dev"}


def _requirement_names(setup_cfg: Path = ROOT / "setup.cfg") -> dict[str, set[str]]:
    """``install_requires`` and each extra -> the distribution names it declares."""
    config = configparser.ConfigParser()
    config.read(setup_cfg)
    groups = {"install_requires": config.get("options", "install_requires")}
    groups.update(dict(config.items("options.extras_require")))
    return {
        group: {
            Requirement(line).name.lower()
            for line in (line.strip() for line in text.splitlines())
            if line and not line.startswith("#")
        }
        for group, text in groups.items()
    }


class _Import:
    def __init__(self, path: Path, line: int, module: str, lazy: bool, guarded: bool) -> None:
        self.path, self.line, self.module, self.lazy, self.guarded = path, line, module, lazy, guarded

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.module}"


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    caught = handler.type
    if caught is None:
        return True
    kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(isinstance(kind, ast.Name) and kind.id in names for kind in kinds)


def _imports(path: Path) -> Iterator[_Import]:
    """Every absolute import in ``path``, with whether it runs lazily (in a function body) and
    whether an ``ImportError`` handler guards it."""

    def visit(node: ast.AST, lazy: bool, guarded: bool) -> Iterator[_Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield _Import(path, child.lineno, alias.name.split(".")[0], lazy, guarded)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield _Import(path, child.lineno, child.module.split(".")[0], lazy, guarded)
            elif isinstance(child, ast.Try):
                body_guarded = guarded or any(_catches_import_error(h) for h in child.handlers)
                for statement in child.body:
                    yield from visit_statement(statement, lazy, body_guarded)
                for rest in (*child.handlers, *child.orelse, *child.finalbody):
                    yield from visit_statement(rest, lazy, guarded)
            else:
                inner_lazy = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from visit(child, inner_lazy, guarded)

    def visit_statement(statement: ast.AST, lazy: bool, guarded: bool) -> Iterator[_Import]:
        holder = ast.Module(body=[statement], type_ignores=[])  # type: ignore[list-item]
        yield from visit(holder, lazy, guarded)

    yield from visit(ast.parse(path.read_text(), str(path)), False, False)


def _local_modules(path: Path) -> set[str]:
    """Modules a file may import by their bare name: its folder's own (scripts run from it) and
    the repository's top-level packages."""
    return {p.stem for p in path.parent.glob("*.py")} | {"sparkbeam", "tests", "benchmarks", "tools"}


def _python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _problems(folders: tuple[str, ...], allowed_groups: set[str], extras_need_laziness: bool) -> list[str]:
    declared = _requirement_names()
    base = set().union(*(declared[group] for group in allowed_groups if group in declared))
    extras_of: dict[str, set[str]] = {}
    for group, names in declared.items():
        if group == "install_requires" or group in NOT_PRODUCT_EXTRAS:
            continue
        for name in names:
            extras_of.setdefault(name, set()).add(group)
    problems = []
    for folder in folders:
        for path in _python_files(folder):
            local = _local_modules(path)
            package_extra = next(
                (extra for prefix, extra in PACKAGE_EXTRAS.items() if path.relative_to(ROOT).as_posix().startswith(prefix + "/")),
                None,
            )
            for found in _imports(path):
                module = found.module
                if module in sys.stdlib_module_names or module in local or module == "__future__":
                    continue
                if module in OPTIONAL:
                    if not (found.lazy or found.guarded):
                        problems.append(f"{found}, optional by design ({OPTIONAL[module]}), at import time with no ImportError guard")
                    continue
                if module in CARRIED:
                    carrier, _ = CARRIED[module]
                    if carrier not in base and carrier not in extras_of:
                        problems.append(f"{found}, which comes with {carrier}, declared nowhere for this code")
                    continue
                distribution = PROVIDERS.get(module)
                if distribution is None:
                    problems.append(f"{found}: declare its distribution in setup.cfg and name it in PROVIDERS here")
                    continue
                if distribution in base:
                    continue
                extras = extras_of.get(distribution, set())
                if not extras:
                    problems.append(f"{found}, but setup.cfg declares {distribution} for none of {sorted(allowed_groups)} nor a product extra")
                elif extras_need_laziness and package_extra not in extras and not (found.lazy or found.guarded):
                    problems.append(
                        f"{found} at import time; {distribution} is only in the extra {sorted(extras)}: "
                        "import it inside the function that needs it, or under an ImportError guard that names the extra"
                    )
    return problems


def test_the_product_imports_only_what_its_requirements_and_extras_declare():
    assert _problems(PRODUCT, {"install_requires"}, extras_need_laziness=True) == []


def test_the_tests_import_only_what_the_test_extra_declares():
    assert _problems(("tests",), {"install_requires", "test"}, extras_need_laziness=False) == []


def test_the_benchmarks_and_tools_import_only_declared_or_guarded_modules():
    assert _problems(("benchmarks", "tools"), {"install_requires", "test"}, extras_need_laziness=False) == []


def test_an_undeclared_or_eager_import_is_named(tmp_path, monkeypatch):
    # The check itself can fail: a product file importing something nobody declared, an extra
    # at import time, and an optional module without its guard are each named with the line.
    folder = tmp_path / "sdk"
    folder.mkdir()
    (folder / "bad.py").write_text(
        "import requests\n"
        "import matplotlib\n"
        "def later():\n"
        "    import pyarrow\n"
        "import mmh3\n"
        "try:\n"
        "    import dill\n"
        "except ImportError:\n"
        "    dill = None\n"
    )
    (tmp_path / "setup.cfg").write_text((ROOT / "setup.cfg").read_text())
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    problems = _problems(("sdk",), {"install_requires"}, extras_need_laziness=True)
    assert [p.split(",")[0].split(":")[:2] for p in problems] == [
        ["sdk/bad.py", "1 imports requests"],
        ["sdk/bad.py", "2 imports matplotlib at import time; matplotlib is only in the extra ['plot']"],
        ["sdk/bad.py", "5 imports mmh3"],
    ]


@pytest.mark.parametrize("module", sorted(OPTIONAL))
def test_an_optional_module_is_not_also_a_plain_requirement(module):
    # Declared in install_requires, it would not be optional: the guard would be dead code.
    distribution = PROVIDERS.get(module, module)
    assert distribution not in _requirement_names()["install_requires"]
