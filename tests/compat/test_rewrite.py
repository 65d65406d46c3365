"""The rewrite touches imports of apache_beam and nothing else, and keeps line numbers."""

from __future__ import annotations

import pytest

from tests.compat.rewrite import rewrite_imports


@pytest.mark.parametrize(
    ("source", "rewritten"),
    [
        ("import apache_beam as beam\n", "import sparkbeam as beam\n"),
        ("from apache_beam.io import ReadFromText, WriteToText\n", "from sparkbeam.io import ReadFromText, WriteToText\n"),
        ("from apache_beam import pvalue as pv\n", "from sparkbeam import pvalue as pv\n"),
        ("import apache_beam\n", "import sparkbeam as apache_beam\n"),
        ("import apache_beam.transforms.window\n", "import sparkbeam.transforms.window; import sparkbeam as apache_beam\n"),
        ("import os, apache_beam as beam\n", "import os; import sparkbeam as beam\n"),
        ("def f():\n    from apache_beam.io.gcp import bigquery\n", "def f():\n    from sparkbeam.io.gcp import bigquery\n"),
        ("from . import apache_beam\nimport apache_beamish\n", "from . import apache_beam\nimport apache_beamish\n"),
        ('x = "é"; import apache_beam as beam  # é\n', 'x = "é"; import sparkbeam as beam  # é\n'),
    ],
    ids=["aliased", "from", "from-aliased", "bare", "dotted", "mixed", "nested", "not-beam", "non-ascii"],
)
def test_imports_are_pointed_at_sparkbeam(source, rewritten):
    assert rewrite_imports(source) == rewritten


def test_code_strings_and_comments_are_untouched_and_lines_are_kept():
    source = (
        "# apache_beam is Beam\n"
        "from apache_beam.options.pipeline_options import (\n"
        "    PipelineOptions,\n"
        "    SetupOptions,\n"
        ")\n"
        "NAME = 'apache_beam.io'\n"
        "def run():\n"
        "    return apache_beam.io\n"
    )
    rewritten = rewrite_imports(source)
    lines = rewritten.splitlines()
    assert len(lines) == len(source.splitlines())
    assert lines[1] == "from sparkbeam.options.pipeline_options import PipelineOptions, SetupOptions"
    assert lines[0] == "# apache_beam is Beam" and lines[5:] == source.splitlines()[5:]
    compile(rewritten, "<rewritten>", "exec")


def test_an_example_importing_another_is_refused():
    with pytest.raises(ValueError, match=r"imports another example \(apache_beam\.examples\.wordcount\)"):
        rewrite_imports("from apache_beam.examples.wordcount import WordExtractingDoFn\n")
