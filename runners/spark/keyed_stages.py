"""How Spark runs the keyed strategies of the physical plan (registered under
``SPARK.strategies`` in ``backend.py``); which one runs a stage is the plan's choice
(``runners/core/plan/physical.py``), none is made here.

- ``LIFTED_GROUPING``, ``UNLIFTED_GROUPING``, ``STATEFUL``: the step's new elements (or,
  lifted, one partial per key and window of each partition, ``runners/core/grouping/lifting.py``)
  are shuffled with a fixed hash partitioner and united, partition by partition, with the
  keyed state of the previous step (same partitioner: the state is never shuffled); one
  ``mapPartitions`` runs the engine (or the stateful DoFn) and the stage's fused body, and
  yields the new state, the outputs and a small summary per partition. The summary job
  runs with the stage, or, put off, with the step's other keyed stages' as one;
- ``SIDE_INPUT_WAIT``: a stream's stage reading side inputs keeps the main-input elements
  that wait for them in an RDD partitioned like keyed state: its new elements run in place,
  only those that must wait are shuffled into the parked state, and the parked state is
  released partition by partition, never shuffled (``runners/core/loop/side_input_wait.py``);
- ``SKIP_IDLE``: nothing runs; the state and the last summary are carried over.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sparkbeam.runners.core.grouping.grouping import engine_for
from sparkbeam.runners.core.loop.steps import StageResult
from sparkbeam.runners.core.lowering.ops import GroupOp
from sparkbeam.runners.core.lowering.step_values import StageSummary
from sparkbeam.runners.spark import stage_records, worker
from sparkbeam.runners.spark.datasets import Dataset, StageRun
from sparkbeam.runners.spark.errors import user_errors
from sparkbeam.utils.timestamp import MAX_TIMESTAMP

if TYPE_CHECKING:
    from sparkbeam.runners.spark.backend import SparkBackend

__all__ = ["EngineFactory", "lifted_grouping", "run_put_off", "side_input_wait", "skip_idle", "state_of", "stateful", "unlifted_grouping"]

MAX = MAX_TIMESTAMP.micros


class EngineFactory:
    """Builds a stage's grouping engine on the executor (engines are cheap; specs pickle small)."""

    def __init__(self, op: GroupOp, overlapping_window_rule: bool, batch: bool) -> None:
        self.op = op
        self.overlapping_window_rule = overlapping_window_rule
        self.batch = batch

    def __call__(self) -> Any:
        return engine_for(self.op, overlapping_window_rule=self.overlapping_window_rule, batch=self.batch)


def skip_idle(backend: SparkBackend, run: StageRun) -> StageResult:
    """A step with nothing to do: no job, the state carried as it is, the last summary's
    holds and timers standing."""
    summary = StageSummary.carried(run.facts.previous if run.facts.has_state else None)
    return StageResult({pcoll: Dataset(backend.sc.emptyRDD(), True) for pcoll in run.stage.outputs}, summary)


def lifted_grouping(backend: SparkBackend, run: StageRun) -> StageResult:
    op = run.stage.grouping
    # One record per key and window of each partition: the combine lifted.
    keyed = backend.metered(worker.precombined, op, backend.overlapping_window_rule, run.params.output_watermark)
    return _keyed_step(backend, run, keyed, _grouping_step(backend, run))


def unlifted_grouping(backend: SparkBackend, run: StageRun) -> StageResult:
    return _keyed_step(backend, run, backend.keyed(worker.keyed_elements, run.stage.grouping), _grouping_step(backend, run))


def stateful(backend: SparkBackend, run: StageRun) -> StageResult:
    # A stateful DoFn's state and timers live in the same keyed-state RDD as grouping
    # state: united with the step's elements partition by partition, never shuffled.
    keyed = backend.keyed(worker.keyed_for_state, run.stage.grouping)
    store = backend.state_store(run.planned)
    step = backend.metered(worker.stateful_partition_step, stage_records.shippable(run.stage), store, run.params, run.side)
    return _keyed_step(backend, run, keyed, step)


def _grouping_step(backend: SparkBackend, run: StageRun) -> Any:
    factory = EngineFactory(run.stage.grouping, backend.overlapping_window_rule, run.params.batch)
    store = backend.state_store(run.planned)
    return backend.metered(worker.grouping_partition, stage_records.shippable(run.stage), store, factory, run.params, run.side)


def _keyed_step(backend: SparkBackend, run: StageRun, keyed: Any, step: Any) -> StageResult:
    """One step of a keyed stage: ``keyed`` makes the shuffle's records of a partition of
    new elements, ``step`` runs a partition of state and records."""
    planned, stage = run.planned, run.stage
    grouping = stage.grouping
    (source_pcoll,) = grouping.inputs
    new = run.inputs[source_pcoll]
    state = backend.states.get(stage.id)
    if new.known_empty and state is not None:
        combined = state  # only timers to fire: nothing to shuffle
    else:
        shuffled = new.rdd.mapPartitions(keyed).partitionBy(backend.num_partitions, backend.partition_fn)
        combined = shuffled if state is None else state.union(shuffled)
    if combined.getNumPartitions() != backend.num_partitions:
        msg = (
            f"'{grouping.label}': Spark did not unite the state with the new elements partition by "
            "partition (their partitioners differ); this is a sparkbeam bug"
        )
        raise RuntimeError(msg)
    result = combined.mapPartitions(step, preservesPartitioning=True)
    # The state of step n derives from step n-1's: truncate that lineage every few steps
    # (a checkpoint costs a write of the state, so not every step).
    # Persisting first also stops PySpark from pipelining the next mapPartitions into
    # this one, which would leave the checkpoint unwritten.
    backend.keep(result.setName(f"{stage.name} (keyed state and panes)"))
    backend.truncate_lineage_now_and_then(stage.id, result)
    # Until the summary job says the step handed on nothing but state (state_of).
    backend.states[stage.id] = result.mapPartitions(stage_records.strip_state, preservesPartitioning=True)
    stale = backend.state_results.get(stage.id)
    backend.state_results[stage.id] = result
    if stale is not None:
        backend.step_cache.append(stale)  # unpersisted at the end of the step
    if planned.put_off_summary:
        # The summary job waits, to run with the step's other keyed stages' as one: a
        # Spark job costs far more than the few records a step moves.
        backend.put_off.append((stage.id, stage.name, result))
        outputs = {pcoll: Dataset(result.mapPartitions(functools.partial(stage_records.select, pcoll))) for pcoll in stage.outputs}
        return StageResult(outputs, functools.partial(put_off_summary, backend, stage.id), deferred=True)
    # One job per stage and step: the summaries, and the outputs the loop will collect.
    wanted = planned.collected
    with user_errors(backend.error_key):
        fetched = result.mapPartitions(functools.partial(stage_records.summaries_and, wanted)).collect()
    summary, collected, _ = stage_records.sort_fetched(fetched, wanted)
    backend.last_summaries[stage.id] = summary
    state_of(backend, stage.id, sum(record.count for _, record in fetched if type(record) is stage_records.Handed))
    # With no pane fired, the fused body saw nothing and emitted nothing.
    outputs = {
        pcoll: Dataset(
            result.mapPartitions(functools.partial(stage_records.select, pcoll)),
            summary.elements_out == 0,
            collected.get(pcoll),
        )
        for pcoll in stage.outputs
    }
    return StageResult(outputs, summary)


def put_off_summary(backend: SparkBackend, stage_id: int) -> StageSummary:
    """A put-off stage's summary: the first one asked for runs every put-off job, as one."""
    if backend.put_off:
        run_put_off(backend)
    return backend.last_summaries[stage_id]


def run_put_off(backend: SparkBackend) -> None:
    """The summary jobs put off so far in the step, as one Spark job."""
    put_off, backend.put_off = backend.put_off, []
    names = ", ".join(name for _, name, _ in put_off)
    backend.sc.setJobGroup(backend.job_group, f"{names} (summaries)", True)
    summaries = [result.mapPartitions(functools.partial(stage_records.stage_summaries, stage_id)) for stage_id, _, result in put_off]
    with user_errors(backend.error_key):
        fetched = (summaries[0] if len(summaries) == 1 else backend.sc.union(summaries)).collect()
    parts: dict[int, list[StageSummary]] = {stage_id: [] for stage_id, _, _ in put_off}
    handed = dict.fromkeys(parts, 0)
    for stage_id, summary in fetched:
        if type(summary) is stage_records.Handed:
            handed[stage_id] += summary.count
        else:
            parts[stage_id].append(summary)
    for stage_id, found in parts.items():
        backend.last_summaries[stage_id] = functools.reduce(StageSummary.merge, found, StageSummary())
        state_of(backend, stage_id, handed[stage_id])


def state_of(backend: SparkBackend, stage_id: int, handed: int) -> None:
    """What the next step of a keyed stage reads as its state, once the summary job has
    counted the records its step handed on besides state and summaries: with none (a step
    that fired nothing), the step's cached records themselves, whose summaries the next
    step skips; else the copy of them that keeps only the state (``strip_state``).

    That copy is a pass of every state record through a Python worker and back into the
    JVM, in every step: at a million keys, tens of megabytes of buckets unpickled and
    pickled again to drop one record per partition."""
    if handed == 0:
        backend.states[stage_id] = backend.state_results[stage_id]


def side_input_wait(backend: SparkBackend, run: StageRun) -> StageResult:
    """A streaming step of a stage reading side inputs: release the parked elements whose
    side inputs are now ready, run the ready new ones in place, park the rest."""
    stage, params, side = run.stage, run.params, run.side
    (source_pcoll,) = stage.inputs
    new = run.inputs[source_pcoll]
    state = backend.states.get(stage.id)
    ship = stage_records.shippable(stage)
    passes = []  # RDDs of the step's records: outputs, summaries, parked elements
    parked_parts = []
    if state is not None:
        released = state.mapPartitionsWithIndex(
            backend.metered(worker.waiting_partition, ship, side, params, backend.num_partitions, True),
            preservesPartitioning=True,
        )
        passes.append(backend.once(released))
        parked_parts.append(released.mapPartitions(stage_records.parked, preservesPartitioning=True))
    if not new.known_empty:
        fresh = new.rdd.mapPartitionsWithIndex(
            backend.metered(worker.waiting_partition, ship, side, params, backend.num_partitions, False)
        )
        passes.append(backend.once(fresh))
        parked_parts.append(fresh.mapPartitions(stage_records.parked).partitionBy(backend.num_partitions, backend.partition_fn))
    parked = parked_parts[0] if len(parked_parts) == 1 else parked_parts[0].union(parked_parts[1])
    if parked.getNumPartitions() != backend.num_partitions:
        msg = (
            f"'{stage.name}': Spark did not unite the parked elements with the new ones partition by "
            "partition (their partitioners differ); this is a sparkbeam bug"
        )
        raise RuntimeError(msg)
    backend.keep(parked)
    backend.truncate_lineage_now_and_then(stage.id, parked)  # as grouping state
    # One job: the summaries and wanted outputs of both passes, and the new parked state.
    wanted = run.planned.collected
    collect = [records.mapPartitions(functools.partial(stage_records.reports_and, wanted)) for records in passes]
    with user_errors(backend.error_key):
        fetched = backend.sc.union([*collect, parked.mapPartitions(stage_records.materialise)]).collect()
    summary, collected, release = stage_records.sort_fetched(fetched, wanted)
    backend.last_summaries[stage.id] = summary
    backend.release_at[stage.id] = release
    stale = backend.state_results.pop(stage.id, None)
    if stale is not None:
        backend.step_cache.append(stale)  # unpersisted at the end of the step
    if summary.side_input_waiting:
        backend.states[stage.id] = backend.state_results[stage.id] = parked
    else:
        backend.states.pop(stage.id, None)  # nothing waits: no state to keep or checkpoint
        backend.step_cache.append(parked)
    out = passes[0] if len(passes) == 1 else backend.sc.union(passes)
    outputs = {
        pcoll: Dataset(out.mapPartitions(functools.partial(stage_records.select, pcoll)), summary.elements_out == 0, collected.get(pcoll))
        for pcoll in stage.outputs
    }
    return StageResult(outputs, summary)
