"""The code stays lint-clean (ruff, whole repository) and type-checked (mypy on sdk/ and runners/),
and its imports run the one way the layering allows (README "How it works")."""

from __future__ import annotations

import ast
import dataclasses
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterable

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


# --- Which code may import which (README "How it works", runners/core/__init__.py) ---------

#: sparkbeam's source folders and the package each one is
PACKAGES = {"sdk": "sparkbeam", "transforms": "sparkbeam.transforms", "runners": "sparkbeam.runners"}
CORE = "sparkbeam.runners.core"
#: the rooms of runners/core, lowest first: a room imports only rooms before it. ``schema``
#: and ``grouping`` both sit on ``elements`` and neither imports the other; the order only
#: has to be one that every import respects.
ROOMS = ("lowering", "sources", "elements", "grouping", "state", "schema", "plan", "loop")
#: function-local sparkbeam imports kept inside runners/core, each with its reason (none)
LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}
#: function-local sparkbeam imports kept in sdk/ and transforms/, each with its reason: a
#: module loaded only when needed because it is costly, or needs an optional dependency;
#: never to hide an import cycle (move what both sides need to a lower module instead)
SDK_LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("sparkbeam.beam_surface", "sparkbeam._beam_names"): "cost: Beam's whole name list, read only when a name is missing",
}


@dataclasses.dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module, or module.name for `from module import name`
    line: int
    local: bool  # inside a function or class body
    type_only: bool  # under `if TYPE_CHECKING:`


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGES[parts[0]], *parts[1:]])


def _imports(path: pathlib.Path) -> list[Import]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found: list[Import] = []

    def visit(node: ast.AST, local: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(module, alias.name, child.lineno, local, type_only) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                found.extend(Import(module, f"{base}.{alias.name}", child.lineno, local, type_only) for alias in child.names)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(child, local, True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                visit(child, True, type_only)
            else:
                visit(child, local, type_only)

    visit(tree, False, False)
    return found


def _all_imports(folder: str) -> list[Import]:
    return [imp for path in sorted(pathlib.Path(ROOT, folder).rglob("*.py")) for imp in _imports(path)]


def _is_under(target: str, *packages: str) -> bool:
    return any(target == p or target.startswith(p + ".") for p in packages)


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[3] if module.startswith(CORE + ".") and len(parts) > 3 else None


def _show(imports: list[Import]) -> str:
    return "\n".join(f"{imp.module}:{imp.line} imports {imp.target}" for imp in imports)


def test_the_engine_core_imports_no_backend_and_no_front_end():
    wrong = [
        imp
        for imp in _all_imports("runners/core")
        if _is_under(imp.target, "sparkbeam.runners.spark", "sparkbeam.runners.beam", "pyspark", "apache_beam")
    ]
    assert not wrong, "runners/core must run with no Spark and no Beam:\n" + _show(wrong)


def test_the_sdk_and_transforms_import_no_runner():
    wrong = [imp for folder in ("sdk", "transforms") for imp in _all_imports(folder) if _is_under(imp.target, "sparkbeam.runners")]
    assert not wrong, "the SDK is plain data a runner reads; it must not import one:\n" + _show(wrong)


def test_the_spark_backend_does_not_import_the_beam_front_end():
    wrong = [imp for imp in _all_imports("runners/spark") if _is_under(imp.target, "sparkbeam.runners.beam")]
    assert not wrong, "runners/beam registers itself with the Spark backend, not the other way:\n" + _show(wrong)


def test_the_engine_core_reaches_into_no_private_module_of_the_library():
    wrong = [
        imp
        for imp in _all_imports("runners/core")
        if _is_under(imp.target, "sparkbeam.transforms") and any(part.startswith("_") for part in imp.target.split(".")[2:])
    ]
    assert not wrong, "the engine knows the library by public names and attributes (CombineFn.sql_aggregate):\n" + _show(wrong)


def test_the_engine_core_hides_no_import_in_a_function():
    hidden = [
        imp
        for imp in _all_imports("runners/core")
        if imp.local and _is_under(imp.target, "sparkbeam") and (imp.module, imp.target) not in LOCAL_IMPORTS_ALLOWED
    ]
    assert not hidden, "import at the top of the module, and fix the direction if that makes a cycle:\n" + _show(hidden)


def test_the_sdk_and_transforms_hide_no_import_in_a_function():
    modules = _source_modules("sdk", "transforms")
    hidden = [
        imp
        for folder in ("sdk", "transforms")
        for imp in _all_imports(folder)
        if imp.local
        and not imp.type_only
        and _is_under(imp.target, "sparkbeam")
        and (imp.module, _imported_module(imp.target, modules)) not in SDK_LOCAL_IMPORTS_ALLOWED
    ]
    assert not hidden, (
        "import at the top of the module; if that makes a cycle, move what both sides need to a "
        "lower module (or, for a costly or optional module, add it to SDK_LOCAL_IMPORTS_ALLOWED "
        "with the reason):\n" + _show(hidden)
    )


def _source_modules(*folders: str) -> dict[str, pathlib.Path]:
    return {_module_name(path): path for folder in folders for path in sorted(pathlib.Path(ROOT, folder).rglob("*.py"))}


def _imported_module(target: str, modules: Iterable[str] = ()) -> str:
    """The module an import runs: ``target`` itself, or for ``from module import name`` the
    longest prefix of it that is a module (of ``modules``, or the whole name without them)."""
    known = set(modules)
    if not known:
        return target
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return target


def _import_cycles(folders: tuple[str, ...]) -> list[list[str]]:
    """The import cycles among the modules of ``folders``: imports at module level and the
    allowed function-local ones (a lazy import may not close a cycle either), not the
    type-only ones. A package's own ``__init__`` is not counted as imported by its modules."""
    modules = _source_modules(*folders)
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for imp in _imports(path):
            target = _imported_module(imp.target, modules)
            if imp.type_only or target not in modules or target == module:
                continue
            if imp.local and (module, target) not in SDK_LOCAL_IMPORTS_ALLOWED:
                continue  # reported by the test above
            graph[module].add(target)
    return _strongly_connected(graph)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components of more than one module (or a module
    importing itself), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.append(sorted(component))
    return found


def test_the_sdk_and_transforms_have_no_import_cycle():
    cycles = _import_cycles(("sdk", "transforms"))
    assert not cycles, "modules that import each other (move what both need to a lower module):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def test_the_cycle_checker_sees_a_cycle_and_a_hidden_import(tmp_path, monkeypatch):
    # The two checks above pass only if they can fail: a planted cycle is found, and so is
    # the function-local import that would hide it.
    (tmp_path / "sdk").mkdir()
    (tmp_path / "sdk" / "a.py").write_text("from sparkbeam import b\n")
    (tmp_path / "sdk" / "b.py").write_text("import sparkbeam.c\n")
    (tmp_path / "sdk" / "c.py").write_text("from sparkbeam.a import name\n\ndef f():\n    from sparkbeam.b import other\n")
    (tmp_path / "sdk" / "d.py").write_text("from sparkbeam.a import name\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert _import_cycles(("sdk",)) == [["sparkbeam.a", "sparkbeam.b", "sparkbeam.c"]]
    hidden = [imp for imp in _all_imports("sdk") if imp.local]
    assert [(imp.module, imp.target) for imp in hidden] == [("sparkbeam.c", "sparkbeam.b.other")]


def test_every_engine_module_lives_in_a_room_and_rooms_import_downwards():
    core = pathlib.Path(ROOT, "runners", "core")
    flat = sorted(p.name for p in core.glob("*.py") if p.name != "__init__.py")
    assert not flat, f"runners/core keeps modules in rooms only; put {flat} in one of {ROOMS}"
    rooms = sorted(p.parent.name for p in core.glob("*/__init__.py"))
    assert rooms == sorted(ROOMS), f"the rooms are {rooms}; ROOMS here and runners/core/__init__.py name {sorted(ROOMS)}"
    upward = []
    for imp in _all_imports("runners/core"):
        source, target = _room(imp.module), _room(imp.target)
        # A type-only import runs nothing; it may name a class of a room above (fused.py's Stage).
        if source and target and not imp.type_only and ROOMS.index(target) > ROOMS.index(source):
            upward.append(imp)
    assert not upward, f"rooms import only rooms before them in {ROOMS}:\n" + _show(upward)


def test_each_room_says_what_it_owns_and_imports_nothing_itself():
    for init in sorted(pathlib.Path(ROOT, "runners", "core").glob("*/__init__.py")):
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{init}: say in a docstring what the room owns and what it must not import"
        assert not _imports(init), f"{init}: a room's __init__ re-exports nothing (import the module itself)"


def test_the_checker_sees_a_wrong_way_import(tmp_path, monkeypatch):
    # The checks above pass only if they can fail: a planted upward import is found.
    room = tmp_path / "runners" / "core" / "lowering"
    room.mkdir(parents=True)
    (room / "bad.py").write_text("def f():\n    from sparkbeam.runners.core.loop import steps\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    (imp,) = _all_imports("runners/core")
    assert (imp.module, imp.target, imp.local) == ("sparkbeam.runners.core.lowering.bad", "sparkbeam.runners.core.loop.steps", True)
    assert ROOMS.index(_room(imp.target) or "") > ROOMS.index(_room(imp.module) or "")


def test_every_package_directory_is_listed_in_setup_cfg():
    """``pip install .`` installs only the packages setup.cfg lists (an editable install finds
    the others anyway, so only a wheel would miss a new sub-package)."""
    import configparser

    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(config["options"]["packages"].split())
    roots = {"sdk": "sparkbeam", "transforms": "sparkbeam.transforms", "runners": "sparkbeam.runners"}
    found = set()
    for directory, package in roots.items():
        for init in pathlib.Path(ROOT, directory).rglob("__init__.py"):
            parts = init.parent.relative_to(pathlib.Path(ROOT, directory)).parts
            found.add(".".join((package, *parts)))
    assert found - listed == set(), f"package directories setup.cfg's [options] packages does not list: {sorted(found - listed)}"


def test_the_readme_starts_with_its_two_commands_as_ci_reads_them():
    """``.ci/run`` runs the README's first two ``bash`` blocks, each one line: the main
    example on the embedded Spark, then the tests. Another block above them (a third way to
    run the example) would have CI run it instead of the tests."""
    import re

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        blocks = re.findall(r"```bash\n(.*?)```", handle.read(), re.S)
    first, second = ([line for line in block.strip().splitlines() if line.strip()] for block in blocks[:2])
    assert first == ["pip install . && python -m sparkbeam.examples.hourly_team_score"]
    assert second == ['pip install -e ".[test]" && python -m pytest']
