"""``TestPipeline``: a ``Pipeline`` for tests, as in Beam (options from keywords or argv)."""

from __future__ import annotations

from typing import Any

from sparkbeam.beam_surface import module_getattr
from sparkbeam.pipeline import Pipeline

__all__ = ["TestPipeline"]


class TestPipeline(Pipeline):
    """A Pipeline that, like Beam's, runs when its ``with`` block ends."""

    __test__ = False

    def __init__(
        self,
        runner: Any = None,
        options: Any = None,
        argv: Any = None,
        is_integration_test: bool = False,
        blocking: bool = True,
        additional_pipeline_args: list[str] | None = None,
        display_data: dict | None = None,
    ) -> None:
        if is_integration_test:
            msg = "TestPipeline(is_integration_test=True) is not supported by sparkbeam: pass options= or argv="
            raise NotImplementedError(msg)
        if not blocking:
            msg = "TestPipeline(blocking=False) is not supported by sparkbeam: a run ends before run() returns"
            raise NotImplementedError(msg)
        if additional_pipeline_args:
            if options is not None:
                msg = "TestPipeline takes additional_pipeline_args with argv=, not with options="
                raise ValueError(msg)
            argv = [*(argv or []), *additional_pipeline_args]
        super().__init__(runner=runner, options=options, argv=argv)
        self.display_data = dict(display_data or {})  # kept, as Beam keeps it: run metadata


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.testing.test_pipeline")
