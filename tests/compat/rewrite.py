"""Load one of Beam's example modules with its imports, and nothing else, pointed at sparkbeam.

``import apache_beam as beam`` becomes ``import sparkbeam as beam``; ``from apache_beam.x
import y`` becomes ``from sparkbeam.x import y``; a bare ``import apache_beam`` binds
sparkbeam under the name ``apache_beam`` so that the code below it is untouched. Imports
anywhere in the file (inside functions too) are rewritten; strings, comments and code are
not. Line numbers are kept, so a traceback points at the example's own line.

The rewritten source is written to a file of its own and imported under a unique module
name. Spark's Python workers cannot import that file by name, so functions and classes of
the module are pickled by value (``register_pickle_by_value``), as a user's ``__main__``
script would be.
"""

from __future__ import annotations

import ast
import atexit
import importlib.util
import itertools
import pathlib
import shutil
import sys
import tempfile
import types

BEAM = "apache_beam"
SPARKBEAM = "sparkbeam"

_COUNTER = itertools.count()
_DIRECTORY = pathlib.Path(tempfile.mkdtemp(prefix="sparkbeam-compat-"))
atexit.register(shutil.rmtree, _DIRECTORY, ignore_errors=True)


def _ours(module: str, packages: dict[str, str]) -> str:
    for beam_package, copy in packages.items():
        if module == beam_package or module.startswith(beam_package + "."):
            return copy + module[len(beam_package) :]
    if module == BEAM or module.startswith(BEAM + "."):
        if module.startswith(BEAM + ".examples"):
            # sparkbeam.examples is sparkbeam's own package: an example that imports
            # another one is driven through the other one instead.
            msg = f"an example that imports another example ({module}) cannot be rewritten: drive {module} itself"
            raise ValueError(msg)
        return SPARKBEAM + module[len(BEAM) :]
    return module


def _is_beam(module: str | None) -> bool:
    return module is not None and (module == BEAM or module.startswith(BEAM + "."))


def _rewritten_import(node: ast.Import | ast.ImportFrom, packages: dict[str, str]) -> str | None:
    """The source of ``node`` pointed at sparkbeam, or None if it imports nothing of Beam's."""
    if isinstance(node, ast.ImportFrom):
        if node.level or not _is_beam(node.module):
            return None
        assert node.module is not None
        return ast.unparse(ast.ImportFrom(module=_ours(node.module, packages), names=node.names, level=0))
    if not any(_is_beam(alias.name) for alias in node.names):
        return None
    statements = []
    for alias in node.names:
        if not _is_beam(alias.name):
            statements.append(ast.unparse(ast.Import(names=[alias])))
        elif alias.asname is not None:
            statements.append(f"import {_ours(alias.name, packages)} as {alias.asname}")
        elif alias.name == BEAM:
            statements.append(f"import {SPARKBEAM} as {BEAM}")
        else:
            # `import apache_beam.x.y` binds `apache_beam` to the package, with x.y loaded.
            statements.append(f"import {_ours(alias.name, packages)}")
            statements.append(f"import {SPARKBEAM} as {BEAM}")
    return "; ".join(statements)


def rewrite_imports(source: str, packages: dict[str, str] | None = None) -> str:
    """``source`` with every import of ``apache_beam`` pointed at ``sparkbeam``, and those of
    the Beam packages ``packages`` names at their rewritten copies."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    offsets = [0, *itertools.accumulate(len(line.encode()) for line in lines)]
    encoded = source.encode()
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        replacement = _rewritten_import(node, packages or {})
        if replacement is None:
            continue
        assert node.end_lineno is not None and node.end_col_offset is not None
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        # A parenthesised import over several lines becomes one line plus blank ones.
        padding = "\n" * (node.end_lineno - node.lineno)
        edits.append((start, end, (replacement + padding).encode()))
    for start, end, text in sorted(edits, reverse=True):
        encoded = encoded[:start] + text + encoded[end:]
    return encoded.decode()


def load_rewritten(beam_module: str) -> types.ModuleType:
    """Import a copy of ``beam_module`` (e.g. ``apache_beam.examples.wordcount``) whose
    imports point at sparkbeam. Errors raised while the copy is imported propagate (an
    unsupported Beam module fails here, naming itself)."""
    spec = importlib.util.find_spec(beam_module)
    if spec is None or spec.origin is None:
        msg = f"{beam_module} is not installed"
        raise ModuleNotFoundError(msg)
    source = pathlib.Path(spec.origin).read_text(encoding="utf-8")
    name = f"sparkbeam_compat_{beam_module.rsplit('.', 1)[-1]}_{next(_COUNTER)}"
    path = _DIRECTORY / f"{name}.py"
    path.write_text(rewrite_imports(source), encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    _pickle_by_value(module)
    return module


def _pickle_by_value(module: types.ModuleType) -> None:
    import cloudpickle
    from pyspark import cloudpickle as spark_cloudpickle

    # PySpark ships functions with its own copy of cloudpickle; sparkbeam's coders use
    # the installed one. Both must send this module's code rather than its name.
    cloudpickle.register_pickle_by_value(module)
    spark_cloudpickle.register_pickle_by_value(module)


def load_rewritten_package(beam_package: str) -> str:
    """Copy a Beam package whose modules import each other (e.g. Beam's Nexmark,
    ``apache_beam.testing.benchmarks.nexmark``), every module's imports pointed at sparkbeam
    and the package's own at the copy; returns the copy's package name, to import its modules
    from. The copy's code is pickled by value, as ``load_rewritten``'s is."""
    spec = importlib.util.find_spec(beam_package)
    if spec is None or not spec.submodule_search_locations:
        msg = f"{beam_package} is not an installed package"
        raise ModuleNotFoundError(msg)
    name = f"sparkbeam_compat_{beam_package.rsplit('.', 1)[-1]}_{next(_COUNTER)}"
    source_root = pathlib.Path(next(iter(spec.submodule_search_locations)))
    packages = {beam_package: name}
    for source in sorted(source_root.rglob("*.py")):
        target = _DIRECTORY / name / source.relative_to(source_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rewrite_imports(source.read_text(encoding="utf-8"), packages), encoding="utf-8")
    if str(_DIRECTORY) not in sys.path:
        sys.path.append(str(_DIRECTORY))
    _pickle_by_value(importlib.import_module(name))
    return name
