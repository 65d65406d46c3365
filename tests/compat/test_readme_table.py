"""The README's table of Beam's examples says what tests/compat finds, example by example."""

from __future__ import annotations

import pathlib
import re

from tests.compat.examples import ALL

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_lists_every_example_with_its_status():
    rows = dict(re.findall(r"^\| `([\w/]+)` \| (passes|xfail) \|", README.read_text(encoding="utf-8"), re.MULTILINE))
    expected = {example.id: "passes" if example.gap is None else "xfail" for example in ALL}
    assert rows == expected
