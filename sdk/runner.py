"""Runner lookup and the result of a run. The Spark runner is imported only when a pipeline runs."""

from __future__ import annotations

import enum
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkbeam.options.pipeline_options import PipelineOptions
    from sparkbeam.pipeline import Pipeline

__all__ = ["PipelineResult", "PipelineRunner", "PipelineState", "create_runner"]


class PipelineState(str, enum.Enum):
    """Where a run is, with Beam's state names (compare with ``PipelineState.DONE``)."""

    UNKNOWN = "UNKNOWN"
    STARTING = "STARTING"
    STOPPED = "STOPPED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UPDATED = "UPDATED"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    PENDING = "PENDING"
    CANCELLING = "CANCELLING"
    RESOURCE_CLEANING_UP = "RESOURCE_CLEANING_UP"
    UNRECOGNIZED = "UNRECOGNIZED"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def is_terminal(cls, state: str) -> bool:
        """Whether the run is over and its state will not change: DONE, FAILED, CANCELLED
        (and Beam's UPDATED and DRAINED, which a Spark run does not reach)."""
        return state in (cls.DONE, cls.FAILED, cls.CANCELLED, cls.UPDATED, cls.DRAINED)


class PipelineRunner:
    """Runs a finished pipeline."""

    def run_pipeline(self, pipeline: Pipeline, options: PipelineOptions) -> PipelineResult:
        raise NotImplementedError


class PipelineResult:
    """What a run returns: its state, and (per runner) what it measured.

    As in Beam: ``state`` is RUNNING while the run goes on; ``wait_until_finish(duration)``
    waits up to ``duration`` milliseconds (None: until the end) and returns the state;
    ``cancel()`` stops the run and returns its final state. This base class describes a run
    that is over when it is returned.
    """

    def __init__(self, state: PipelineState) -> None:
        self._state = state

    @property
    def state(self) -> PipelineState:
        return self._state

    def wait_until_finish(self, duration: Any = None) -> PipelineState:
        return self._state

    def cancel(self) -> PipelineState:
        if PipelineState.is_terminal(self._state):
            return self._state  # a finished run has nothing to stop
        msg = f"{type(self).__name__} cannot cancel a run in state {self._state}"
        raise NotImplementedError(msg)


# Beam's local runner names map to the Spark runner on the embedded local master,
# so that Beam code naming them runs unchanged.
_RUNNERS = {
    "sparkrunner": "sparkbeam.runners.spark.runner:SparkRunner",
    "spark": "sparkbeam.runners.spark.runner:SparkRunner",
    "directrunner": "sparkbeam.runners.spark.runner:SparkRunner",
    "switchingdirectrunner": "sparkbeam.runners.spark.runner:SparkRunner",
    "bundlebaseddirectrunner": "sparkbeam.runners.spark.runner:SparkRunner",
    "fnapirunner": "sparkbeam.runners.spark.runner:SparkRunner",
    "testdirectrunner": "sparkbeam.runners.spark.runner:SparkRunner",
}


def create_runner(runner: Any) -> PipelineRunner:
    if isinstance(runner, PipelineRunner):
        return runner
    if runner is None:
        runner = "SparkRunner"
    if not isinstance(runner, str):
        msg = f"runner must be a runner name or a PipelineRunner, not {runner!r}"
        raise TypeError(msg)
    target = _RUNNERS.get(runner.lower())
    if target is None:
        known = "SparkRunner (also answering to DirectRunner, FnApiRunner, BundleBasedDirectRunner)"
        msg = f"unknown runner {runner!r}; sparkbeam runs pipelines with {known}"
        raise ValueError(msg)
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)()
