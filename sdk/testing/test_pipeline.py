"""``TestPipeline``: a ``Pipeline`` for tests, as in Beam (options from keywords or argv)."""

from __future__ import annotations

from typing import Any

from sparkbeam.pipeline import Pipeline

__all__ = ["TestPipeline"]


class TestPipeline(Pipeline):
    """A Pipeline that, like Beam's, runs when its ``with`` block ends."""

    __test__ = False

    def __init__(self, runner: Any = None, options: Any = None, argv: Any = None, **unused: Any) -> None:
        super().__init__(runner=runner, options=options, argv=argv)
