"""Per step of sparkbeam's streaming loop: its wall-clock time and the Spark jobs and tasks it ran.

sparkbeam does not expose per-step timings; ``probe_steps`` wraps its step loop for one run
(streaming_sparkbeam.py uses it for the step breakdown and the idle steps).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import attrs

__all__ = ["StepProbe", "jobs_and_tasks", "probe_steps", "settle_listener_bus"]


@attrs.define
class StepProbe:
    """Per step of sparkbeam's loop: wall-clock seconds, and the Spark job group tagging its jobs."""

    prefix: str
    seconds: list[float] = attrs.field(factory=list)

    def group(self, step: int) -> str:
        return f"{self.prefix}-{step}"


_PROBES = 0


@contextlib.contextmanager
def probe_steps(sc: Any) -> Iterator[StepProbe]:
    """Time every step of sparkbeam's step loop and tag the Spark jobs each step starts.

    sparkbeam does not expose per-step timings, so this wraps its (private)
    ``StepLoop.run_step`` in this process for the duration of one run; sparkbeam's code is
    unchanged. The wrapper costs two clock reads and one local property per step. Job groups
    are how Spark's status tracker tells which step started which job; the backend's own
    group is set to the step's for that.
    """
    global _PROBES
    from sparkbeam.runners.core.loop.steps import StepLoop

    _PROBES += 1
    probe = StepProbe(f"sbstep{_PROBES}")
    original = StepLoop.run_step

    def run_step(loop: Any) -> None:
        sc.setJobGroup(probe.group(loop.step), "sparkbeam step")
        # The Spark backend names its own job group on every stage (for cancel() and the
        # progress line): give it this step's group, so that the step's jobs are found.
        if hasattr(loop.backend, "job_group"):
            loop.backend.job_group = probe.group(loop.step)
        started = time.perf_counter()
        try:
            original(loop)
        finally:
            probe.seconds.append(time.perf_counter() - started)

    StepLoop.run_step = run_step  # type: ignore[method-assign]
    try:
        yield probe
    finally:
        StepLoop.run_step = original  # type: ignore[method-assign]
        sc.setLocalProperty("spark.jobGroup.id", None)


def jobs_and_tasks(sc: Any, group: str) -> tuple[int, int]:
    """Spark jobs a job group ran, and their tasks (stages Spark skipped run none)."""
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    tasks = 0
    for job in jobs:
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                tasks += stage_info.numCompletedTasks
    return len(jobs), tasks


def settle_listener_bus() -> None:
    # Spark's status tracker learns of jobs through its listener bus, asynchronously: let it
    # catch up before counting (untimed).
    time.sleep(0.5)
