"""The functions Spark runs on executors for each stage of a step.

Each is a module-level function bound with ``functools.partial`` to picklable arguments
(the stage, the step's parameters, broadcast side inputs), so executors in other processes
rebuild everything they need from what they are sent: nothing relies on the driver's
Python state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.elements.dofn_invoker import SideInputs
from sparkbeam.runners.core.elements.fused import FusedBody
from sparkbeam.runners.core.elements.metrics import step_scoped
from sparkbeam.runners.core.grouping.grouping_step import GroupingRun, key_element
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.grouping.lifting import precombine
from sparkbeam.runners.core.grouping.records import Pane, Parked, Partial, Summary
from sparkbeam.runners.core.loop.side_input_wait import run_waiting
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import GroupOp, StatefulParDoOp
from sparkbeam.runners.core.lowering.step_values import StepParams
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.core.state.stateful_step import StatefulRun, key_for_state
from sparkbeam.utils.windowed_value import WindowedValue, new_windowed_value

__all__ = [
    "grouping_partition",
    "keyed_elements",
    "keyed_for_state",
    "precombined",
    "run_bare_body",
    "run_bare_body_on_values",
    "run_body",
    "stateful_partition_step",
    "tagged",
    "waiting_partition",
    "windowed_values",
]


def _side(side_broadcast: Any) -> SideInputs | None:
    return SideInputs(side_broadcast.value) if side_broadcast is not None else None


def windowed_values(fields: Iterable[tuple]) -> Iterator[WindowedValue]:
    """Elements the driver shipped as plain tuples (``(value, timestamp, windows, pane)``),
    as WindowedValues again, built in C."""
    return map(new_windowed_value, fields)


def tagged(pcoll: int, elements: Iterable[WindowedValue]) -> Iterator[tuple[int, WindowedValue]]:
    for wv in elements:
        yield (pcoll, wv)


def _end_bundle(body: FusedBody, counters: Any) -> None:
    """Spark has consumed the task's whole output: the bundle is done, and the body's
    element counts go to the stage's accumulators (``counters``: in, out; None when the
    stage keeps none)."""
    body.finalize_bundle()
    if counters is not None:
        counters[0].add(body.elements_in)
        counters[1].add(body.elements_out)


def run_body(
    stage: Stage,
    side_broadcast: Any,
    counters: Any,
    elements: Iterable[tuple[int, WindowedValue]],
) -> Iterator[tuple[int, WindowedValue]]:
    """A stage's fused body over one partition; yields (pcoll, element) for the stage's outputs."""
    body = FusedBody(stage, _side(side_broadcast))
    yield from body.run(elements)
    _end_bundle(body, counters)


def run_bare_body(
    stage: Stage,
    side_broadcast: Any,
    counters: Any,
    pcoll: int,
    elements: Iterable[WindowedValue],
) -> Iterator[WindowedValue]:
    """``run_body`` for a stage with one input and one output: elements of ``pcoll`` in,
    the output's elements out, neither paired with its PCollection id."""
    body = FusedBody(stage, _side(side_broadcast), bare=True)
    yield from body.run_bare(pcoll, elements)
    _end_bundle(body, counters)


def run_bare_body_on_values(
    stage: Stage,
    side_broadcast: Any,
    counters: Any,
    pcoll: int,
    values: Iterable[Any],
) -> Iterator[WindowedValue]:
    """``run_bare_body`` over elements given as their values alone, each in the global
    window at the minimum timestamp with an unknown pane (a text file's lines):
    ``FusedBody.run_bare_values``."""
    body = FusedBody(stage, _side(side_broadcast), bare=True)
    yield from body.run_bare_values(pcoll, values)
    _end_bundle(body, counters)


def keyed_elements(op: GroupOp, elements: Iterable[WindowedValue]) -> Iterator[tuple[Any, WindowedValue]]:
    """(key, element without its key) for the shuffle into a grouping."""
    for wv in elements:
        try:
            key, inner = key_element(op, wv)
        except TransformError as error:
            raise UserCodeError(op.label, op.location, error) from None
        yield key, inner


def precombined(
    op: GroupOp, overlapping_window_rule: bool, output_watermark: int, elements: Iterable[WindowedValue]
) -> Iterator[tuple[Any, Partial]]:
    """(key, Partial) per key and window of the partition: the combine lifted before the
    shuffle into a streaming grouping (``runners/core/grouping/lifting.py``)."""
    combine_fn = step_scoped(op.combine_fn, op.label)
    combine_fn.setup()
    holds = HoldPolicy(op.windowing, overlapping_window_rule=overlapping_window_rule)
    return precombine(op, combine_fn, holds, output_watermark, elements)


def keyed_for_state(op: StatefulParDoOp, elements: Iterable[WindowedValue]) -> Iterator[tuple[Any, WindowedValue]]:
    """(key, element) for the shuffle into a stateful DoFn (the element keeps its key)."""
    for wv in elements:
        try:
            yield key_for_state(op, wv)
        except TransformError as error:
            raise UserCodeError(op.label, op.location, error) from None


def stateful_partition_step(
    stage: Stage,
    store: Any,
    params: StepParams,
    side_broadcast: Any,
    records: Iterable[tuple[Any, Any]],
) -> Iterator[tuple[Any, Any]]:
    """One step of a stateful DoFn's stage and its fused body over one partition.

    ``store()`` holds the partition's state (the plan's choice: hash buckets,
    ``keyed_buckets.py``; per key after a restore): only the buckets with new elements or
    due timers are read. Yields
    (None, StateBucket) for the state and timers kept to the next step, (pcoll, element)
    for the stage's outputs and (None, Summary) for the driver.
    """
    op = stage.grouping
    assert isinstance(op, StatefulParDoOp)  # the planner put it at the head
    partition = store()  # the plan's keyed-state store (state_chunks.bucketed_partition)
    partition.read(records)
    run = StatefulRun(op, params)
    try:
        with run.bundle():
            report = partition.run(params, run.run_keys)
    except UserCodeError:
        raise
    except Exception as error:  # a CombineFn of a combining state cell, or a WindowFn
        raise UserCodeError(op.label, op.location, error) from error
    yield from partition.records()
    produced: list[tuple[int, WindowedValue]] = []
    summary: Any = None
    for where, record in run.finish(report):
        if type(record) is Summary:
            summary = record
        else:
            produced.append((where, record))
    body = FusedBody(stage, _side(side_broadcast))
    yield from body.run(produced)
    yield None, summary
    body.finalize_bundle()  # Spark has consumed the task's whole output


def grouping_partition(
    stage: Stage,
    store: Any,
    engine_factory: Any,
    params: StepParams,
    side_broadcast: Any,
    records: Iterable[tuple[Any, Any]],
) -> Iterator[tuple[Any, Any]]:
    """One step of a grouping stage and its fused body over one partition.

    ``store()`` holds the partition's state (the plan's choice: hash buckets,
    ``keyed_buckets.py``; per key after a restore): only the buckets with new elements or
    due timers are read. Yields
    (None, StateBucket) for the state kept to the next step, (pcoll, element) for the
    stage's outputs and (None, Summary) for the driver.
    """
    grouping = stage.grouping
    (head_output,) = grouping.outputs
    partition = store()  # the plan's keyed-state store (state_chunks.bucketed_partition)
    partition.read(records)
    run = GroupingRun(engine_factory(), params)
    try:
        report = partition.run(params, run.run_keys)
    except UserCodeError:
        raise
    except Exception as error:  # a CombineFn or WindowFn of the user's, run by the engine
        raise UserCodeError(grouping.label, grouping.location, error) from error
    yield from partition.records()
    panes: list[WindowedValue] = []
    summary: Any = None
    for _, record in run.finish(report):
        if type(record) is Pane:
            panes.append(record.element)
        else:
            summary = record
    body = FusedBody(stage, _side(side_broadcast))
    yield from body.run((head_output, wv) for wv in panes)  # (pcoll, element) pairs
    yield None, summary
    body.finalize_bundle()  # Spark has consumed the task's whole output


def waiting_partition(
    stage: Stage,
    side_broadcast: Any,
    params: StepParams,
    num_partitions: int,
    from_parked: bool,
    index: int,
    records: Iterable[Any],
) -> Iterator[tuple[Any, Any]]:
    """One step of a stage reading side inputs over one partition: of its new elements, or
    (``from_parked``) of the elements parked in that partition of its state.

    Yields (pcoll, element) for the stage's outputs, (None, ReleaseAt) and (None, Summary)
    for the driver, and (partition, Parked) for what waits on: a parked element stays in
    the partition it is in; a new one is spread over the state's partitions, in turn.
    """
    if from_parked:
        arriving: Iterable[WindowedValue] = ()
        parked: Iterable[WindowedValue] = (record.element for _, record in records)
    else:
        arriving, parked = records, ()
    spread = index
    for where, record in run_waiting(stage, _side(side_broadcast), params, arriving, parked):
        if type(record) is Parked:
            if from_parked:
                yield index, record
            else:
                yield spread % num_partitions, record
                spread += 1
        else:  # an output, the summary, and when anything parked can be released
            yield where, record
