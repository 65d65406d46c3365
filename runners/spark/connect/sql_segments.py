"""A schema'd segment's SQL plan under Spark Connect (``SchemaAggregateOp``).

The same query as on a classic session (``sql_plan.py``: the text, the checks of a file's
records, the rerun with exact sums after a 64-bit sum overflowed), built in one request:
the driver's columns of a ``Create`` go in the plan as an Arrow table
(``createDataFrame``), where a classic session broadcasts them. Where the panes are made
is the planner's choice, as on a classic session (``SchemaAggregateOp.driver_reads``):

- a capture or a side input reads them: the groups come to the client as one Arrow table
  and become the panes there, held by the frame (and spread once as element rows when a
  later stage or a sink reads them too);
- else the groups are kept on the server for the step (``localCheckpoint``, computed by
  the small job that counts them and checks the records) and ``mapInArrow`` makes each
  batch of groups into the panes, as the backend's element rows (``tasks.ROWS``): no pane
  reaches the client.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from sparkbeam.runners.core.elements.gc_pause import gc_paused
from sparkbeam.runners.core.schema.schema_segments import SchemaAggregateOp
from sparkbeam.runners.core.sources.sources import SourceEmission
from sparkbeam.runners.spark import sql_plan
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.connect.frames import Frame
from sparkbeam.runners.spark.connect.session import made_active

if TYPE_CHECKING:
    from sparkbeam.runners.spark.connect.backend import ConnectBackend

__all__ = ["pane_task", "read_segment"]


def _host(backend: ConnectBackend) -> sql_plan.SqlHost:
    def keep(frame: Any) -> Any:
        # Not eager: the job that counts the groups computes them, and so keeps them.
        kept = frame.localCheckpoint(eager=False)
        backend.kept.append(kept)  # released at the end of the step
        return kept

    def release(frame: Any) -> None:
        backend.kept[:] = [kept for kept in backend.kept if kept is not frame]

    return sql_plan.SqlHost(backend.session, lambda table, schema: backend.session.createDataFrame(table), keep, release)


def read_segment(backend: ConnectBackend, op: SchemaAggregateOp, emission: SourceEmission) -> Frame:
    """The segment's panes as a frame (see the module docs)."""
    (pcoll,) = op.outputs
    host = _host(backend)
    with backend.user_errors(), made_active(backend.session):
        if not op.driver_reads:
            groups, count = sql_plan.kept_groups(host, op)
            if not count:
                return Frame(None, known_empty=True, size=0)
            # The op without the driver's columns: the tasks need only its shape.
            task = functools.partial(pane_task, attrs.evolve(op, data=()), backend.overlapping_window_rule, pcoll)
            return Frame(groups.mapInArrow(task, tasks.ROW_TYPE), size=count)
        groups = sql_plan.checked_groups(host, op)
    with gc_paused():
        panes = sql_plan.panes(op, backend.overlapping_window_rule, groups)
    if not panes:
        return Frame(None, known_empty=True, size=0)
    return backend.from_driver(pcoll, panes, hold=True)


def pane_task(op: SchemaAggregateOp, overlapping_window_rule: bool, pcoll: int, batches: Iterable[Any]) -> Iterator[Any]:
    """``mapInArrow`` over the kept groups: each Arrow batch of groups made into its panes
    (``sql_plan.panes``, the driver's code), pickled a chunk at a time into element rows of
    ``pcoll``."""
    for batch in batches:
        with gc_paused():
            panes = sql_plan.panes(op, overlapping_window_rule, batch)
            rows = [
                (pcoll, 0, pickle.dumps(panes[at : at + tasks.CHUNK], protocol=pickle.HIGHEST_PROTOCOL))
                for at in range(0, len(panes), tasks.CHUNK)
            ]
        for at in range(0, len(rows), tasks.ROWS_PER_BATCH):
            yield tasks.batch_of(rows[at : at + tasks.ROWS_PER_BATCH])
