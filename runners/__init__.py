"""Runners: ``core`` (engine logic with no Spark) and ``spark`` (execution on PySpark).

Beam's names are here too: ``PipelineRunner``, ``PipelineState``, ``create_runner`` and
``DirectRunner`` (the Spark runner under Beam's local runner's name).
"""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.runners.runner import (
    DirectRunner,
    PipelineRunner,
    PipelineState,
    TestDirectRunner,
    create_runner,
)

__all__ = ["DirectRunner", "PipelineRunner", "PipelineState", "TestDirectRunner", "create_runner"]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.runners")
