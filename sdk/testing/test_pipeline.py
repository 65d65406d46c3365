"""``TestPipeline``: a ``Pipeline`` for tests, as in Beam (options from keywords or argv)."""

from __future__ import annotations

from typing import Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.pipeline import Pipeline

__all__ = ["TestPipeline"]


class TestPipeline(Pipeline):
    """A Pipeline that, like Beam's, runs when its ``with`` block ends."""

    __test__ = False

    def __init__(self, runner: Any = None, options: Any = None, argv: Any = None, **unused: Any) -> None:
        super().__init__(runner=runner, options=options, argv=argv)

# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.testing.test_pipeline")
