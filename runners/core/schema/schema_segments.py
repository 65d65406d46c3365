"""Schema'd segments: the part of a batch pipeline a backend can run as one SQL plan.

A segment is a chain of schema transforms that ends in an aggregation:

    Create(Rows or NamedTuples) | ReadFromCsv | ReadFromParquet(as_rows=True)
        -> [AssignTimestamps(field) | WindowInto | Select(fields)]*
        -> GroupBy(fields).aggregate_field(field, count/sum/mean/min/max, name)...

with the default trigger over global, fixed or sliding windows, every field read by name,
and nothing else reading the segment's intermediate PCollections. ``find_segments`` walks
the user's graph (composites still visible, before lowering) and gives, per segment, a
``SchemaAggregateOp`` that stands for the whole chain: a source op, so the rest of the
pipeline reads its output as it would read the aggregation's. Where a chain ends in an
aggregation but cannot be a segment, the reason is kept (``SegmentPlan.notes``) and shown
in the stage plan and the timeline as ``general path: <reason>``.

This module knows no Spark: it decides *what* a segment computes (columns, timestamps,
windows, aggregates); ``runners/spark/sql_plan.py`` says how Spark computes it. A value the
SQL plan could compute differently from the general path (a None, a mix of int and float,
an int beyond 64 bits, a float key, a timestamp that is not finite) keeps the general path.
A read of files (``schema_sources.py``) starts a segment when the backend's reader reads
them as sparkbeam's read does.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.combine import CallableWrapperCombineFn, CombineFn
from sparkbeam.core import Create, WindowInto
from sparkbeam.pipeline import AppliedTransform, Pipeline
from sparkbeam.row import Row
from sparkbeam.runners.core.elements.execution import Role, register_kind
from sparkbeam.runners.core.lowering.ops import Op
from sparkbeam.runners.core.lowering.strategies import SourceRead
from sparkbeam.runners.core.schema.schema_sources import (
    CsvTable,
    NotASegment,
    ParquetTable,
    is_schema_read,
    read_table,
)
from sparkbeam.runners.core.sources.sources import BoundedSourceState
from sparkbeam.schemas import TIMESTAMP_UNITS, AssignTimestamps, GroupAndAggregate, Select
from sparkbeam.trigger import DefaultTrigger
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.window import FixedWindows, GlobalWindows, SlidingWindows
from sparkbeam.windowing import Windowing

__all__ = [
    "AggregateSpec",
    "ColumnKind",
    "SchemaAggregateOp",
    "SegmentPlan",
    "aggregate_kind",
    "find_segments",
]

#: the Python types a column may hold, all of one of them (bool before int: bool is an int)
ColumnKind = str  # "bool" | "int" | "float" | "str"
_KINDS: tuple[tuple[type, ColumnKind], ...] = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"))
_INT64 = (-(2**63), 2**63 - 1)
_WINDOW_FNS = (GlobalWindows, FixedWindows, SlidingWindows)


@attrs.frozen
class AggregateSpec:
    """``function`` (count, sum, mean, min, max) over ``column`` of each group, as ``output_name``."""

    function: str
    column: str
    output_name: str


@attrs.frozen
class SchemaAggregateOp(Op):
    """A whole schema'd segment, read as a source of the aggregation's results.

    ``columns``: each source column's name and kind; ``data``: the values per column (on the
    driver; never shipped), or ``table``: the files the plan reads them from;
    ``timestamp_column``: the column of timestamps in ``timestamp_unit`` (``AssignTimestamps``'
    units), or None (every element at the minimum timestamp); ``key_columns``: (output name,
    source column) per key field; ``aggregates``: over source columns; ``result_names``: the
    ``Result`` NamedTuple's fields.
    """

    columns: tuple[tuple[str, ColumnKind], ...]
    data: tuple[tuple, ...] = attrs.field(eq=False, repr=False)
    timestamp_column: str | None
    timestamp_unit: str
    table: CsvTable | ParquetTable | None
    key_columns: tuple[tuple[str, str], ...]
    aggregates: tuple[AggregateSpec, ...]
    result_names: tuple[str, ...]
    windowing: Windowing
    #: a capture or a side input reads the panes: the driver needs them all
    driver_reads: bool = False
    #: a later stage or a sink reads the panes: the executors need them
    executors_read: bool = True

    def kind_of_column(self, column: str) -> ColumnKind:
        return dict(self.columns)[column]

    def describe(self) -> str:
        """What the SQL plan computes, for the stage plan and the timeline."""
        keys = ", ".join(source if name == source else f"{name}={source}" for name, source in self.key_columns)
        aggregates = ", ".join(f"{a.output_name}={a.function}({a.column})" for a in self.aggregates)
        stamp = f"timestamps from {self.timestamp_column}" if self.timestamp_column else "timestamps at the minimum"
        if self.timestamp_column and self.timestamp_unit != "s":
            stamp += f" ({self.timestamp_unit})"
        source = f"; {self.table.describe()}" if self.table is not None else ""
        panes = "panes collected on the driver (captured or a side input)" if self.driver_reads else "panes made on the executors"
        return f"SQL plan: group by [{keys}] per {type(self.windowing.windowfn).__name__}, {aggregates}; {stamp}; {panes}{source}"


@attrs.frozen
class SegmentPlan:
    """What ``find_segments`` found: the nodes to replace (by id) and the notes per label."""

    #: id(node) -> the op that stands for it (the aggregation) or None (a node it absorbs)
    substitutes: dict[int, Callable[[Any], Op | None]] = attrs.field(factory=dict)
    #: op or stage label -> "SQL plan: ..." or "general path: <reason>"
    notes: dict[str, str] = attrs.field(factory=dict)


_NotASegment = NotASegment

def aggregate_kind(combine_fn: CombineFn) -> str | None:
    """The SQL aggregate a built-in combiner is, or None for any other CombineFn."""
    kind = type(combine_fn)
    # Declared by the class itself, not inherited: a subclass may compute something else.
    declared = vars(kind).get("sql_aggregate")
    if declared is not None:
        return str(declared)
    if kind is CallableWrapperCombineFn:
        wrapped = combine_fn._fn
        for name in ("sum", "min", "max"):
            if wrapped is getattr(builtins, name):
                return name
        if wrapped is builtins.len:
            return "count"
    return None


def find_segments(pipeline: Pipeline, *, general_path_reason: str | None = None) -> SegmentPlan:
    """Every aggregation of ``pipeline`` that can run as one SQL plan, and a note for each
    that cannot, saying why. ``general_path_reason``: why none may (a stream, an option);
    every aggregation is noted with it. An unbounded PCollection makes the run a stream."""
    plan = SegmentPlan()
    nodes = list(pipeline.root.walk())[1:]
    consumers = _consumers(nodes, pipeline)
    producers: dict[int, list[AppliedTransform]] = {}
    for node in nodes:
        for output in node.outputs.values():
            producers.setdefault(id(output), []).append(node)
    claimed: set[int] = set()
    for node in nodes:
        if not isinstance(node.transform, GroupAndAggregate):
            continue
        label = node.full_label
        if general_path_reason is None and any(not pc.is_bounded for pc in _pcollections(nodes)):
            general_path_reason = "a streaming run (SQL plans run in batch only)"
        if general_path_reason is not None:
            plan.notes[_combine_label(node)] = f"general path: {general_path_reason}"
            continue
        try:
            op_builder, absorbed = _segment(node, producers, consumers, claimed)
        except _NotASegment as reason:
            plan.notes[_combine_label(node)] = f"general path: {reason}"
            continue
        driver_reads, executors_read = _readers(node, nodes, pipeline)
        op_builder = _Builder(node, attrs.evolve(op_builder.op, driver_reads=driver_reads, executors_read=executors_read))
        plan.substitutes[id(node)] = op_builder
        for part in absorbed:
            plan.substitutes[id(part)] = _absorbed
            claimed.add(id(part))
        plan.notes[label] = op_builder.describe
    return plan


def _pcollections(nodes: list[AppliedTransform]) -> Iterable[pvalue.PCollection]:
    for node in nodes:
        for output in node.outputs.values():
            if isinstance(output, pvalue.PCollection):
                yield output


def _combine_label(node: AppliedTransform) -> str:
    """The label of the grouping stage the aggregation becomes on the general path."""
    return f"{node.full_label}/Combine"


def _absorbed(lowering: Any) -> None:
    return None


def _consumers(nodes: list[AppliedTransform], pipeline: Pipeline) -> dict[int, int]:
    """How many primitives (and captures) read each PCollection, side inputs included."""
    counts: dict[int, int] = {}
    for node in nodes:
        if not node.is_primitive:
            continue
        read = [pc for pc in node.inputs if isinstance(pc, pvalue.PCollection)]
        read += [side.pvalue for side in node.side_inputs]
        for pc in read:
            counts[id(pc)] = counts.get(id(pc), 0) + 1
    for pc in pipeline.captured:
        counts[id(pc)] = counts.get(id(pc), 0) + 1
    return counts


def _readers(node: AppliedTransform, nodes: list[AppliedTransform], pipeline: Pipeline) -> tuple[bool, bool]:
    """Who reads the aggregation's output: (the driver: a capture or a side input; the
    executors: a later transform or a sink). The SQL plan collects its panes only for the
    driver."""
    (output,) = [pc for pc in node.outputs.values() if isinstance(pc, pvalue.PCollection)]
    driver = any(pc is output for pc in pipeline.captured)
    executors = False
    for other in nodes:
        if not other.is_primitive:
            continue
        driver = driver or any(side.pvalue is output for side in other.side_inputs)
        executors = executors or any(pc is output for pc in other.inputs)
    return driver, executors


@attrs.frozen
class _Builder:
    """Lowers the aggregation to ``op`` once lowering knows its output's id; ``describe`` is its note."""

    node: AppliedTransform
    op: SchemaAggregateOp

    def __call__(self, lowering: Any) -> Op:
        # A source: its inputs are absorbed, only the aggregation's output remains.
        # (mypy's attrs plugin misses Op's inherited fields here, as for the construction below)
        return attrs.evolve(self.op, outputs=lowering.outputs(self.node))  # type: ignore[call-arg]

    @property
    def describe(self) -> str:
        return self.op.describe()


def _segment(
    node: AppliedTransform,
    producers: dict[int, list[AppliedTransform]],
    consumers: dict[int, int],
    claimed: set[int],
) -> tuple[_Builder, list[AppliedTransform]]:
    """The op builder for the segment ending in ``node``, and the nodes it absorbs; or
    ``_NotASegment`` naming the first thing that keeps it on the general path."""
    aggregation: GroupAndAggregate = node.transform
    (source_pc,) = node.inputs
    windowing: Windowing = source_pc.windowing
    _check_windowing(windowing)
    # Walk upstream: each step must be read by the next step alone.
    chain: list[AppliedTransform] = []
    pc = source_pc
    while True:
        if consumers.get(id(pc), 0) != 1:
            msg = f"{pc.label} is read by more than the aggregation's chain (or captured)"
            raise _NotASegment(msg)
        step = _recognised_producer(producers.get(id(pc), []))
        if step is None:
            outermost = producers.get(id(pc))
            name = outermost[0].full_label if outermost else pc.label
            msg = f"its input comes from '{name}', not from a Create of Rows, ReadFromCsv, ReadFromParquet(as_rows=True), Select, AssignTimestamps or WindowInto"
            raise _NotASegment(msg)
        if id(step) in claimed:
            msg = f"'{step.full_label}' already belongs to another SQL plan"
            raise _NotASegment(msg)
        chain.append(step)
        if isinstance(step.transform, Create) or is_schema_read(step.transform):
            break
        (pc,) = step.inputs
    chain.reverse()
    source, *steps = chain
    table: CsvTable | ParquetTable | None = None
    if isinstance(source.transform, Create):
        columns, data = _source_columns(source)
    else:
        columns, table = read_table(source)
        data = ()
    names = {name: name for name, _ in columns}  # field name -> source column
    kinds = dict(columns)
    timestamp_column: str | None = None
    timestamp_unit = "s"
    for step in steps:
        transform = step.transform
        if isinstance(transform, Select):
            names = {field.name: _column(names, field, step) for field in transform.fields}
        elif isinstance(transform, AssignTimestamps):
            timestamp_column = _column(names, transform.timestamp, step)
            timestamp_unit = transform.unit
            if kinds[timestamp_column] not in ("int", "float") or (timestamp_unit != "s" and kinds[timestamp_column] != "int"):
                msg = f"'{step.full_label}': the timestamps in {timestamp_column!r} are {kinds[timestamp_column]}, not {timestamp_unit}"
                raise _NotASegment(msg)
            if table is None:
                stamps = data[[n for n, _ in columns].index(timestamp_column)]
                _check_timestamps(step, timestamp_column, stamps, timestamp_unit)
    if timestamp_column is None and not isinstance(windowing.windowfn, GlobalWindows):
        msg = "elements at the minimum timestamp in non-global windows (no AssignTimestamps)"
        raise _NotASegment(msg)
    grouping = aggregation.grouping
    key_columns = tuple((field.name, _column(names, field, node)) for field in grouping.key_fields)
    for name, column in key_columns:
        if kinds[column] == "float":
            msg = f"the key field {name!r} holds floats (NaN groups differently in SQL)"
            raise _NotASegment(msg)
    aggregates = []
    for agg in aggregation.aggregations:
        function = aggregate_kind(agg.combine_fn)
        if function is None:
            msg = f"{agg.output_name!r} uses {agg.combine_fn.default_label()}, not a built-in count, sum, mean, min or max"
            raise _NotASegment(msg)
        column = _column(names, agg.field, node)
        if function in ("sum", "mean") and kinds[column] not in ("int", "float"):
            msg = f"{function} of {agg.field.name!r}, which holds {kinds[column]} values"
            raise _NotASegment(msg)
        if function in ("min", "max") and kinds[column] == "bool":
            msg = f"{function} of {agg.field.name!r}, which holds bool values"
            raise _NotASegment(msg)
        aggregates.append(AggregateSpec(function, column, agg.output_name))
    op = SchemaAggregateOp(  # type: ignore[call-arg]
        label=node.full_label,
        location=str(node.location),
        inputs=(),
        outputs=(),
        columns=columns,
        data=data,
        timestamp_column=timestamp_column,
        timestamp_unit=timestamp_unit,
        table=table,
        key_columns=key_columns,
        aggregates=tuple(aggregates),
        result_names=tuple(aggregation.result_names),
        windowing=windowing,
    )
    return _Builder(node, op), chain


def _check_windowing(windowing: Windowing) -> None:
    if type(windowing.triggerfn) is not DefaultTrigger:
        msg = f"the trigger {windowing.triggerfn!r} (SQL plans run the default trigger only)"
        raise _NotASegment(msg)
    if type(windowing.windowfn) not in _WINDOW_FNS:
        msg = f"{type(windowing.windowfn).__name__} windows (SQL plans run global, fixed and sliding windows)"
        raise _NotASegment(msg)


def _recognised_producer(nodes: list[AppliedTransform]) -> AppliedTransform | None:
    """The outermost transform producing a PCollection that a segment may contain."""
    for node in nodes:
        if isinstance(node.transform, Create | Select | AssignTimestamps | WindowInto) or is_schema_read(node.transform):
            return node
    return None


def _column(names: dict[str, str], field: Any, node: AppliedTransform) -> str:
    if not field.is_attribute:
        msg = f"'{node.full_label}' computes {field.name!r} with a Python callable"
        raise _NotASegment(msg)
    if field.expr not in names:
        msg = f"'{node.full_label}' reads {field.expr!r}, not a field of its input ({', '.join(names)})"
        raise _NotASegment(msg)
    return names[field.expr]


def _source_columns(node: AppliedTransform) -> tuple[tuple[tuple[str, ColumnKind], ...], tuple[tuple, ...]]:
    """The columns of a Create of Rows (or NamedTuples of one type) with the first
    element's fields, each column all of one kind. (Builtins that loop in C: a million
    elements take a fraction of a second.)"""
    values = node.transform.values
    if not values:
        msg = f"'{node.full_label}' creates no elements"
        raise _NotASegment(msg)
    first = values[0]
    types = set(map(type, values))
    if isinstance(first, Row) and types == {Row}:
        field_names = tuple(vars(first))
    elif isinstance(first, tuple) and isinstance(getattr(type(first), "_fields", None), tuple) and len(types) == 1:
        field_names = first._fields  # type: ignore[attr-defined]
    else:
        shown = ", ".join(sorted(t.__name__ for t in types))
        msg = f"'{node.full_label}' creates {shown} values, not Rows or NamedTuples of one type"
        raise _NotASegment(msg)
    if not field_names:
        msg = f"'{node.full_label}' creates elements without fields"
        raise _NotASegment(msg)
    # Fields are read by name, as the general path reads them: a Row with more fields than
    # the first is read the same way; one without a field the first has is not a table.
    try:
        # A column at a time: zip(*rows) over a million rows is many times slower.
        data = tuple(tuple(map(operator.attrgetter(name), values)) for name in field_names)
    except AttributeError as error:
        msg = f"'{node.full_label}' creates Rows without the fields of the first ({error})"
        raise _NotASegment(msg) from None
    columns = tuple((name, _kind_of(node, name, column)) for name, column in zip(field_names, data))
    return columns, data


def _kind_of(node: AppliedTransform, name: str, column: tuple) -> ColumnKind:
    present = set(map(type, column))
    for python_type, kind in _KINDS:
        if present == {python_type}:
            if kind == "int" and not (_INT64[0] <= min(column) and max(column) <= _INT64[1]):
                msg = f"'{node.full_label}': the field {name!r} holds ints beyond 64 bits"
                raise _NotASegment(msg)
            return kind
    shown = ", ".join(sorted(t.__name__ for t in present))
    msg = f"'{node.full_label}': the field {name!r} holds {shown} values (SQL plans need one of bool, int, float, str)"
    raise _NotASegment(msg)


def _check_timestamps(node: AppliedTransform, name: str, column: tuple, unit: str) -> None:
    per_unit = 1_000_000 / TIMESTAMP_UNITS[unit]
    low, high = MIN_TIMESTAMP.micros / per_unit, MAX_TIMESTAMP.micros / per_unit
    # A NaN or an infinity makes the sum not finite; then the bounds.
    if not (math.isfinite(sum(column)) and low < min(column) and max(column) < high):
        bad = next((v for v in column if not (math.isfinite(v) and low < v < high)), None)
        msg = f"'{node.full_label}': the timestamp {bad!r} in {name!r} is not a finite time within Beam's range"
        raise _NotASegment(msg)


register_kind(
    SchemaAggregateOp,
    Role.SOURCE,
    source_state=BoundedSourceState,
    for_executors=lambda op: attrs.evolve(op, data=()),  # the columns stay on the driver
    shape=lambda op: (op.describe(),),
    read=lambda op: SourceRead.HELD if op.driver_reads else SourceRead.COUNTED,
)
