"""A stream's keyed stages under Spark Connect: keyed state carried between steps as rows.

In a stream a grouping or a stateful DoFn keeps its state from step to step. On a classic
session that state is an RDD partitioned like the shuffle; under Connect it is rows of the
backend's one schema (``tasks.ROWS``), a ``STATE`` row per hash bucket of a partition
(``StateBucket``, ``keyed_buckets.py``: the same store, headers and skipping rules as a
classic run), kept from the stage's last step. A step:

1. keys the step's new elements (``tasks.grouping_map_task`` / ``state_map_task``: a
   ``KEYED`` row each, ``h`` the key's hash), or, for a lifted combine, the partition's
   partials per key and window (``tasks.lifted_map_task``: a ``KEYED`` row each);
2. unites them with the state rows and ``repartition(n, "h")``: every row goes to the
   partition of its ``h``. A state row carries the ``h`` of a row that reached its
   partition when it was written (the partition's *anchor*), so that it comes back to the
   same partition as the new elements of its keys (``n`` is fixed for the run, and a
   shuffle into an explicit number of partitions is not coalesced by Spark);
3. runs the classic worker's step over each partition (``worker.grouping_partition`` /
   ``stateful_partition_step``: the engine's triggers, watermark holds and timers, then
   the stage's fused body), with its state rows, outputs and report as rows;
4. the result is materialised with ``localCheckpoint`` (``ConnectBackend.materialise``:
   eager every ``CUT_EVERY`` steps, which cuts the state's lineage there; lazy, one job
   fewer, in between); the next step reads the ``STATE`` rows of it.
   Its partitions are the shuffle's, so a step with no new elements (a watermark or a
   timer firing) runs over those rows as they are, without step 2's shuffle
   (``ConnectBackend.placed``); restored state is shuffled once first.

A step with nothing new and nothing due (``Strategy.SKIP_IDLE``) runs no job: the state
rows and the last summary are carried, as on a classic session. The state's rows are
pickled by these functions alone and read only by them.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.grouping.records import ReleaseAt, StateBucket, StateIndex, Summary
from sparkbeam.runners.core.loop.steps import StageResult, StageSummary, StepParams
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.connect.frames import Frame, feed
from sparkbeam.runners.spark.stage_records import shippable
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["STATE", "keyed_step", "keyed_step_task", "scripted_step", "skip_idle", "step_rows"]

#: a partition's hash bucket of keyed state (a pickled ``StateBucket``), or the index of its
#: buckets' timers and holds (a pickled ``StateIndex``, ``timer_index.py``), ``h`` its anchor
STATE = -4


class _Held:
    """Side inputs as the classic worker reads them (a broadcast's ``value``): under
    Connect they travel inside the task's function."""

    def __init__(self, value: dict[int, list[WindowedValue]]) -> None:
        self.value = value


def keyed_step(backend: Any, run: Any, *, stateful: bool, lifted: bool = False) -> StageResult:
    """One step of a stream's grouping (``stateful``: a stateful DoFn; ``lifted``: a
    combine's partials per key and window cross the shuffle instead of its elements): see
    the module docs."""
    stage = run.stage
    op = stage.grouping
    source = backend.union([run.inputs[pcoll] for pcoll in dict.fromkeys(op.inputs)])
    state = backend.states.get(stage.id)
    key = backend.error_key
    parts = []
    if not source.known_empty:
        entering, read = feed(source)
        if lifted:
            keying = functools.partial(tasks.lifted_map_task, op, backend.overlapping_window_rule, run.params.output_watermark, key, read)
        else:
            keying = functools.partial(tasks.state_map_task if stateful else tasks.grouping_map_task, op, key, read)
        parts.append(entering.mapInArrow(keying, tasks.ROW_TYPE))
    if state is not None:
        parts.append(state)
    if not parts:
        # Nothing new and no state: nothing can fire (SKIP_IDLE takes such a step first).
        return StageResult({pcoll: Frame(None, known_empty=True, size=0) for pcoll in stage.outputs}, StageSummary())
    if source.known_empty and stage.id in backend.placed:
        # Only the state's rows, each already in its keys' partition (the last step's
        # output, partition for partition): nothing to shuffle.
        shuffled = state
    else:
        combined = functools.reduce(lambda left, right: left.union(right), parts)
        shuffled = combined.repartition(backend.num_partitions, "h")
    factory = None
    if not stateful:
        from sparkbeam.runners.spark.keyed_stages import EngineFactory

        factory = EngineFactory(op, backend.overlapping_window_rule, run.params.batch)
    side = _Held(run.side_inputs) if run.side_inputs else None
    store = backend.state_store(run.planned)
    task = functools.partial(keyed_step_task, shippable(stage), store, factory, run.params, side, key)
    outputs, summary = backend.materialise(stage, shuffled.mapInArrow(task, tasks.ROW_TYPE), run.planned.collected, keeps_state=True)
    kept = backend.kept[-1]
    if summary.state_keys:
        backend.states[stage.id] = kept.filter(kept["pcoll"] == STATE)
        backend.placed.add(stage.id)
    else:
        backend.states.pop(stage.id, None)  # every key's state expired: nothing to carry
        backend.placed.discard(stage.id)
    backend.last_summaries[stage.id] = summary
    return StageResult(outputs, summary)


def skip_idle(backend: Any, run: Any) -> StageResult:
    """A step with nothing to do: no job, the state rows carried as they are, the last
    summary's holds and timers standing."""
    summary = StageSummary.carried(run.facts.previous if run.facts.has_state else None)
    return StageResult({pcoll: Frame(None, known_empty=True, size=0) for pcoll in run.stage.outputs}, summary)


def scripted_step(backend: Any, op: Any, emission: Any) -> Any:
    """A TestStream event's elements, from the driver, in one partition: one bundle per
    event, as on a classic session."""
    (pcoll,) = op.outputs
    elements = list(emission.elements)
    rows = [
        (pcoll, 0, pickle.dumps(elements[at : at + tasks.CHUNK], protocol=pickle.HIGHEST_PROTOCOL))
        for at in range(0, len(elements), tasks.CHUNK)
    ]
    df = backend.session.createDataFrame(rows, schema=tasks.ROW_TYPE)
    return Frame(df.coalesce(1), size=len(elements))


def keyed_step_task(
    stage: Stage, store: Any, factory: Any, params: StepParams, side: _Held | None, key: bytes, batches: Iterable[Any]
) -> Iterator[Any]:
    """Step 3 of the module docs, on the server: the partition's state rows and keyed
    elements through the classic worker's step (a grouping when ``factory`` makes its
    engine, else a stateful DoFn); its state as ``STATE`` rows at the partition's anchor,
    its outputs as element rows, its ``Summary`` as the task's report."""
    from sparkbeam.runners.spark import worker

    def work(container: Any) -> Iterator[Any]:
        anchor: int | None = None
        records: list[tuple[Any, Any]] = []
        passed: list[tuple[int, int, bytes]] = []
        for pcoll, h, chunk in tasks.rows_of(batches):
            if pcoll == tasks.KEYED or pcoll == STATE:
                if anchor is None:
                    anchor = h
                records.append((None, pickle.loads(chunk)) if pcoll == STATE else pickle.loads(chunk))
            else:
                passed.append((pcoll, h, chunk))
        if factory is None:
            step = worker.stateful_partition_step(stage, store, params, side, records)
        else:
            step = worker.grouping_partition(stage, store, factory, params, side, records)
        def state_row(record: Any) -> tuple[int, int, bytes] | None:
            if anchor is None:  # no key reached this partition: nothing is kept
                return None
            return (STATE, anchor, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))

        yield from step_rows(step, (StateBucket, StateIndex), state_row, passed, container)

    return tasks.run_task(key, work)


def step_rows(
    step: Iterable[tuple[Any, Any]],
    state_kinds: tuple[type, ...],
    state_row: Any,
    passed: list[tuple[int, int, bytes]],
    container: Any,
) -> Iterator[Any]:
    """A partition's step as Arrow batches of rows: its records of ``state_kinds`` as the
    rows ``state_row`` makes of them (None: not kept), its outputs as element rows, the rows
    ``passed`` on as they came, and last the task's report of its ``Summary`` (and of its
    ``ReleaseAt``, a stage waiting for side inputs)."""
    output = tasks.Output()
    summary = StageSummary()
    release: list[tuple[int, int]] | None = None
    for where, record in step:
        kind = type(record)
        if kind in state_kinds:
            row = state_row(record)
            if row is not None:
                output.add_row(row)
        elif kind is Summary:
            summary = record.summary
        elif kind is ReleaseAt:
            release = [*(release or ()), *record.watermarks]
        else:
            batch = output.add(where, record)
            if batch is not None:
                yield batch
    for row in passed:
        output.add_row(row)
    output.add_row(tasks.report_row(summary, container.updates(), release_at=release))
    yield output.close()
