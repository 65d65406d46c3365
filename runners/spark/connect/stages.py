"""How the Spark Connect backend runs each strategy of the physical plan for a stage's step.

The implementations ``backend.py`` registers under ``CONNECT`` (its module docs say what
each does with DataFrame operations), and the sources it reads: each takes the backend and
the stage's run (``frames.ConnectRun``) and gives the stage's result, its outputs as
``frames.Frame``s. A stream's keyed stages and its side-input waits have modules of their
own (``keyed_steps.py``, ``side_input_steps.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.loop.steps import StageResult, StageSummary
from sparkbeam.runners.core.plan.physical import PlannedStage
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.core.sources.sources import SourceEmission
from sparkbeam.runners.spark.connect import keyed_steps, tasks
from sparkbeam.runners.spark.connect.frames import ConnectRun, Frame, Reading, UpstreamPass, feed
from sparkbeam.runners.spark.stage_records import shippable

if TYPE_CHECKING:
    from sparkbeam.runners.spark.connect.backend import ConnectBackend

__all__ = [
    "as_read",
    "batch_combine",
    "bounded_read",
    "driver_elements",
    "fused_map",
    "lifted_grouping",
    "map_side_pass",
    "stateful",
    "unlifted_grouping",
    "write_ahead_log",
]


def _entering(backend: ConnectBackend, run: ConnectRun, pcolls: tuple[int, ...]) -> Frame:
    return backend.union([run.inputs[pcoll] for pcoll in dict.fromkeys(pcolls)])


def _nothing(run: ConnectRun) -> StageResult:
    return StageResult({pcoll: Frame(None, known_empty=True, size=0) for pcoll in run.stage.outputs}, StageSummary())


def fused_map(backend: ConnectBackend, run: ConnectRun) -> StageResult:
    stage = run.stage
    source = _entering(backend, run, tuple(run.inputs))
    if source.known_empty:
        return _nothing(run)
    entering, read = feed(source)
    task = functools.partial(tasks.fused_task, shippable(stage), run.side_inputs or None, backend.error_key, read)
    body = entering.mapInArrow(task, tasks.ROW_TYPE)
    if _read_once_by_a_stage(run.planned):
        # Its rows, its tasks' reports among them, go on unmaterialised into the one stage
        # that reads them, whose tasks hand the reports on to that stage's materialise.
        (output,) = stage.outputs
        return StageResult({output: Frame(body)}, _handed_counts(backend, stage))
    outputs, summary = backend.materialise(stage, body, run.planned.collected)
    return StageResult(outputs, summary)


def _read_once_by_a_stage(planned: PlannedStage) -> bool:
    """Whether the stage's one output is read by one later stage and nothing else (no
    collect, no sink), so that its rows need not be kept: computed once, by that reader."""
    stage = planned.stage
    return len(stage.outputs) == 1 and not stage.shared_outputs and not planned.collected and not stage.sinks


def _handed_counts(backend: ConnectBackend, stage: Stage) -> Callable[[], StageSummary]:
    """The summary of a stage whose tasks' reports reach the step's driver in a later
    stage's rows (``ConnectBackend.materialise`` sets them aside by their stage)."""

    def summary() -> StageSummary:
        counts = backend.handed_counts.pop(stage.id, None)
        if counts is None:
            msg = f"stage {stage.id} '{stage.name}': its reports were handed on to a later stage that did not run"
            raise RuntimeError(msg)
        return counts

    return summary


def map_side_pass(backend: ConnectBackend, run: ConnectRun) -> StageResult:
    """The stage's body handed, not run, to the batch combine that alone reads its output:
    that stage's map-side tasks run it over this stage's input, in the same pass, so its
    output is neither materialised nor moved. Its counts are known once that stage ran."""
    stage = run.stage
    ((pcoll, source),) = run.inputs.items()
    if source.known_empty:
        return _nothing(run)
    (output,) = stage.outputs
    shipped, side = shippable(stage), run.side_inputs or None
    # The body run on its own, its reports handed on in its rows (as ``fused_map``'s), for
    # a reader the plan did not foresee.
    entering, read = feed(source)
    alone = entering.mapInArrow(functools.partial(tasks.fused_task, shipped, side, backend.error_key, read), tasks.ROW_TYPE)
    handed = UpstreamPass(entering, tasks.UpstreamBody(shipped, side, pcoll), read)
    return StageResult({output: Frame(alone, upstream=handed)}, _handed_counts(backend, stage))


def as_read(backend: ConnectBackend, run: ConnectRun) -> StageResult:
    """A source whose elements the driver holds, handed on as read."""
    ((pcoll, held),) = run.inputs.items()
    count = held.size or 0
    return StageResult({pcoll: held}, StageSummary(elements_in=count, elements_out=count))


def batch_combine(backend: ConnectBackend, run: ConnectRun) -> StageResult:
    stage, grouping = run.stage, run.stage.grouping
    source = _entering(backend, run, tuple(grouping.inputs))
    if source.known_empty:
        return _nothing(run)
    rule, key = backend.overlapping_window_rule, backend.error_key
    # The upstream stage's body handed to this map side (``map_side_pass``) runs here, over its input.
    if source.upstream is not None:
        entering, upstream, read = source.upstream.source, source.upstream.body, source.upstream.read
    else:
        (entering, read), upstream = feed(source), None
    partials = entering.mapInArrow(functools.partial(tasks.combine_map_task, grouping, rule, key, upstream, read), tasks.ROW_TYPE)
    shuffled = partials.repartition(backend.num_partitions, "h")
    merge = functools.partial(tasks.combine_merge_task, shippable(stage), rule, run.side_inputs or None, key)
    outputs, summary = backend.materialise(stage, shuffled.mapInArrow(merge, tasks.ROW_TYPE), run.planned.collected)
    return StageResult(outputs, summary)


def _keyed_batch_step(backend: ConnectBackend, run: ConnectRun, map_task: Any, step: Any) -> StageResult:
    """A batch grouping's or stateful DoFn's one step: the elements keyed by ``map_task``
    (bound to the op, the run's key and the reader), ``repartition`` by the key's hash, and
    ``step`` (bound to all but the rows) over each partition's keys."""
    source = _entering(backend, run, tuple(run.stage.grouping.inputs))
    if source.known_empty:
        return _nothing(run)
    entering, read = feed(source)
    keyed = entering.mapInArrow(functools.partial(map_task, run.stage.grouping, backend.error_key, read), tasks.ROW_TYPE)
    shuffled = keyed.repartition(backend.num_partitions, "h")
    outputs, summary = backend.materialise(run.stage, shuffled.mapInArrow(step, tasks.ROW_TYPE), run.planned.collected)
    return StageResult(outputs, summary)


def unlifted_grouping(backend: ConnectBackend, run: ConnectRun) -> StageResult:
    if not run.params.batch:
        return keyed_steps.keyed_step(backend, run, stateful=False)
    side, key = run.side_inputs or None, backend.error_key
    group = functools.partial(tasks.grouping_task, shippable(run.stage), run.params, backend.overlapping_window_rule, side, key)
    return _keyed_batch_step(backend, run, tasks.grouping_map_task, group)


def lifted_grouping(backend: ConnectBackend, run: ConnectRun) -> StageResult:
    """A combine's grouping with keyed state (a stream, or a batch whose trigger or merging
    windows keep it from ``BATCH_COMBINE``): partials per key and window cross the shuffle
    and are merged into the state (``keyed_steps.py``), as a classic session lifts it."""
    return keyed_steps.keyed_step(backend, run, stateful=False, lifted=True)


def stateful(backend: ConnectBackend, run: ConnectRun) -> StageResult:
    """A stateful DoFn in batch: keyed, ``repartition`` by the key's hash, the engine's
    stateful step over each partition's keys (``tasks.stateful_task``)."""
    if not run.params.batch:
        return keyed_steps.keyed_step(backend, run, stateful=True)
    step = functools.partial(tasks.stateful_task, shippable(run.stage), run.params, run.side_inputs or None, backend.error_key)
    return _keyed_batch_step(backend, run, tasks.state_map_task, step)


def bounded_read(backend: ConnectBackend, op: Any, emission: SourceEmission) -> Frame:
    """A file read or a ``BoundedSource``, split and read on the server (``reads.py``)."""
    from sparkbeam.runners.spark.connect.reads import read_frame

    elements, bundles, read = read_frame(backend.session, op, backend.num_partitions, backend.error_key)
    return Frame(elements, reading=Reading(bundles, read))


def write_ahead_log(backend: ConnectBackend, op: Any, emission: SourceEmission) -> Frame:
    """A real stream's micro-batches of the step, read from its write-ahead log on the
    server (``stream_intake.py``)."""
    from sparkbeam.runners.spark.connect.stream_intake import wal_frame

    if not emission.wal_paths:
        return Frame(None, known_empty=True, size=0)
    if backend.wal_sealer is None:
        msg = f"'{op.label}': a write-ahead log is read only by a stream run that holds its key"
        raise RuntimeError(msg)
    (pcoll,) = op.outputs
    return Frame(wal_frame(backend.session, pcoll, emission.wal_paths, backend.wal_sealer, backend.error_key))


def driver_elements(backend: ConnectBackend, op: Any, emission: SourceEmission) -> Frame:
    elements = kind_of(op).driver_elements
    (pcoll,) = op.outputs
    return backend.from_driver(pcoll, [] if elements is None else elements(op))
