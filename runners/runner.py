"""Beam's path ``apache_beam.runners.runner``: ``PipelineRunner``, ``PipelineResult``,
``PipelineState`` and ``create_runner`` (defined in ``sparkbeam.runner``), and the local
runners Beam's code names, which run on the embedded Spark.

>>> from sparkbeam.runners.runner import PipelineState
>>> PipelineState.is_terminal(PipelineState.DONE)
True
"""

from __future__ import annotations

from typing import Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.runner import PipelineResult, PipelineRunner, PipelineState, create_runner

__all__ = ["DirectRunner", "PipelineResult", "PipelineRunner", "PipelineState", "TestDirectRunner", "create_runner"]


class DirectRunner(PipelineRunner):
    """Beam's local runner, as an object (``Pipeline(runner=DirectRunner())``): the Spark
    runner on the embedded (or configured) Spark, as ``--runner=DirectRunner`` is."""

    def run_pipeline(self, pipeline: Any, options: Any) -> PipelineResult:
        return create_runner("SparkRunner").run_pipeline(pipeline, options)


TestDirectRunner = DirectRunner


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.runners.runner")
