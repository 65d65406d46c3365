"""The SDK is a pure description: importing it and building pipelines never touches Spark,
and never imports apache_beam (only ``runners/beam`` does, for Beam pipelines)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_importing_sparkbeam_does_not_import_pyspark():
    # A fresh interpreter in which any attempt to import pyspark fails loudly.
    script = textwrap.dedent(
        """
        import sys

        class BlockPyspark:
            def find_spec(self, name, path=None, target=None):
                if name == "pyspark" or name.startswith("pyspark."):
                    raise ImportError("the SDK imported " + name)
                return None

        sys.meta_path.insert(0, BlockPyspark())
        import sparkbeam as beam
        import sparkbeam.transforms.window, sparkbeam.transforms.trigger, sparkbeam.transforms.core
        import sparkbeam.testing.util, sparkbeam.testing.test_stream, sparkbeam.io
        from sparkbeam.options.pipeline_options import PipelineOptions

        p = beam.Pipeline(options=PipelineOptions(["--streaming"]))
        (p | beam.Create([("a", 1)])
           | beam.WindowInto(beam.window.FixedWindows(60))
           | beam.CombinePerKey(sum))
        assert "pyspark" not in sys.modules
        print("ok")
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"


def test_sparkbeam_runs_its_own_pipelines_without_apache_beam():
    # apache_beam blocked: the SDK, its runner lookup and the in-memory engine never need it,
    # and sparkbeam.SparkRunner is then the Spark runner alone.
    script = textwrap.dedent(
        """
        import sys

        class BlockBeam:
            def find_spec(self, name, path=None, target=None):
                if name == "apache_beam" or name.startswith("apache_beam."):
                    raise ImportError("sparkbeam imported " + name)
                return None

        sys.meta_path.insert(0, BlockBeam())
        import sparkbeam as beam
        from sparkbeam.runners.core.loop.memory import run_in_memory
        from sparkbeam.runners.spark.runner import SparkRunner

        assert beam.SparkRunner is SparkRunner
        p = beam.Pipeline()
        totals = beam.capture(p | beam.Create([("a", 1), ("a", 2)]) | beam.CombinePerKey(sum))
        assert [e.value for e in run_in_memory(p).emissions(totals)] == [("a", 3)]
        assert not any(name.startswith("apache_beam") for name in sys.modules)
        print("ok")
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"
