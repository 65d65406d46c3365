"""A stream's stage reading side inputs under Spark Connect: its waiting elements carried as rows.

In a stream, a main-input element whose side-input window is not complete yet waits in the
reading stage's state (``Strategy.SIDE_INPUT_WAIT``, ``runners/core/loop/side_input_wait.py``).
On a classic session those parked elements are an RDD kept from step to step
(``keyed_stages.side_input_wait``); here they are ``STATE`` rows of the backend's one schema
(``tasks.ROWS``), a pickled ``Parked`` per row, as the checkpoint files hold them
(``state_files.py`` writes and restores them with the keyed stages' buckets). A step:

1. unites the step's new elements with the parked rows (no shuffle: an element waits in
   whichever partition it is in, and the stage keys nothing);
2. runs ``run_waiting`` over each partition (``waiting_task``): the parked elements first,
   then the new ones; what is ready goes through the stage's fused body, what must still wait
   becomes a ``STATE`` row again, what is behind its side input's garbage collection is
   dropped as late, as on a classic session;
3. the result is materialised (``ConnectBackend.materialise``); its ``STATE`` rows, spread
   over the stage's state partitions, are the stage's state for the next step (and what a
   checkpoint writes, a part file per partition), unless nothing waits any more.

Each task reports the side-input watermarks its parked elements wait for (``ReleaseAt``, in
its report row, ``tasks.report_row``); the backend keeps their minimum per side input
(``ConnectBackend.release_at``), so a later step with nothing new whose side inputs have not
reached them skips the stage (``Condition.NOTHING_RELEASABLE``), as on a classic session.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.elements.dofn_invoker import SideInputs
from sparkbeam.runners.core.grouping.records import Parked
from sparkbeam.runners.core.loop.side_input_wait import run_waiting
from sparkbeam.runners.core.loop.steps import StageResult, StageSummary, StepParams
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.connect.frames import Frame
from sparkbeam.runners.spark.connect.keyed_steps import STATE, step_rows
from sparkbeam.runners.spark.stage_records import shippable
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["side_input_wait", "waiting_task"]


def side_input_wait(backend: Any, run: Any) -> StageResult:
    """One step of a stream's stage reading side inputs: see the module docs."""
    stage = run.stage
    (source_pcoll,) = stage.inputs
    new = run.inputs[source_pcoll]
    state = backend.states.get(stage.id)
    parts = []
    if not new.known_empty:
        parts.append(new.df)
    if state is not None:
        parts.append(state)
    if not parts:
        return StageResult({pcoll: Frame(None, known_empty=True, size=0) for pcoll in stage.outputs}, StageSummary())
    combined = functools.reduce(lambda left, right: left.union(right), parts)
    task = functools.partial(waiting_task, shippable(stage), run.params, run.side_inputs or None, backend.error_key)
    outputs, summary = backend.materialise(stage, combined.mapInArrow(task, tasks.ROW_TYPE), run.planned.collected, keeps_state=True)
    kept = backend.kept[-1]
    if summary.side_input_waiting:
        # Spread over the stage's state partitions (round robin, which Spark makes repeatable
        # by sorting first): a checkpoint writes a part file per partition, as for keyed state.
        backend.states[stage.id] = kept.filter(kept["pcoll"] == STATE).repartition(backend.num_partitions)
    else:
        backend.states.pop(stage.id, None)  # nothing waits: no state to carry or checkpoint
        backend.release_at.pop(stage.id, None)
    backend.last_summaries[stage.id] = summary
    return StageResult(outputs, summary)


def _parked_row(record: Any) -> tuple[int, int, bytes] | None:
    if type(record) is not Parked:
        return None
    return (STATE, 0, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))


def waiting_task(
    stage: Stage, params: StepParams, side_inputs: dict[int, list[WindowedValue]] | None, key: bytes, batches: Iterable[Any]
) -> Iterator[Any]:
    """Step 2 of the module docs, on the server, over one partition: its ``STATE`` rows
    (parked elements) and element rows (new ones)."""

    def work(container: Any) -> Iterator[Any]:
        parked: list[WindowedValue] = []
        arriving: list[WindowedValue] = []
        passed: list[tuple[int, int, bytes]] = []  # an upstream task's report, handed on
        for pcoll, h, chunk in tasks.rows_of(batches):
            if pcoll == STATE:
                record = pickle.loads(chunk)
                if type(record) is not Parked:
                    msg = f"'{stage.name}': its state holds a {type(record).__name__}, not elements waiting for side inputs"
                    raise TypeError(msg)
                parked.append(record.element)
            elif pcoll >= 0:
                arriving.extend(pickle.loads(chunk))
            else:
                passed.append((pcoll, h, chunk))
        step = run_waiting(stage, SideInputs(side_inputs) if side_inputs else None, params, arriving, parked)
        # what must still wait, a row each; the release watermarks in the task's report
        yield from step_rows(step, (Parked,), _parked_row, passed, container)

    return tasks.run_task(key, work)
