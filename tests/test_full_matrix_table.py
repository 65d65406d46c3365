"""Every entry of tests/full_matrix.py names a test that exists, so that a renamed test or
case cannot slip back into the README's test command unnoticed (or out of it for good)."""

from __future__ import annotations

import ast
import os

from tests.full_matrix import FULL_MATRIX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _test_functions(path: str) -> set[str]:
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_entry_names_a_test_function_of_its_module():
    missing = []
    for node_id in FULL_MATRIX:
        path, _, rest = node_id.partition("::")
        name = rest.split("[", 1)[0]
        if not os.path.exists(os.path.join(ROOT, path)) or name not in _test_functions(path):
            missing.append(node_id)
    assert not missing, f"tests/full_matrix.py names tests that do not exist: {missing}"


def test_every_parametrised_entry_is_a_collected_case(request):
    # The cases' ids exist only once pytest collects them: check those of the modules this run
    # collected (the README's command collects them all).
    collected = {item.nodeid for item in request.session.items}
    paths = {item.nodeid.partition("::")[0] for item in request.session.items}
    stale = [node_id for node_id in FULL_MATRIX if "[" in node_id and node_id.partition("::")[0] in paths and node_id not in collected]
    assert not stale, f"tests/full_matrix.py names cases no longer collected: {stale}"
