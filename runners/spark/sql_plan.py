"""A schema'd segment (``runners/core/schema/schema_segments.py``) as one Spark SQL query.

The columns come from Spark's own readers (``sql_sources.py``) or, for a ``Create``, from
the driver as Arrow slices; the plan is SQL text over them (a few calls into the JVM to
build it); Spark computes each element's timestamp (µs) and windows,
groups by the key fields and the window, and aggregates with its own functions: no Python
runs per element. Each (key, window) group also keeps its earliest and latest timestamp,
from which the pane's timestamp follows the timestamp combiner as on the general path
(``runners/core/grouping/holds.py``). Where the panes go was decided by the planner
(``SchemaAggregateOp.driver_reads``):

- read by a capture or a side input, the groups come to the driver as one Arrow table and
  become the panes there, column by column (bounded, as any collect, by Spark's
  ``spark.driver.maxResultSize``); a later stage or a sink reads the same panes, spread once;
- read only by later stages and sinks, the panes are made on the executors from the
  groups, a partition's rows a chunk at a time, and never reach the driver: the groups are
  kept (persisted) for the step, and one small job over them counts them and finds the
  worst problem of a file's records and whether a 64-bit sum overflowed (the query then
  runs again with exact sums), before anything reads them.

Both backends run it: what a backend provides is a ``SqlHost`` (its session, how the
driver's columns become a DataFrame, how a DataFrame is kept for the step). The classic
backend's registration is ``read_segment`` below; Spark Connect's is
``connect/sql_segments.py``, whose executors make the panes into its element rows.
"""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from sparkbeam.runners.core.elements.gc_pause import gc_paused
from sparkbeam.runners.core.grouping.holds import HoldPolicy, last_instant, single_pane_timestamp
from sparkbeam.runners.core.schema.schema_segments import SchemaAggregateOp
from sparkbeam.runners.core.schema.schema_sources import ParquetTable
from sparkbeam.runners.core.sources.sources import SourceEmission
from sparkbeam.runners.spark import sql_sources
from sparkbeam.schemas import TIMESTAMP_UNITS, schema_tuple_type
from sparkbeam.utils.timestamp import MIN_TIMESTAMP, Timestamp
from sparkbeam.utils.windowed_value import (
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
    new_windowed_value,
)
from sparkbeam.window import (
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    SlidingWindows,
    TimestampCombiner,
)

__all__ = ["SqlHost", "aggregate_dataframe", "checked_groups", "classic_host", "kept_groups", "panes", "read_segment"]

_ROWS = "__rows"

_ARROW_TYPES = {"bool": "bool_", "int": "int64", "float": "float64", "str": "string"}
_TIMESTAMP, _START, _BACK, _EARLIEST, _LATEST = "__timestamp", "__window_start", "__back", "__earliest", "__latest"
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


@attrs.frozen
class SqlHost:
    """What a SQL plan needs of the backend that runs it."""

    #: the session (classic or Spark Connect) the plan is built and run in
    spark: Any
    #: the driver's columns (a ``Create``'s Arrow table, a DDL schema) as a DataFrame
    driver_columns: Callable[[Any, str], Any]
    #: a DataFrame computed once, by the first job that reads it, and kept for the step
    keep: Callable[[Any], Any]
    #: what ``keep`` kept, let go before the step ends
    release: Callable[[Any], None]


def classic_host(backend: Any) -> SqlHost:
    """The classic backend's: the driver's columns in one broadcast, persisted groups."""

    def keep(frame: Any) -> Any:
        frame = frame.persist()
        backend.step_cache.append(frame)  # unpersisted at the end of the step
        return frame

    return SqlHost(backend.spark, functools.partial(_broadcast_columns, backend), keep, lambda frame: frame.unpersist())


def _slices(shipped: Any, ids: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` over the ids of slices: each slice's Arrow batches, as shipped."""
    import pyarrow as pa

    for batch in ids:
        for index in batch.column(0).to_pylist():
            yield from pa.ipc.open_stream(shipped.value[index])


def _broadcast_columns(backend: Any, table: Any, schema: str) -> Any:
    """The driver's columns as a DataFrame of the backend's partition count: Arrow IPC
    slices in one broadcast, made rows in the JVM by ``mapInArrow`` over one id per slice
    (``createDataFrame`` of a large Arrow table holds it whole in the driver's JVM and
    makes a partition per 10,000 rows)."""
    import pyarrow as pa

    size = max(1, -(-table.num_rows // backend.num_partitions))
    slices = []
    for start in range(0, table.num_rows, size):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(start, size))
        slices.append(sink.getvalue().to_pybytes())
    shipped = backend.sc.broadcast(slices)
    backend.broadcasts.append(shipped)  # unpersisted at the end of the step
    ids = backend.spark.range(0, len(slices), 1, len(slices))
    return ids.mapInArrow(functools.partial(_slices, shipped), schema)


def _source(host: SqlHost, op: SchemaAggregateOp, view: str) -> tuple[Any, str]:
    """The relation the plan starts from (files as Spark reads them, or the driver's columns
    as the host makes them a DataFrame), and the SQL text of the plan's columns over it,
    read as ``view``."""
    names = _column_names(op)
    if isinstance(op.table, ParquetTable):
        return sql_sources.parquet_files(host.spark, op), sql_sources.parquet_query(op, names, view)
    if op.table is not None:
        return sql_sources.csv_lines(host.spark, op), sql_sources.csv_query(op, names, view)
    schema = ", ".join(f"{name} {_SPARK_TYPES[op.kind_of_column(source)]}" for source, name in names.items())
    return host.driver_columns(_arrow_table(op, names), schema), f"SELECT * FROM {view}"


def _planned(host: SqlHost, op: SchemaAggregateOp, query: Callable[[str], str]) -> Any:
    """The DataFrame of ``query(columns)``, SQL text over the SQL text of the plan's columns
    (``_source``): the whole plan in a few calls into the JVM (or one request to a Connect
    server), where building it a step at a time with DataFrame methods takes hundreds.
    The source goes in as ``spark.sql``'s DataFrame argument: on a classic session a
    temporary view while the query is analysed (the DataFrame keeps the plan it resolved
    to), under Spark Connect its plan inside the query's (a view there would have to
    outlive every job that runs the query)."""
    view = f"__sparkbeam_source_{uuid.uuid4().hex}"
    source, columns = _source(host, op, view)
    # spark.sql formats the text as str.format does: its own braces (a regex's \p{Nd}, a
    # header's text) are escaped, and the unique name becomes the argument's field.
    text = query(columns).replace("{", "{{").replace("}", "}}").replace(view, "{source}")
    return host.spark.sql(text, source=source)


def source_frame(host: SqlHost, op: SchemaAggregateOp) -> Any:
    """The DataFrame of the columns the plan reads (``_source``)."""
    return _planned(host, op, lambda columns: columns)


def aggregate_query(op: SchemaAggregateOp, columns: str, *, exact_sums: bool = False) -> str:
    """SQL text of (key columns k0.., aggregates a0.., window start, earliest or latest
    timestamp, rows, and for files the worst problem of a row) per key and window, over
    ``columns``, SQL text of the plan's columns (``_source``). ``exact_sums``: sum ints as
    decimals (after a 64-bit sum of a file's column overflowed)."""
    names = _column_names(op)
    if op.timestamp_column is None:
        micros = f"CAST({MIN_TIMESTAMP.micros} AS bigint)"
    elif op.table is not None:
        micros = sql_sources.MICROS
    elif op.kind_of_column(op.timestamp_column) == "int":
        micros = f"CAST({names[op.timestamp_column]} AS bigint) * {TIMESTAMP_UNITS[op.timestamp_unit]}"
    else:
        # Timestamp.of rounds seconds * 1e6 half to even, as bround does.
        micros = f"CAST(bround({names[op.timestamp_column]} * 1000000.0D) AS bigint)"
    # Each projection reads what the one before computed (Spark keeps a projection whose
    # expressions are read more than once, rather than repeat them).
    frame = f"SELECT *, {micros} AS {_TIMESTAMP} FROM ({columns})"
    windowfn = op.windowing.windowfn
    window_columns = []
    if isinstance(windowfn, FixedWindows):
        size, offset = windowfn.size.micros, windowfn.offset.micros
        frame = f"SELECT *, {_TIMESTAMP} - pmod({_TIMESTAMP} - {offset}, {size}) AS {_START} FROM ({frame})"
        window_columns = [_START]
    if isinstance(windowfn, SlidingWindows):
        size, period, offset = windowfn.size.micros, windowfn.period.micros, windowfn.offset.micros
        back = -(-size // period)  # at most this many windows hold an element
        frame = f"SELECT *, explode(sequence(CAST(0 AS bigint), CAST({back - 1} AS bigint))) AS {_BACK} FROM ({frame})"
        last_start = f"({_TIMESTAMP} - pmod({_TIMESTAMP} - {offset}, {period}))"
        frame = f"SELECT *, {last_start} - {_BACK} * {period} AS {_START} FROM ({frame})"
        # SlidingWindows.assign: the starts after (timestamp - size), back from the last.
        frame = f"SELECT * FROM ({frame}) WHERE {_START} > {_TIMESTAMP} - {size}"
        window_columns = [_START]
    keys = [names[source] for _, source in op.key_columns]
    selected = [f"{name} AS k{index}" for index, name in enumerate(keys)] + window_columns
    positions = {name: index for index, (name, _) in enumerate(op.columns)}
    for index, agg in enumerate(op.aggregates):
        column = names[agg.column]
        is_int = op.kind_of_column(agg.column) == "int"
        if agg.function in ("sum", "mean") and is_int and (
            exact_sums or (op.table is None and _sum_may_overflow(op, op.data[positions[agg.column]], agg.column))
        ):
            # Python's ints do not overflow: sum exactly, as decimals (back as ints in panes).
            column = f"CAST({column} AS decimal(38,0))"
        # A file's values are unknown before the run: a 64-bit sum that overflows is null
        # (try_sum), and the plan runs again with exact sums.
        total = f"try_sum({column})" if op.table is not None else f"sum({column})"
        if agg.function == "count":
            expression = "count(1)"
        elif agg.function == "sum":
            expression = total
        elif agg.function == "mean":
            # MeanCombineFn: the exact sum over the count, as floats.
            expression = f"CAST({total} AS double) / CAST(count(1) AS double)"
        else:  # min, max
            expression = f"{agg.function}({column})"
        selected.append(f"{expression} AS a{index}")
    selected.append(f"count(1) AS {_ROWS}")
    if op.table is not None:
        selected.append(f"max({sql_sources.PROBLEM}) AS {sql_sources.PROBLEM}")
    # The panes' timestamps need the groups' earliest or latest time, unless they are at the
    # end of the window (END_OF_WINDOW, and Beam's batch shortcut for default windowing).
    combiner = op.windowing.timestamp_combiner
    if combiner in _LATEST_COMBINERS:
        selected.append(f"max({_TIMESTAMP}) AS {_LATEST}")
    elif combiner != TimestampCombiner.OUTPUT_AT_EOW:
        selected.append(f"min({_TIMESTAMP}) AS {_EARLIEST}")
    grouped_by = ", ".join(keys + window_columns)
    # With neither keys nor windows to group by, SQL aggregates no rows into one group; the
    # general path has no group, and no pane, for no elements.
    grouping = f"GROUP BY {grouped_by}" if grouped_by else "HAVING count(1) > 0"
    return f"SELECT {', '.join(selected)} FROM ({frame}) {grouping}"


def aggregate_dataframe(host: SqlHost, op: SchemaAggregateOp, *, exact_sums: bool = False) -> Any:
    """The DataFrame of ``aggregate_query`` over the op's source: one SQL query."""
    return _planned(host, op, functools.partial(aggregate_query, op, exact_sums=exact_sums))


def _sum_may_overflow(op: SchemaAggregateOp, values: tuple, column: str) -> bool:
    """Whether a 64-bit sum of the column's ints could overflow (judged on the driver)."""
    if op.kind_of_column(column) != "int" or not values:
        return False
    largest = max(abs(min(values)), abs(max(values)))
    return largest * len(values) >= 2**63


def panes(op: SchemaAggregateOp, overlapping_window_rule: bool, groups: Any) -> list[WindowedValue]:
    """The panes of the groups (an Arrow table or record batch of ``aggregate_dataframe``'s
    rows), built a column at a time: on the driver, or by a Connect task a batch at a time."""
    import pyarrow as pa

    def column(name: str) -> list:
        values = groups.column(name).to_pylist()
        if pa.types.is_decimal(groups.schema.field(name).type):
            values = [None if total is None else int(total) for total in values]  # Python's exact int
        return values

    return _panes_of_columns(op, overlapping_window_rule, column, groups.num_rows)


def _executor_panes(
    op: SchemaAggregateOp, overlapping_window_rule: bool, names: tuple[str, ...], decimals: frozenset[str], rows: Iterator[Any]
) -> Iterator[WindowedValue]:
    """The panes of one partition of the groups (Spark rows, fields ``names``, the exact sums
    among them ``decimals``), built on an executor a chunk of rows at a time by the
    driver's code (``_panes_of_columns``)."""
    positions = {name: index for index, name in enumerate(names)}
    while True:
        chunk = list(itertools.islice(rows, _PANE_CHUNK))
        if not chunk:
            return
        columns = list(zip(*chunk))

        def column(name: str, columns: list = columns) -> list:
            values = list(columns[positions[name]])
            if name in decimals:
                values = [None if total is None else int(total) for total in values]  # Python's exact int
            return values

        with gc_paused():
            panes = _panes_of_columns(op, overlapping_window_rule, column, len(chunk))
        yield from panes


#: groups per chunk when the executors build panes
_PANE_CHUNK = 10_000


def _panes_of_columns(op: SchemaAggregateOp, overlapping_window_rule: bool, column: Callable[[str], list], rows: int) -> list[WindowedValue]:
    """The panes of ``rows`` groups whose columns (k0.., a0.., the window start, the earliest
    or latest timestamp) ``column`` gives as lists."""
    holds = HoldPolicy(op.windowing, overlapping_window_rule=overlapping_window_rule)
    single_pane_stamp = single_pane_timestamp(op.windowing, holds.trigger)
    # As the batch grouping: default windowing gives each key one last pane; otherwise the
    # default trigger never finishes, so is_last is False.
    pane = PaneInfo(True, single_pane_stamp is not None, PaneInfoTiming.ON_TIME, 0, 0)
    result_type = schema_tuple_type("Result", op.result_names)
    key_count, aggregate_count = len(op.key_columns), len(op.aggregates)
    windowfn = op.windowing.windowfn
    fields = [column(name) for name in [f"k{i}" for i in range(key_count)] + [f"a{i}" for i in range(aggregate_count)]]
    # Tuples built in C (a NamedTuple's own __new__ is a Python frame per group).
    results = list(map(functools.partial(tuple.__new__, result_type), zip(*fields))) if fields else [result_type()] * rows
    if isinstance(windowfn, FixedWindows | SlidingWindows):
        size = windowfn.size.micros
        starts = column(_START)
        window_of = {  # few windows, many groups each
            start: (IntervalWindow(Timestamp.from_micros(start), Timestamp.from_micros(start + size)),) for start in set(starts)
        }
    else:
        starts = [None] * rows
        window_of = {None: (GlobalWindow(),)}
    windows = list(map(window_of.__getitem__, starts))
    if single_pane_stamp is not None:
        timestamps = [single_pane_stamp] * rows
    elif op.windowing.timestamp_combiner == TimestampCombiner.OUTPUT_AT_EOW:
        # At the end of the window, whatever the elements' times: once per window.
        stamp_of = {
            start: holds.pane_timestamp(last_instant(window), holds.output_time(window, MIN_TIMESTAMP.micros))
            for start, (window,) in window_of.items()
        }
        timestamps = list(map(stamp_of.__getitem__, starts))
    else:
        times = column(_LATEST if op.windowing.timestamp_combiner in _LATEST_COMBINERS else _EARLIEST)
        timestamps = [
            holds.pane_timestamp(last_instant(window), holds.output_time(window, time))
            for (window,), time in zip(windows, times)
        ]
    return list(map(new_windowed_value, zip(results, timestamps, windows, itertools.repeat(pane, rows))))


def checked_groups(host: SqlHost, op: SchemaAggregateOp) -> Any:
    """The aggregation's groups on the driver, as one Arrow table, a file's records checked;
    with the sums of a file's ints exact (again as decimals when a 64-bit sum overflowed)."""
    groups = aggregate_dataframe(host, op).toArrow()
    if op.table is None:
        return groups
    import pyarrow.compute as pc

    problems = groups.column(sql_sources.PROBLEM)
    worst = pc.max(problems).as_py() or 0
    # min or max of one missing value is None, as Python's min([None]); of more, an error.
    rows_at_worst = pc.max(pc.filter(groups.column(_ROWS), pc.equal(problems, worst))).as_py() if worst else 0
    _check_records(host, op, worst, rows_at_worst)
    if any(groups.column(name).null_count for name in _int_sums(op)):
        groups = aggregate_dataframe(host, op, exact_sums=True).toArrow()
    return groups


def _int_sums(op: SchemaAggregateOp) -> list[str]:
    """The columns of the sums (and means) of ints, which a file's plan sums in 64 bits:
    null where the sum overflowed."""
    return [
        f"a{index}"
        for index, agg in enumerate(op.aggregates)
        if agg.function in ("sum", "mean") and op.kind_of_column(agg.column) == "int"
    ]


def _check_records(host: SqlHost, op: SchemaAggregateOp, worst: int, rows_at_worst: int) -> None:
    """Fail as the general path fails when a record of the files is one it rejects (or one
    Spark would read differently): ``worst``, the worst problem of any group (of which
    the largest had ``rows_at_worst`` rows), shown with a record."""
    if worst == 0 or (worst == sql_sources.MISSING_IN_MIN_MAX and rows_at_worst == 1):
        return
    # SQL text, not pyspark.sql.functions: its columns are a classic session's or Connect's
    # by the process's mode, and a process may hold both kinds of session.
    frame = source_frame(host, op)
    found = (sql_sources.LINE, "input_file_name() AS file")
    record = frame.where(f"{sql_sources.PROBLEM} >= {max(worst, sql_sources.MISSING)}").selectExpr(*found).first()
    if record is None:  # a missing value under min or max in a group of several
        record = frame.where(f"{sql_sources.PROBLEM} = {worst}").selectExpr(*found).first()
        worst = sql_sources.MISSING
    error, msg = sql_sources.describe_problem(op, worst, record[0], record[1])
    raise error(msg)


def kept_groups(host: SqlHost, op: SchemaAggregateOp) -> tuple[Any, int]:
    """The aggregation's groups as a DataFrame kept on the executors for the step, checked
    as ``checked_groups`` checks them, and how many there are: one small job, whose one row
    is all that comes to the driver."""
    groups = host.keep(aggregate_dataframe(host, op))
    # SQL text (see _check_records): one global aggregate of the groups.
    facts = ["count(1) AS groups"]
    if op.table is not None:
        # The worst problem and, among its groups, the most rows (a struct orders so).
        facts.append(f"max(struct({sql_sources.PROBLEM}, {_ROWS})) AS worst")
        facts += [f"count(CASE WHEN {name} IS NULL THEN 1 END) AS null_{name}" for name in _int_sums(op)]
    (row,) = groups.selectExpr(*facts).collect()
    if op.table is None:
        return groups, row["groups"]
    worst, rows_at_worst = row["worst"] if row["worst"] is not None else (0, 0)
    _check_records(host, op, worst or 0, rows_at_worst or 0)
    if any(row[f"null_{name}"] for name in _int_sums(op)):
        host.release(groups)
        groups = host.keep(aggregate_dataframe(host, op, exact_sums=True))
    return groups, row["groups"]


def _executor_rdd(backend: Any, op: SchemaAggregateOp, groups: Any) -> Any:
    """The panes of ``groups`` (a DataFrame) as an RDD, made on the executors."""
    from pyspark.sql.types import DecimalType

    fields = groups.schema.fields
    decimals = frozenset(field.name for field in fields if isinstance(field.dataType, DecimalType))
    build = functools.partial(_executor_panes, op, backend.overlapping_window_rule, tuple(f.name for f in fields), decimals)
    return groups.rdd.mapPartitions(build)


def read_segment(backend: Any, op: SchemaAggregateOp, emission: SourceEmission) -> Any:
    """The segment's panes (see the module docs): collected on the driver when a capture or
    a side input reads them, else made on the executors."""
    from sparkbeam.runners.spark.backend import Dataset

    # The plan's jobs run here, before any stage of the step names its jobs: in the run's
    # job group (which an interrupt cancels and the progress line reads), under its label.
    backend.current_stage = op.label
    backend.sc.setJobGroup(backend.job_group, f"{op.label} (SQL plan)", True)
    host = classic_host(backend)
    if not op.driver_reads:
        groups, count = kept_groups(host, op)
        if not count:
            return Dataset(backend.sc.emptyRDD(), known_empty=True, size=0)
        return Dataset(_executor_rdd(backend, op, groups), size=count)
    groups = checked_groups(host, op)
    with gc_paused():
        made = panes(op, backend.overlapping_window_rule, groups)
    if not made:
        return Dataset(backend.sc.emptyRDD(), known_empty=True, collected=[])
    if op.executors_read:
        # Spread once, a slice per partition (a function holding them would be pickled
        # into every task).
        return backend.from_driver(made, keep=True)
    # Nothing on the executors reads them (the planner says): an RDD that costs nothing
    # unless a job runs it, then shipping them with each task.
    slices = max(1, min(backend.num_partitions, len(made)))
    size = -(-len(made) // slices)
    rdd = backend.sc.parallelize(range(slices), slices).flatMap(functools.partial(_slice, made, size))
    return Dataset(rdd, collected=made)


def _slice(panes: list[WindowedValue], size: int, index: int) -> list[WindowedValue]:
    return panes[index * size : (index + 1) * size]
