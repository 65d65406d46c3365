"""What the Spark backend moves between stages (``Dataset``), and what a strategy's
implementation is given to run one stage for one step (``StageRun``)."""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.runners.core.lowering.step_values import StepParams
from sparkbeam.runners.core.plan.physical import PlannedStage, StepFacts
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["Dataset", "StageRun"]


@attrs.frozen
class Dataset:
    """An RDD of WindowedValue; whether the driver knows it is empty (to skip idle work);
    and its elements when the stage's own job already fetched them."""

    rdd: Any
    known_empty: bool = False
    collected: list | None = None
    #: the bare body that makes ``rdd``, for the batch grouping that alone reads it to run
    #: in its own pass (``Strategy.MAP_SIDE_PASS``)
    upstream: Any = None
    #: the same elements' values alone, when each is in the global window at the minimum
    #: timestamp with an unknown pane (a text file's lines): a body reads them so
    values: Any = None
    #: how many elements there are, where the driver knows without holding them (a SQL
    #: plan's panes made on the executors)
    size: int | None = None


@attrs.frozen
class StageRun:
    """One stage's step as its strategy's implementation runs it."""

    planned: PlannedStage
    inputs: dict[int, Dataset]
    params: StepParams
    #: the step's side inputs: as the driver holds them, and broadcast (None: none)
    side_inputs: dict[int, list[WindowedValue]]
    side: Any
    facts: StepFacts

    @property
    def stage(self) -> Stage:
        return self.planned.stage


def step_facts(planned: PlannedStage, inputs: dict[int, Dataset], params: StepParams, **known: Any) -> StepFacts:
    """The facts the conditions of ``planned`` read, from the step's input datasets;
    ``known``: what the backend keeps (``has_state``, ``previous``, ``release_at``)."""
    datasets = list(inputs.values())
    holding = [d.collected for d in datasets if d.collected is not None]
    held = sum(len(elements) for elements in holding) if len(holding) == len(datasets) else None
    sizes = [len(d.collected) if d.collected is not None else d.size for d in datasets]
    counts = [size for size in sizes if size is not None]
    counted = sum(counts) if len(counts) == len(sizes) else None
    return StepFacts(params, nothing_new=all(d.known_empty for d in datasets), held=held, counted=counted, **known)
