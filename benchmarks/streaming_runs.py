"""A streaming peer's timed runs at one size, checked against the oracle: its ``Outcome``."""

from __future__ import annotations

import statistics
from typing import Any

import attrs

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
from measuring import MachineWatch, PeerProfile
from streaming_peer import Peer
from streaming_script import Script
from workloads import compare, expected_totals, failure

__all__ = ["Outcome", "measure"]


@attrs.define
class Outcome:
    """One peer at one size: its timed runs, what they cost, and how its result compares."""

    peer: str
    events: int
    seconds: float | None = None  # best of the timed runs
    runs: list[float] = attrs.field(factory=list)
    steps: int | None = None
    cpu_seconds: float | None = None  # CPU time of this process tree per timed run
    others_cores: float | None = None  # CPU used by other processes during the timed runs
    problem: str | None = None  # why it did not run, or how its result differs
    disagrees: bool = False
    details: list[str] = attrs.field(factory=list)


def measure(
    peer: str,
    runner: Peer,
    script: Script,
    warmup: Script | None,
    repeat: int,
    profile_dir: str | None,
    spark: Any,
) -> Outcome:
    expected = expected_totals(script.all_events)
    outcome = Outcome(peer, script.events)
    cpu_seconds: list[float] = []
    others_cores: list[float] = []
    profile = PeerProfile(profile_dir, f"{peer}-{script.events}", spark)
    try:
        if warmup is not None:
            # Not timed: starts PySpark's Python workers, loads classes, plans a first query.
            runner.run(runner.prepare(warmup))
        for _ in range(repeat):
            prepared = runner.prepare(script)
            with MachineWatch() as watch, profile.run():
                run = runner.run(prepared)
            outcome.runs.append(run.seconds)
            # The process tree's CPU is read before and after the run; PySpark workers that an
            # earlier run started may exit meanwhile and take their CPU time out of the tree
            # (seen: -88 s for Beam after sparkbeam): then the figure is unknown, not negative.
            if (
                watch.cpu_seconds is not None
                and watch.others_cores is not None
                and watch.cpu_seconds >= 0
            ):
                cpu_seconds.append(watch.cpu_seconds)
                others_cores.append(watch.others_cores)
            outcome.steps = run.steps
            outcome.details = run.details + (run.explain() if run.explain else [])
            difference = compare(expected, run.rows)
            if run.extra_panes:
                extra = f"{run.extra_panes} EARLY/LATE panes where nothing is late"
                difference = extra if difference is None else f"{difference}; {extra}"
            if difference is not None:
                outcome.problem = f"disagrees with the oracle: {difference}"
                outcome.disagrees = True
                break
        if cpu_seconds:
            outcome.cpu_seconds = statistics.fmean(cpu_seconds)
            outcome.others_cores = statistics.fmean(others_cores)
        summary = profile.summary(script.events)
        if summary is not None:
            outcome.details.append(summary)
    except Exception as error:
        outcome.problem = failure(error)
    if outcome.runs:
        outcome.seconds = min(outcome.runs)
    return outcome
