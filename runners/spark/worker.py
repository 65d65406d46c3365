"""The functions Spark runs on executors for each stage of a step.

Each is a module-level function bound with ``functools.partial`` to picklable arguments
(the stage, the step's parameters, broadcast side inputs), so executors in other processes
rebuild everything they need from what they are sent: nothing relies on the driver's
Python state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.dofn_invoker import SideInputs
from sparkbeam.runners.core.errors import TransformError, UserCodeError
from sparkbeam.runners.core.fused import FusedBody
from sparkbeam.runners.core.grouping_step import (
    ELEMENT,
    PANE,
    STATE,
    SUMMARY,
    group_partition,
    key_element,
)
from sparkbeam.runners.core.ops import GroupOp
from sparkbeam.runners.core.plan import Stage
from sparkbeam.runners.core.side_input_wait import OUTPUT, PARKED, run_waiting
from sparkbeam.runners.core.steps import StageSummary, StepParams
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["OUT", "grouping_partition", "keyed_elements", "run_body", "tagged", "waiting_partition"]

#: record tag of an element leaving a stage: (None, (OUT, pcoll_id, WindowedValue))
OUT = OUTPUT


def _side(side_broadcast: Any) -> SideInputs | None:
    return SideInputs(side_broadcast.value) if side_broadcast is not None else None


def tagged(pcoll: int, elements: Iterable[WindowedValue]) -> Iterator[tuple[int, WindowedValue]]:
    for wv in elements:
        yield (pcoll, wv)


def run_body(
    stage: Stage,
    side_broadcast: Any,
    counters: Any,
    elements: Iterable[tuple[int, WindowedValue]],
) -> Iterator[tuple[int, WindowedValue]]:
    """A stage's fused body over one partition; yields (pcoll, element) for the stage's outputs."""
    body = FusedBody(stage, _side(side_broadcast))
    seen = 0
    emitted = 0

    def entering() -> Iterator[tuple[int, WindowedValue]]:
        nonlocal seen
        for item in elements:
            seen += 1
            yield item

    for item in body.run(entering()):
        emitted += 1
        yield item
    # Spark has consumed the task's whole output: the bundle is done.
    body.finalize_bundle()
    if counters is not None:
        counters[0].add(seen)
        counters[1].add(emitted)


def keyed_elements(op: GroupOp, elements: Iterable[WindowedValue]) -> Iterator[tuple[Any, tuple[str, WindowedValue]]]:
    """(key, (ELEMENT, element without its key)) for the shuffle into a grouping."""
    for wv in elements:
        try:
            key, inner = key_element(op, wv)
        except TransformError as error:
            raise UserCodeError(op.label, op.location, error) from None
        yield key, (ELEMENT, inner)


def grouping_partition(
    stage: Stage,
    engine_factory: Any,
    params: StepParams,
    side_broadcast: Any,
    records: Iterable[tuple[Any, tuple]],
) -> Iterator[tuple[Any, tuple]]:
    """One step of a grouping stage and its fused body over one partition.

    Yields (key, (STATE, state)) for the state kept to the next step, and
    (None, (OUT, pcoll, element)) and (None, (SUMMARY, summary)) for the driver.
    """
    grouping = stage.grouping
    engine = engine_factory()
    (head_output,) = grouping.outputs
    flat = ((record[0], key, record[1]) for key, record in records)
    panes: list[WindowedValue] = []
    summary = StageSummary()
    try:
        for tag, key, payload in group_partition(engine, flat, params):
            if tag == STATE:
                yield key, (STATE, payload)
            elif tag == PANE:
                panes.append(payload)
            elif tag == SUMMARY:
                summary = payload
    except UserCodeError:
        raise
    except Exception as error:  # a CombineFn or WindowFn of the user's, run by the engine
        raise UserCodeError(grouping.label, grouping.location, error) from error
    body = FusedBody(stage, _side(side_broadcast))
    for pcoll, wv in body.run((head_output, wv) for wv in panes):
        yield None, (OUT, pcoll, wv)
    yield None, (SUMMARY, summary)
    body.finalize_bundle()  # Spark has consumed the task's whole output



def waiting_partition(
    stage: Stage,
    side_broadcast: Any,
    params: StepParams,
    num_partitions: int,
    from_parked: bool,
    index: int,
    records: Iterable[Any],
) -> Iterator[tuple[Any, tuple]]:
    """One step of a stage reading side inputs over one partition: of its new elements, or
    (``from_parked``) of the elements parked in that partition of its state.

    Yields (None, (OUT, pcoll, element)) and (None, (SUMMARY, summary)) for the driver, and
    (partition, (PARKED, element)) for what waits on: a parked element stays in the
    partition it is in; a new one is spread over the state's partitions, in turn.
    """
    if from_parked:
        arriving: Iterable[WindowedValue] = ()
        parked: Iterable[WindowedValue] = (record[1] for _, record in records)
    else:
        arriving, parked = records, ()
    spread = index
    for tag, payload in run_waiting(stage, _side(side_broadcast), params, arriving, parked):
        if tag == PARKED:
            if from_parked:
                yield index, (PARKED, payload)
            else:
                yield spread % num_partitions, (PARKED, payload)
                spread += 1
        elif tag == OUT:
            yield None, (OUT, *payload)
        else:  # the summary, and when anything parked can be released
            yield None, (tag, payload)
