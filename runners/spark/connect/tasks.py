"""What Spark Connect's Python workers run for each strategy: functions over Arrow batches.

Every DataFrame the Connect backend makes has one schema, ``ROWS`` (``pcoll int, h long,
chunk binary``), and a row is one of:

- elements (``pcoll`` >= 0): a pickled list of up to ``CHUNK`` WindowedValues of that
  PCollection, so that Arrow and the JVM move one value per chunk, not per element;
- a partial of a batch combine (``PARTIAL``) or a keyed element of a grouping (``KEYED``),
  ``h`` its key's hash, which the shuffle partitions by (``repartition(n, "h")``);
- a bundle of a bounded read not yet read (``BUNDLE``, ``reads.py``): the task that takes the
  read's elements is given the read's ``BundleReader`` and reads it itself, so that the
  elements reach that task's code as objects, neither pickled nor moved through the JVM;
- a task's report (``REPORT``): JSON of the stage's counts (``StageSummary``) and of the
  metric updates of the task's user code. Reports travel with the data and are read once
  the stage's output is materialised: a failed task attempt's rows are dropped with it, so
  what they hold is committed exactly once per successful task, with no accumulator.

The functions are bound with ``functools.partial`` to what they need (the stage, its side
inputs, the run's key) and shipped pickled with the plan; the workers rebuild everything
from that. A user's failure leaves the worker as a ``ConnectTaskFailure`` whose text holds
the ``UserCodeError``'s payload signed with the run's key (``runners/core/errors.py``):
the client unpickles only a payload whose MAC verifies.

Nothing here is read back from anything but the backend's own rows: the chunks are
pickled by these functions alone (a record's bytes are inside a chunk, never a chunk).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from sparkbeam.metrics.execution import MetricsContainer, MetricsEnvironment, MetricUpdates
from sparkbeam.runners.core.elements.dofn_invoker import SideInputs
from sparkbeam.runners.core.elements.fused import FusedBody
from sparkbeam.runners.core.grouping.grouping import engine_for
from sparkbeam.runners.core.grouping.grouping_step import group_partition, key_element
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.grouping.records import KeyedState, Pane, Summary
from sparkbeam.runners.core.loop.steps import StageSummary, StepParams
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import GroupOp, StatefulParDoOp
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.core.state.stateful_step import key_for_state, stateful_partition
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = [
    "BUNDLE",
    "CHUNK",
    "KEYED",
    "PARTIAL",
    "REPORT",
    "ROWS",
    "ROW_TYPE",
    "ConnectTaskFailure",
    "Output",
    "Report",
    "UpstreamBody",
    "batch_of",
    "combine_map_task",
    "combine_merge_task",
    "elements_of",
    "fused_task",
    "grouping_map_task",
    "grouping_task",
    "read_report",
    "rows_of",
    "run_task",
    "state_map_task",
    "stateful_task",
]

ROWS = "pcoll int, h long, chunk binary"
#: ``ROWS`` as a Spark type, for ``mapInArrow`` and ``createDataFrame``: given the DDL string,
#: a Connect client asks the server to parse it, one request per call
ROW_TYPE = StructType([StructField("pcoll", IntegerType()), StructField("h", LongType()), StructField("chunk", BinaryType())])
#: a task's report: its counts and its user code's metric updates
REPORT = -1
#: a batch combine's partial, (compact key, (accumulator, hold)), before its merge
PARTIAL = -2
#: a grouping's element, (key, element), before its group
KEYED = -3
#: a bounded read's bundle (cloudpickled by its data source's planning on the server), before it is read
BUNDLE = -5
#: elements per chunk
CHUNK = 512
#: rows per Arrow batch a task yields
ROWS_PER_BATCH = 64


#: what reads a bounded read's bundle rows into (pcoll, element) in the task that takes them
#: (``reads.BundleReader``), or None where a task's input holds no bundle
Reader = Callable[[bytes], Iterator[tuple[int, WindowedValue]]]


class ConnectTaskFailure(RuntimeError):
    """User code failed in a Connect task: the text names the transform and carries the
    signed payload the client rebuilds the user's exception from."""


def batch_of(rows: list[tuple[int, int, bytes]]) -> Any:
    import pyarrow as pa

    pcolls, hashes, chunks = zip(*rows) if rows else ((), (), ())
    return pa.RecordBatch.from_arrays(
        [pa.array(pcolls, pa.int32()), pa.array(hashes, pa.int64()), pa.array(chunks, pa.binary())],
        names=["pcoll", "h", "chunk"],
    )


def rows_of(batches: Iterable[Any]) -> Iterator[tuple[int, int, bytes]]:
    for batch in batches:
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), batch.column(2).to_pylist())


def elements_of(
    rows: Iterable[tuple[int, int, bytes]], passed: list[tuple[int, int, bytes]], read: Reader | None = None
) -> Iterator[tuple[int, WindowedValue]]:
    """(pcoll, element) of the element rows, and with ``read`` (the read's ``BundleReader``)
    of the bundle rows, read here; any other row (an upstream task's report) goes to
    ``passed``, to be handed on."""
    for pcoll, h, chunk in rows:
        if pcoll >= 0:
            for wv in pickle.loads(chunk):
                yield pcoll, wv
        elif pcoll == BUNDLE and read is not None:
            yield from read(chunk)
        else:
            passed.append((pcoll, h, chunk))


class Output:
    """Rows of a task's output, a chunk of elements per row, an Arrow batch at a time."""

    def __init__(self) -> None:
        self.pending: dict[int, list[Any]] = {}
        self.rows: list[tuple[int, int, bytes]] = []

    def add(self, pcoll: int, wv: WindowedValue) -> Any:
        """The next Arrow batch once it is full, else None."""
        chunk = self.pending.setdefault(pcoll, [])
        chunk.append(wv)
        if len(chunk) >= CHUNK:
            self.rows.append((pcoll, 0, pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)))
            self.pending[pcoll] = []
            if len(self.rows) >= ROWS_PER_BATCH:
                return self.take()
        return None

    def add_row(self, row: tuple[int, int, bytes]) -> None:
        self.rows.append(row)

    def take(self) -> Any:
        batch, self.rows = batch_of(self.rows), []
        return batch

    def close(self) -> Any:
        for pcoll, chunk in self.pending.items():
            if chunk:
                self.rows.append((pcoll, 0, pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)))
        self.pending = {}
        return self.take()


def report_row(
    summary: StageSummary,
    updates: MetricUpdates,
    of_stage: int | None = None,
    release_at: Iterable[tuple[int, int]] | None = None,
) -> tuple[int, int, bytes]:
    """A task's report; ``of_stage``: the stage whose counts these are, where they may reach
    another stage's rows (an upstream body run in a combine's pass, ``UpstreamBody``, or
    rows handed on unmaterialised, ``backend.fused_map``), else None (the task's stage);
    ``release_at``: a stage waiting for side inputs, the (side input, watermark) pairs its
    partition's parked elements wait for (``ReleaseAt``)."""
    from sparkbeam.runners.spark.attempt_reports import updates_to_json

    counts = attrs.asdict(summary)
    report: dict[str, Any] = {"summary": counts, "metrics": json.loads(updates_to_json(updates)), "of_stage": of_stage}
    if release_at is not None:
        report["release_at"] = [[int(pcoll), int(watermark)] for pcoll, watermark in release_at]
    return (REPORT, 0, json.dumps(report).encode("utf-8"))


@attrs.frozen
class Report:
    """A task's report as the client reads it (``report_row``)."""

    summary: StageSummary
    updates: MetricUpdates
    of_stage: int | None
    release_at: tuple[tuple[int, int], ...] | None


def read_report(chunk: bytes) -> Report:
    """A report row's counts, metric updates, the stage they are of and the release
    watermarks (``report_row``; JSON: nothing is unpickled)."""
    from sparkbeam.runners.spark.attempt_reports import report_from_json

    report = json.loads(chunk.decode("utf-8"))
    fields = {field.name for field in attrs.fields(StageSummary)}
    summary = StageSummary(**{name: value for name, value in report["summary"].items() if name in fields})
    of_stage = report.get("of_stage")
    release = report.get("release_at")
    return Report(
        summary,
        report_from_json(json.dumps(report["metrics"]).encode("utf-8")),
        None if of_stage is None else int(of_stage),
        None if release is None else tuple((int(pcoll), int(watermark)) for pcoll, watermark in release),
    )


def run_task(key: bytes, work: Callable[[MetricsContainer], Iterator[Any]]) -> Iterator[Any]:
    """``work``'s batches, its user code's metrics in a container of the task's own, and a
    user's failure made into a ``ConnectTaskFailure`` signed with the run's ``key``."""
    container = MetricsContainer()
    try:
        with MetricsEnvironment.container_scope(container):
            yield from work(container)
    except UserCodeError as failure:
        raise ConnectTaskFailure(failure.signed_text(key)) from None


def _side(side_inputs: dict[int, list[WindowedValue]] | None) -> SideInputs | None:
    return SideInputs(side_inputs) if side_inputs else None


def _run_body(
    stage: Stage,
    side_inputs: Any,
    entering: Iterable[tuple[int, WindowedValue]],
    passed: list[tuple[int, int, bytes]],
    container: MetricsContainer,
    summary: StageSummary,
    *,
    count_in: bool,
) -> Iterator[Any]:
    """The stage's fused body over ``entering``: its output batches, then the rows handed
    on and the task's report (``summary``, with the body's counts)."""
    body = FusedBody(stage, _side(side_inputs))
    output = Output()
    for pcoll, wv in body.run(entering):
        batch = output.add(pcoll, wv)
        if batch is not None:
            yield batch
    body.finalize_bundle()
    if count_in:
        summary.elements_in += body.elements_in
    summary.elements_out += body.elements_out
    for row in passed:
        output.add_row(row)
    # Tagged with its stage: it may travel on in a later stage's rows (``fused_map``).
    output.add_row(report_row(summary, container.updates(), of_stage=stage.id))
    yield output.close()


def fused_task(stage: Stage, side_inputs: Any, key: bytes, read: Reader | None, batches: Iterable[Any]) -> Iterator[Any]:
    """``Strategy.FUSED_MAP``: the stage's body over one partition of its inputs (with
    ``read``, of a read's bundles, read here)."""

    def work(container: MetricsContainer) -> Iterator[Any]:
        passed: list[tuple[int, int, bytes]] = []
        entering = elements_of(rows_of(batches), passed, read)
        yield from _run_body(stage, side_inputs, entering, passed, container, StageSummary(), count_in=True)

    return run_task(key, work)


def _combine_parts(op: GroupOp, overlapping_window_rule: bool) -> tuple[Any, HoldPolicy]:
    from sparkbeam.runners.core.elements.metrics import step_scoped
    from sparkbeam.runners.spark.batch_grouping import _ListCombineFn, _SetUpOnce

    fn = _SetUpOnce(step_scoped(op.combine_fn, op.label) if op.combine_fn is not None else _ListCombineFn())
    return fn, HoldPolicy(op.windowing, overlapping_window_rule=overlapping_window_rule)


@attrs.frozen
class UpstreamBody:
    """The bare fused body of the stage upstream of a batch combine, which that combine
    alone reads (``Strategy.MAP_SIDE_PASS``): run in the combine's map-side task, its
    outputs go into the table as it makes them, with no rows between the two."""

    stage: Stage  # as shipped (stage_records.shippable)
    side_inputs: Any  # its side inputs, or None
    pcoll: int  # the PCollection its elements enter as


def combine_map_task(
    op: GroupOp, overlapping_window_rule: bool, key: bytes, upstream: UpstreamBody | None, read: Reader | None, batches: Iterable[Any]
) -> Iterator[Any]:
    """``Strategy.BATCH_COMBINE``'s map side: one partition's elements combined per key and
    window (the engine's ``MapSideTable``), a ``PARTIAL`` row per (key, window); with
    ``upstream``, the elements are that body's outputs, and its counts a report of its own;
    with ``read``, the partition's rows are a read's bundles, read here."""
    from sparkbeam.runners.spark.batch_grouping import MapSideTable, compact_key_hash

    def work(container: MetricsContainer) -> Iterator[Any]:
        holder, holds = _combine_parts(op, overlapping_window_rule)
        table = MapSideTable(op, holder, holds)
        passed: list[tuple[int, int, bytes]] = []
        rows: list[tuple[int, int, bytes]] = []

        def partial_rows(records: list[tuple[tuple, tuple]]) -> None:
            for compact, partial in records:
                rows.append((PARTIAL, compact_key_hash(compact), pickle.dumps((compact, partial), protocol=pickle.HIGHEST_PROTOCOL)))

        entering = (wv for _, wv in elements_of(rows_of(batches), passed, read))
        body = None
        try:
            if upstream is None:
                chunks: Iterable[list[WindowedValue]] = _chunks(entering)
            else:
                # A re-stamping Map's outputs go into the table one at a time, no element built.
                body = FusedBody(
                    upstream.stage,
                    _side(upstream.side_inputs),
                    bare=True,
                    stamped_exit=table.add_stamped,
                    keyed_stamped_exit=table.keyed_stamped_adder,
                )
                chunks = body.run_bare_chunks(upstream.pcoll, entering)
            for chunk in chunks:
                table.add_elements(chunk)
                partial_rows(table.take_flushed())
                if len(rows) >= ROWS_PER_BATCH * 16:
                    yield batch_of(rows)
                    rows = []
        finally:
            table.close()
        if body is not None and upstream is not None:
            # Spark has consumed the body's whole output: the bundle is done.
            body.finalize_bundle()
            upstream_counts = StageSummary(elements_in=body.elements_in, elements_out=table.seen)
            rows.append(report_row(upstream_counts, MetricUpdates(), of_stage=upstream.stage.id))
        partial_rows(table.drain())
        rows.extend(passed)
        rows.append(report_row(StageSummary(elements_in=table.seen), container.updates()))
        yield batch_of(rows)

    return run_task(key, work)


def _chunks(elements: Iterator[WindowedValue]) -> Iterator[list[WindowedValue]]:
    chunk: list[WindowedValue] = []
    for wv in elements:
        chunk.append(wv)
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    yield chunk


def combine_merge_task(
    stage: Stage, overlapping_window_rule: bool, side_inputs: Any, key: bytes, batches: Iterable[Any]
) -> Iterator[Any]:
    """``Strategy.BATCH_COMBINE`` after the shuffle: the partials of one partition merged
    per (key, window), a pane each, and the stage's body over the panes."""
    from sparkbeam.runners.spark.batch_grouping import _merge_combiners, _panes

    op = stage.grouping

    def work(container: MetricsContainer) -> Iterator[Any]:
        holder, holds = _combine_parts(op, overlapping_window_rule)
        merged: dict[Any, tuple] = {}
        passed: list[tuple[int, int, bytes]] = []
        for pcoll, h, chunk in rows_of(batches):
            if pcoll != PARTIAL:
                passed.append((pcoll, h, chunk))
                continue
            compact, partial = pickle.loads(chunk)
            before = merged.get(compact)
            merged[compact] = partial if before is None else _merge_combiners(op, holder, holds, before, partial)
        (head_output,) = op.outputs
        entering = ((head_output, pane) for pane in _panes(op, holder, holds, merged.items()))
        yield from _run_body(stage, side_inputs, entering, passed, container, StageSummary(), count_in=False)

    return run_task(key, work)


def grouping_map_task(op: GroupOp, key: bytes, read: Reader | None, batches: Iterable[Any]) -> Iterator[Any]:
    """A grouping's map side: (key, element) per element, a ``KEYED`` row each, ``h`` its
    key's hash (the shuffle's partition column)."""
    return _keyed_map_task(op, key_element, key, read, batches)


def grouping_task(
    stage: Stage, params: StepParams, overlapping_window_rule: bool, side_inputs: Any, key: bytes, batches: Iterable[Any]
) -> Iterator[Any]:
    """A grouping's step over the keys of one partition (the engine's ``group_partition``,
    its windows, triggers and holds), then the stage's body over its panes. In batch no
    state outlives the step."""
    op = stage.grouping

    def work(container: MetricsContainer) -> Iterator[Any]:
        engine = engine_for(op, overlapping_window_rule=overlapping_window_rule, batch=params.batch)
        passed: list[tuple[int, int, bytes]] = []
        records = []
        for pcoll, h, chunk in rows_of(batches):
            if pcoll == KEYED:
                records.append(pickle.loads(chunk))
            else:
                passed.append((pcoll, h, chunk))
        panes: list[WindowedValue] = []
        summary = StageSummary()
        try:
            for _, record in group_partition(engine, records, params):
                kind = type(record)
                if kind is Pane:
                    panes.append(record.element)
                elif kind is Summary:
                    summary = record.summary
        except UserCodeError:
            raise
        except Exception as error:  # a CombineFn or WindowFn of the user's, run by the engine
            raise UserCodeError(op.label, op.location, error) from error
        (head_output,) = op.outputs
        summary.elements_out = 0  # the body's outputs are the stage's
        entering = ((head_output, pane) for pane in panes)
        yield from _run_body(stage, side_inputs, entering, passed, container, summary, count_in=False)

    return run_task(key, work)


def lifted_map_task(
    op: GroupOp, overlapping_window_rule: bool, output_watermark: int, key: bytes, read: Reader | None, batches: Iterable[Any]
) -> Iterator[Any]:
    """A lifted grouping's map side in a stream (``Strategy.LIFTED_GROUPING``): the
    partition's elements combined per key and window by the classic worker's
    ``precombined``, a ``KEYED`` row per (key, ``Partial``), ``h`` the key's hash, so that
    the partials meet their key's state as the elements would."""
    from pyspark.rdd import portable_hash

    from sparkbeam.runners.spark.worker import precombined

    def work(container: MetricsContainer) -> Iterator[Any]:
        passed: list[tuple[int, int, bytes]] = []
        rows: list[tuple[int, int, bytes]] = []
        elements = (wv for _, wv in elements_of(rows_of(batches), passed, read))
        for shuffle_key, partial in precombined(op, overlapping_window_rule, output_watermark, elements):
            rows.append((KEYED, portable_hash(shuffle_key), pickle.dumps((shuffle_key, partial), protocol=pickle.HIGHEST_PROTOCOL)))
            if len(rows) >= ROWS_PER_BATCH * 16:
                yield batch_of(rows)
                rows = []
        rows.extend(passed)  # complete once the elements were all read
        yield batch_of(rows)

    return run_task(key, work)


def state_map_task(op: StatefulParDoOp, key: bytes, read: Reader | None, batches: Iterable[Any]) -> Iterator[Any]:
    """A stateful DoFn's map side: (key, element) per element (the element keeps its key),
    a ``KEYED`` row each, ``h`` its key's hash (the shuffle's partition column)."""
    return _keyed_map_task(op, key_for_state, key, read, batches)


def _keyed_map_task(
    op: Any, keyed: Callable[[Any, Any], tuple[Any, Any]], key: bytes, read: Reader | None, batches: Iterable[Any]
) -> Iterator[Any]:
    """The map side of a shuffle by key: ``keyed(op, element)`` gives each element's
    (key, what travels); rows of other PCollections pass on as they came."""
    from pyspark.rdd import portable_hash

    def work(container: MetricsContainer) -> Iterator[Any]:
        passed: list[tuple[int, int, bytes]] = []
        rows: list[tuple[int, int, bytes]] = []
        for _, wv in elements_of(rows_of(batches), passed, read):
            try:
                shuffle_key, travelling = keyed(op, wv)
            except TransformError as error:
                raise UserCodeError(op.label, op.location, error) from None
            rows.append((KEYED, portable_hash(shuffle_key), pickle.dumps((shuffle_key, travelling), protocol=pickle.HIGHEST_PROTOCOL)))
            if len(rows) >= ROWS_PER_BATCH * 16:
                yield batch_of(rows)
                rows = []
        rows.extend(passed)
        yield batch_of(rows)

    return run_task(key, work)


def stateful_task(stage: Stage, params: StepParams, side_inputs: Any, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """A stateful DoFn's batch step over the keys of one partition (the engine's
    ``stateful_partition``: its state cells, timers and window expiry), then the stage's
    body over its outputs. In batch the input watermark ends at +inf, so every timer has
    fired and every window's state has expired when the step ends: no state is kept."""
    op = stage.grouping

    def work(container: MetricsContainer) -> Iterator[Any]:
        passed: list[tuple[int, int, bytes]] = []
        records = []
        for pcoll, h, chunk in rows_of(batches):
            if pcoll == KEYED:
                records.append(pickle.loads(chunk))
            else:
                passed.append((pcoll, h, chunk))
        produced: list[tuple[int, WindowedValue]] = []
        summary = StageSummary()
        try:
            for where, record in stateful_partition(op, records, params):
                kind = type(record)
                if kind is Summary:
                    summary = record.summary
                elif kind is not KeyedState:
                    produced.append((where, record))
        except UserCodeError:
            raise
        except Exception as error:  # a CombineFn of a combining state cell, or a WindowFn
            raise UserCodeError(op.label, op.location, error) from error
        summary.elements_out = 0  # the body's outputs are the stage's
        yield from _run_body(stage, side_inputs, iter(produced), passed, container, summary, count_in=False)

    return run_task(key, work)
