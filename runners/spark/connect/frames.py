"""What a Spark Connect step hands between stages: frames of element rows, and a stage's run.

A ``Frame`` is a DataFrame of ``tasks.ROWS`` (elements pickled in chunks) of one
PCollection, or what stands for one: known empty, rows the driver already fetched
(``held``), a bounded read not read yet (``Reading``: its bundle rows, read in the task of
the stage that takes them, ``feed``) or a fused body handed to the batch combine that
alone reads its output (``UpstreamPass``). ``ConnectRun`` is one stage's step as a
strategy's implementation (``stages.py``, ``keyed_steps.py``...) receives it.
"""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.runners.core.loop.steps import StepParams
from sparkbeam.runners.core.plan.physical import PlannedStage, StepFacts
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["ConnectRun", "Frame", "Reading", "UpstreamPass", "driver_alone_reads", "feed"]


@attrs.frozen
class Frame:
    """A DataFrame of one PCollection's element rows (None when known to be empty), and
    how many elements it has where the driver knows."""

    df: Any
    known_empty: bool = False
    size: int | None = None
    #: the rows are a body's output that a batch combine's map side runs instead (``map_side_pass``)
    upstream: UpstreamPass | None = None
    #: the chunks of its rows, where the driver fetched them with the stage's reports
    held: list[bytes] | None = None
    #: a bounded read's bundle rows, which the task of a stage taking the elements reads
    #: itself (``feed``); ``df`` reads them in a task of its own
    reading: Reading | None = None


@attrs.frozen
class Reading:
    """A bounded read not yet read: the DataFrame of its bundle rows and what reads them
    (``reads.BundleReader``)."""

    bundles: Any
    read: tasks.Reader


def feed(frame: Frame) -> tuple[Any, tasks.Reader | None]:
    """The DataFrame a task taking the frame's elements maps over, and the reader the task
    reads the read's bundles with (None: rows of elements): a read's elements then go
    from the file into the task's code with no rows between."""
    if frame.reading is not None:
        return frame.reading.bundles, frame.reading.read
    return frame.df, None


@attrs.frozen
class UpstreamPass:
    """A bare fused body not run, handed with the DataFrame of its input rows (and their
    reader, ``feed``) to the batch combine that alone reads its output (``Strategy.MAP_SIDE_PASS``)."""

    source: Any
    body: tasks.UpstreamBody
    read: tasks.Reader | None = None


@attrs.frozen
class ConnectRun:
    """One stage's step as its strategy's implementation runs it."""

    planned: PlannedStage
    inputs: dict[int, Frame]
    params: StepParams
    side_inputs: dict[int, list[WindowedValue]]
    facts: StepFacts

    @property
    def stage(self) -> Stage:
        return self.planned.stage


def driver_alone_reads(stage: Stage, collected: frozenset[int]) -> bool:
    """Whether the driver collects each of the stage's outputs and nothing else reads any
    (no other stage, no sink): then no row of it need be kept on the server."""
    return not stage.sinks and all(pcoll in collected and pcoll not in stage.shared_outputs for pcoll in stage.outputs)
