"""A schema'd segment (``runners/core/schema_segments.py``) as one Spark DataFrame plan.

The driver's columns go to the JVM as one Arrow table; Spark computes each element's
timestamp (µs) and windows, groups by the key fields and the window, and aggregates with its
own functions: no Python runs per element. Each (key, window) group also keeps its earliest
and latest timestamp, from which the pane's timestamp follows the timestamp combiner as on
the general path (``runners/core/holds.py``). The results come back through ``mapInArrow``:
each Arrow batch becomes the batch's panes (``WindowedValue`` of a ``Result``), pickled as
one value, so the rest of the pipeline reads an RDD of panes as it would read the
aggregation's.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator
from typing import Any

import attrs

from sparkbeam.runners.core.holds import HoldPolicy, last_instant, single_pane_timestamp
from sparkbeam.runners.core.schema_segments import SchemaAggregateOp
from sparkbeam.runners.core.sources import SourceEmission
from sparkbeam.schemas import schema_tuple_type
from sparkbeam.utils.timestamp import MIN_TIMESTAMP, Timestamp
from sparkbeam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue
from sparkbeam.window import (
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    SlidingWindows,
    TimestampCombiner,
)

__all__ = ["aggregate_dataframe", "read_segment"]

_ARROW_TYPES = {"bool": "bool_", "int": "int64", "float": "float64", "str": "string"}
_TIMESTAMP, _START, _EARLIEST, _LATEST = "__timestamp", "__window_start", "__earliest", "__latest"
_LATEST_COMBINERS = (TimestampCombiner.OUTPUT_AT_LATEST,)


def _column_names(op: SchemaAggregateOp) -> dict[str, str]:
    """Each source column the plan reads -> the plain name it has in Spark (field names
    may clash with the plan's own columns or differ only in case, which Spark ignores)."""
    used = [source for _, source in op.key_columns] + [agg.column for agg in op.aggregates]
    if op.timestamp_column is not None:
        used.append(op.timestamp_column)
    return {source: f"c{index}" for index, source in enumerate(dict.fromkeys(used))}


def _arrow_table(op: SchemaAggregateOp, names: dict[str, str]) -> Any:
    import pyarrow as pa

    positions = {name: index for index, (name, _) in enumerate(op.columns)}
    return pa.table(
        {
            spark_name: pa.array(op.data[positions[source]], type=getattr(pa, _ARROW_TYPES[op.kind_of_column(source)])())
            for source, spark_name in names.items()
        }
    )


_SPARK_TYPES = {"bool": "boolean", "int": "bigint", "float": "double", "str": "string"}


def _slices(shipped: Any, ids: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` over the ids of slices: each slice's Arrow batches, as shipped."""
    import pyarrow as pa

    for batch in ids:
        for index in batch.column(0).to_pylist():
            yield from pa.ipc.open_stream(shipped.value[index])


def source_frame(backend: Any, op: SchemaAggregateOp) -> Any:
    """The columns the plan reads as a DataFrame of the backend's partition count.

    They travel as Arrow IPC slices in one broadcast and become rows in the JVM through
    ``mapInArrow`` over one id per slice: ``createDataFrame`` of a large Arrow table holds
    it whole in the driver's JVM and makes a partition per 10,000 rows.
    """
    import pyarrow as pa

    names = _column_names(op)
    table = _arrow_table(op, names)
    size = max(1, -(-table.num_rows // backend.num_partitions))
    slices = []
    for start in range(0, table.num_rows, size):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(start, size))
        slices.append(sink.getvalue().to_pybytes())
    shipped = backend.sc.broadcast(slices)
    backend.broadcasts.append(shipped)  # unpersisted at the end of the step
    schema = ", ".join(f"{name} {_SPARK_TYPES[op.kind_of_column(source)]}" for source, name in names.items())
    ids = backend.spark.range(0, len(slices), 1, len(slices))
    return ids.mapInArrow(functools.partial(_slices, shipped), schema)


def aggregate_dataframe(frame: Any, op: SchemaAggregateOp) -> Any:
    """The DataFrame of (key columns k0.., aggregates a0.., window start, earliest and
    latest timestamp) per key and window, from ``source_frame``."""
    from pyspark.sql import functions as F

    names = _column_names(op)
    if op.timestamp_column is None:
        micros = F.lit(MIN_TIMESTAMP.micros).cast("long")
    elif op.kind_of_column(op.timestamp_column) == "int":
        micros = F.col(names[op.timestamp_column]).cast("long") * F.lit(1_000_000)
    else:
        # Timestamp.of rounds seconds * 1e6 half to even, as bround does.
        micros = F.bround(F.col(names[op.timestamp_column]) * F.lit(1_000_000.0)).cast("long")
    frame = frame.withColumn(_TIMESTAMP, micros)
    windowfn = op.windowing.windowfn
    window_columns = []
    if isinstance(windowfn, FixedWindows):
        size, offset = windowfn.size.micros, windowfn.offset.micros
        ts = F.col(_TIMESTAMP)
        frame = frame.withColumn(_START, ts - F.pmod(ts - F.lit(offset), F.lit(size)))
        window_columns = [_START]
    elif isinstance(windowfn, SlidingWindows):
        size, period, offset = windowfn.size.micros, windowfn.period.micros, windowfn.offset.micros
        ts = F.col(_TIMESTAMP)
        last_start = ts - F.pmod(ts - F.lit(offset), F.lit(period))
        back = -(-size // period)  # at most this many windows hold an element
        frame = frame.withColumn(
            _START, F.explode(F.sequence(F.lit(0).cast("long"), F.lit(back - 1).cast("long")))
        ).withColumn(_START, last_start - F.col(_START) * F.lit(period))
        # SlidingWindows.assign: the starts after (timestamp - size), back from the last.
        frame = frame.where(F.col(_START) > ts - F.lit(size))
        window_columns = [_START]
    keys = [F.col(names[source]).alias(f"k{index}") for index, (_, source) in enumerate(op.key_columns)]
    aggregates = []
    positions = {name: index for index, (name, _) in enumerate(op.columns)}
    for index, agg in enumerate(op.aggregates):
        column = F.col(names[agg.column])
        if agg.function in ("sum", "mean") and _sum_may_overflow(op, op.data[positions[agg.column]], agg.column):
            # Python's ints do not overflow: sum exactly, as decimals (back as ints in _panes).
            column = column.cast("decimal(38,0)")
        if agg.function == "count":
            expression = F.count(F.lit(1))
        elif agg.function == "sum":
            expression = F.sum(column)
        elif agg.function == "mean":
            # MeanCombineFn: the exact sum over the count, as floats.
            expression = F.sum(column).cast("double") / F.count(F.lit(1)).cast("double")
        elif agg.function == "min":
            expression = F.min(column)
        else:
            expression = F.max(column)
        aggregates.append(expression.alias(f"a{index}"))
    return frame.groupBy(*keys, *window_columns).agg(
        *aggregates, F.min(_TIMESTAMP).alias(_EARLIEST), F.max(_TIMESTAMP).alias(_LATEST)
    )


def _sum_may_overflow(op: SchemaAggregateOp, values: tuple, column: str) -> bool:
    """Whether a 64-bit sum of the column's ints could overflow (judged on the driver)."""
    if op.kind_of_column(column) != "int" or not values:
        return False
    largest = max(abs(min(values)), abs(max(values)))
    return largest * len(values) >= 2**63


def _panes(op: SchemaAggregateOp, overlapping_window_rule: bool, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow``: each batch of groups as one pickled list of panes."""
    import pyarrow as pa

    holds = HoldPolicy(op.windowing, overlapping_window_rule=overlapping_window_rule)
    single_pane_stamp = single_pane_timestamp(op.windowing, holds.trigger)
    # As the batch grouping: default windowing gives each key one last pane; otherwise the
    # default trigger never finishes, so is_last is False.
    pane = PaneInfo(True, single_pane_stamp is not None, PaneInfoTiming.ON_TIME, 0, 0)
    result_type = schema_tuple_type("Result", op.result_names)
    key_count, aggregate_count = len(op.key_columns), len(op.aggregates)
    windowfn = op.windowing.windowfn
    size = windowfn.size.micros if isinstance(windowfn, FixedWindows | SlidingWindows) else None
    by_latest = op.windowing.timestamp_combiner in _LATEST_COMBINERS
    global_window = GlobalWindow()
    windows: dict[int, IntervalWindow] = {}  # by start: few windows, many groups each
    exact_sums = {f"a{index}" for index, agg in enumerate(op.aggregates) if agg.function == "sum"}
    for batch in batches:
        columns = batch.to_pydict()
        for name in exact_sums:
            if pa.types.is_decimal(batch.schema.field(name).type):
                columns[name] = [int(total) for total in columns[name]]  # Python's exact int
        fields = [columns[f"k{i}"] for i in range(key_count)] + [columns[f"a{i}"] for i in range(aggregate_count)]
        starts = columns.get(_START)
        times = columns[_LATEST] if by_latest else columns[_EARLIEST]
        panes = []
        for row in range(batch.num_rows):
            if starts is None:
                window: Any = global_window
            else:
                start = starts[row]
                window = windows.get(start)
                if window is None:
                    window = windows[start] = IntervalWindow(Timestamp.from_micros(start), Timestamp.from_micros(start + size))
            if single_pane_stamp is None:
                hold = holds.output_time(window, times[row])
                timestamp = holds.pane_timestamp(last_instant(window), hold)
            else:
                timestamp = single_pane_stamp
            value = result_type(*[field[row] for field in fields])
            panes.append(WindowedValue(value, timestamp, (window,), pane))
        yield pa.RecordBatch.from_pydict({"panes": [pickle.dumps(panes, protocol=pickle.HIGHEST_PROTOCOL)]})


def _unpickle(row: Any) -> list[WindowedValue]:
    return pickle.loads(row[0])  # written by _panes in this run


def read_segment(backend: Any, op: SchemaAggregateOp, emission: SourceEmission) -> Any:
    """The segment's panes as an RDD of WindowedValue (a ``Dataset`` of the backend)."""
    from sparkbeam.runners.spark.backend import Dataset

    frame = aggregate_dataframe(source_frame(backend, op), op)
    panes = frame.mapInArrow(functools.partial(_panes, attrs.evolve(op, data=()), backend.overlapping_window_rule), "panes binary")
    return Dataset(panes.rdd.flatMap(_unpickle))
