"""How Spark runs the element-wise strategies of the physical plan (registered under
``SPARK.strategies`` in ``backend.py``); which one runs a stage is the plan's choice
(``runners/core/plan/physical.py``), none is made here:

- ``FUSED_MAP``: the stage's fused body as one ``mapPartitions`` over the union of its
  inputs, its elements bare (no PCollection id) when it has one input and one output;
- ``MAP_SIDE_PASS``: the same body, not run: handed to the batch grouping that alone
  reads its output, which runs it in its map side's pass (``batch_grouping.py``);
- ``AS_READ``: a source stage with no body, its read handed on as it is;
- ``DRIVER_RUN``: the body run in the driver's process (``driver_stages.py``); a run
  that makes too many elements gives up for what the plan runs otherwise;
- ``BATCH_COMBINE``: a batch grouping combined before its shuffle and merged after it,
  then the stage's body over its panes.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sparkbeam.runners.core.loop.steps import StageResult
from sparkbeam.runners.core.lowering.step_values import StageSummary
from sparkbeam.runners.core.lowering.strategies import Strategy
from sparkbeam.runners.core.plan.physical import PlannedStage, choose
from sparkbeam.runners.spark import batch_grouping, driver_stages, stage_records, worker
from sparkbeam.runners.spark.counters import read_and_release
from sparkbeam.runners.spark.datasets import Dataset, StageRun
from sparkbeam.runners.spark.errors import user_errors

if TYPE_CHECKING:
    from sparkbeam.runners.spark.backend import SparkBackend

__all__ = ["as_read", "batch_combine", "fused_map", "map_side_pass", "on_driver"]


def fused_map(backend: SparkBackend, run: StageRun) -> StageResult:
    return _fused(backend, run, hand_on=False)


def map_side_pass(backend: SparkBackend, run: StageRun) -> StageResult:
    return _fused(backend, run, hand_on=True)


def _fused(backend: SparkBackend, run: StageRun, *, hand_on: bool) -> StageResult:
    planned, stage, side = run.planned, run.stage, run.side
    counters = (backend.sc.accumulator(0), backend.sc.accumulator(0))
    if planned.bare:
        # The common chain: its elements need no PCollection ids in or out.
        ((pcoll, source),) = run.inputs.items()
        shipped = stage_records.shippable(stage)
        by_value = source.values is not None
        run_body = worker.run_bare_body_on_values if by_value else worker.run_bare_body
        entering = source.values if by_value else source.rdd
        body = entering.mapPartitions(backend.metered(run_body, shipped, side, counters, pcoll))
        body.setName(stage.name)
        upstream = batch_grouping.UpstreamBody(entering, shipped, side, counters, pcoll, by_value) if hand_on else None
        outputs = bare_outputs(backend, planned, body, source.known_empty, upstream)
    else:
        tagged = [
            Dataset(d.rdd.mapPartitions(functools.partial(worker.tagged, pcoll)), d.known_empty)
            for pcoll, d in run.inputs.items()
        ]
        source = backend.union(tagged)
        body = source.rdd.mapPartitions(backend.metered(worker.run_body, stage_records.shippable(stage), side, counters))
        body.setName(stage.name)
        outputs = split_outputs(backend, planned, body, source.known_empty)
    if planned.leaf and not source.known_empty:
        with user_errors(backend.error_key):
            body.count()  # nothing downstream will make Spark run it

    def summary() -> StageSummary:
        elements_in, elements_out = read_and_release(*counters)
        return StageSummary(elements_in=elements_in, elements_out=elements_out)

    return StageResult(outputs, summary)


def split_outputs(backend: SparkBackend, planned: PlannedStage, tagged_rdd: Any, known_empty: bool) -> dict[int, Dataset]:
    """Each output of a body that yields (pcoll, element) pairs."""
    stage = planned.stage
    if not stage.outputs:
        return {}
    if planned.keep_outputs:
        # Read more than once (several outputs, one output read by several consumers, or
        # collected and consumed downstream): persisted, so that the stage's DoFns run once.
        tagged_rdd = backend.once(tagged_rdd)
    return {
        pcoll: Dataset(tagged_rdd.mapPartitions(functools.partial(stage_records.select_tagged, pcoll)), known_empty)
        for pcoll in stage.outputs
    }


def bare_outputs(
    backend: SparkBackend, planned: PlannedStage, rdd: Any, known_empty: bool, upstream: batch_grouping.UpstreamBody | None = None
) -> dict[int, Dataset]:
    """``split_outputs`` for a body that yields its one output's elements bare;
    ``upstream``: that body, for the batch grouping that alone reads it."""
    (pcoll,) = planned.stage.outputs
    # Kept only when read more than once (a collect counts as a reader): an output only
    # collected is read by that one job, and storing it would pickle every element twice
    # more on its way.
    if planned.keep_outputs:
        rdd = backend.once(rdd)
    return {pcoll: Dataset(rdd, known_empty, upstream=upstream)}


def as_read(backend: SparkBackend, run: StageRun) -> StageResult:
    """A source whose elements the driver holds or has counted (an Impulse's, a SQL plan's
    panes), read as they are: no job runs an empty body over them."""
    ((pcoll, held),) = run.inputs.items()
    count = len(held.collected) if held.collected is not None else held.size
    return StageResult({pcoll: held}, StageSummary(elements_in=count or 0, elements_out=count or 0))


def on_driver(backend: SparkBackend, run: StageRun) -> StageResult:
    counters = (backend.sc.accumulator(0), backend.sc.accumulator(0))
    made = driver_stages.run_on_driver(run.stage, run.inputs, run.side_inputs, backend.channel(), counters)
    if made is None:
        # Too many elements: given up (its metrics counted as a failed attempt's) for what
        # the plan runs otherwise.
        read_and_release(*counters)
        otherwise = choose(run.planned, run.facts, after=Strategy.DRIVER_RUN)
        return backend.strategy(otherwise)(backend, run)
    outputs = {pcoll: backend.from_driver(elements, keep=True) for pcoll, elements in made.items()}

    def summary() -> StageSummary:
        elements_in, elements_out = read_and_release(*counters)
        return StageSummary(elements_in=elements_in, elements_out=elements_out)

    return StageResult(outputs, summary)


def batch_combine(backend: SparkBackend, run: StageRun) -> StageResult:
    planned, stage = run.planned, run.stage
    grouping = stage.grouping
    (source_pcoll,) = grouping.inputs
    new = run.inputs[source_pcoll]
    (head_output,) = grouping.outputs
    counters = (backend.sc.accumulator(0), backend.sc.accumulator(0))
    panes = batch_grouping.group(
        new.rdd, grouping, backend.num_partitions, backend.overlapping_window_rule, counters[0], backend.channel(), new.upstream
    )
    body_counters = (backend.sc.accumulator(0), backend.sc.accumulator(0))
    shipped = stage_records.shippable(stage)
    if planned.bare:
        body = panes.mapPartitions(backend.metered(worker.run_bare_body, shipped, run.side, body_counters, head_output))
        outputs = bare_outputs(backend, planned, body, new.known_empty)
    else:
        entering = panes.mapPartitions(functools.partial(worker.tagged, head_output))
        body = entering.mapPartitions(backend.metered(worker.run_body, shipped, run.side, body_counters))
        outputs = split_outputs(backend, planned, body, new.known_empty)
    if planned.leaf:
        with user_errors(backend.error_key):
            body.count()

    def summary() -> StageSummary:
        elements_in, _, elements_out, _ = read_and_release(*counters, *body_counters)
        return StageSummary(elements_in=elements_in, elements_out=elements_out)

    return StageResult(outputs, summary)
