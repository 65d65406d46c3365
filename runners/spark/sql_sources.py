"""Where a SQL plan's columns come from when a file read starts its segment: Spark's own
reader, with ``ReadFromCsv``'s conversions written as Spark expressions.

The planner (``runners/core/schema_sources.py``) has made sure the files hold nothing on
which Spark's CSV reader and Python's ``csv`` module could split records differently (no
quotes, no ``\\r``, no lines of spaces...). Spark reads each line whole (the header line of
each file dropped, blank lines skipped, as the general path skips them) and splits it on the
separator; each column is converted as ``csvio._Dialect.convert`` converts it (pandas'
missing values, ints, floats, bools). Each row also gets a *problem* code, the most serious
of its fields', so that the plan can fail where the general path fails, naming the record:

- ``BAD_RECORD``: a field count other than the header's, or a value that does not fit its
  column's kind (``BadRecordError`` on the general path too);
- ``DISAGREES``: a value Python reads but Spark would not read the same way (an int beyond
  64 bits, digits outside ASCII, a timestamp out of Beam's range);
- ``MISSING``: a missing value where the aggregation cannot take one (a sum, a mean, a
  timestamp: the general path's combiner or stamp fails on None);
- ``MISSING_IN_MIN_MAX``: a missing value under min or max, which Python's ``min`` returns for
  a group of that one element and fails on otherwise.

Keys and counted fields take missing values as the general path does (None groups; a count
counts it), and unused columns only need to fit their kind.
"""

from __future__ import annotations

from typing import Any

from sparkbeam.runners.core.schema_segments import SchemaAggregateOp
from sparkbeam.schemas import TIMESTAMP_UNITS
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["BAD_RECORD", "DISAGREES", "LINE", "MISSING", "MISSING_IN_MIN_MAX", "PROBLEM", "csv_frame", "describe_problem"]

PROBLEM, LINE = "__problem", "__line"
MISSING_IN_MIN_MAX, MISSING, DISAGREES, BAD_RECORD = 1, 2, 3, 4

# csvio._INT and _FLOAT in Java's dialect: ASCII digits only (Python's \d also takes other
# scripts' digits, which the plan reports as a disagreement rather than misreading).
_JAVA_INT = "^[+-]?[0-9]+$"
_JAVA_FLOAT = "(?i)^[+-]?(?:(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:e[+-]?[0-9]+)?|inf|infinity)$"
_OTHER_DIGITS = "[^\\x00-\\x7f]"  # with a digit somewhere: maybe digits Python reads


def csv_frame(spark: Any, op: SchemaAggregateOp, names: dict[str, str]) -> Any:
    """The plan's columns (``names``: source column -> Spark name) read from the op's CSV
    files, with the line (``LINE``) and its problem code (``PROBLEM``, 0 for none)."""
    from pyspark.sql import functions as F

    table = op.table
    if table is None:  # not reached: only file segments come here
        msg = f"'{op.label}' reads no files"
        raise TypeError(msg)
    # One string column per line: no quoting (the planner found no quote characters) and a
    # separator no line holds (the planner found no NUL), so Spark splits only into lines.
    lines = spark.read.csv(
        list(table.files), schema=f"{LINE} string", sep="\u0000", quote="", header=table.header,
        mode="PERMISSIVE", multiLine=False, encoding="UTF-8",
    )
    fields = F.split(F.col(LINE), "\\Q" + table.separator + "\\E", -1)
    problems = [F.when(F.size(fields) != F.lit(table.width), F.lit(BAD_RECORD))]
    columns = [F.col(LINE)]
    uses = _uses(op)
    for column, kind in op.columns:
        raw = F.try_element_at(fields, F.lit(table.position(column) + 1))
        missing = raw.isin(*table.na_values)
        value, misfit, disagrees = _convert(raw, kind, table)
        problems.append(F.when(~missing & misfit, F.lit(BAD_RECORD)))
        if column not in names:
            continue
        problems.append(F.when(~missing & disagrees, F.lit(DISAGREES)))
        use = uses.get(column, set())
        if use & {"sum", "mean", "timestamp"}:
            problems.append(F.when(missing, F.lit(MISSING)))
        elif use & {"min", "max"}:
            problems.append(F.when(missing, F.lit(MISSING_IN_MIN_MAX)))
        if column == op.timestamp_column:
            value, out_of_range = _timestamp_micros(value, kind, op.timestamp_unit)
            problems.append(F.when(~missing & out_of_range, F.lit(DISAGREES)))
        columns.append(F.when(~missing, value).alias(names[column]))
    problem = F.greatest(F.lit(0), *[F.coalesce(p, F.lit(0)) for p in problems])
    return lines.select(*columns, problem.alias(PROBLEM))


def _uses(op: SchemaAggregateOp) -> dict[str, set[str]]:
    uses: dict[str, set[str]] = {}
    for agg in op.aggregates:
        uses.setdefault(agg.column, set()).add(agg.function)
    if op.timestamp_column is not None:
        uses.setdefault(op.timestamp_column, set()).add("timestamp")
    return uses


def _convert(raw: Any, kind: str, table: Any) -> tuple[Any, Any, Any]:
    """``(value, misfit, disagrees)`` for a field of ``kind``, as ``csvio`` converts it."""
    from pyspark.sql import functions as F

    if kind == "str":
        return raw, F.lit(False), F.lit(False)
    if kind == "bool":
        value = F.when(raw.isin(*table.true_values), F.lit(True)).when(raw.isin(*table.false_values), F.lit(False))
        return value, value.isNull(), F.lit(False)
    # Python reads other scripts' digits, and an int column takes a float (csvio converts
    # it to a float): neither fits a bigint column.
    other_digits = raw.rlike(_OTHER_DIGITS) & raw.rlike("\\p{Nd}")
    if kind == "int":
        value = raw.try_cast("bigint")
        fits = raw.rlike(_JAVA_INT)
        as_float = ~fits & raw.rlike(_JAVA_FLOAT)
        return value, ~fits & ~as_float & ~other_digits, as_float | other_digits | (fits & value.isNull())
    value = raw.try_cast("double")
    fits = raw.rlike(_JAVA_FLOAT)
    return value, ~fits & ~other_digits, (~fits & other_digits) | (fits & value.isNull())


def _timestamp_micros(value: Any, kind: str, unit: str) -> tuple[Any, Any]:
    """The timestamp in µs (rounded half to even, as ``Timestamp.of``) and whether it is
    out of Beam's range (where the general path's stamp fails)."""
    from pyspark.sql import functions as F

    per_unit = TIMESTAMP_UNITS[unit]
    low, high = MIN_TIMESTAMP.micros // per_unit, MAX_TIMESTAMP.micros // per_unit
    in_range = (value > F.lit(low)) & (value < F.lit(high))
    if kind == "int":
        micros = value * F.lit(per_unit).cast("long")
    else:
        micros = F.bround(value * F.lit(float(per_unit))).cast("long")
    return F.when(in_range, micros), ~in_range


def describe_problem(op: SchemaAggregateOp, code: int, line: str, path: str) -> tuple[type[Exception], str]:
    """The error the plan raises for a record with problem ``code``: the general path's kind
    of error, naming the file and the record."""
    from sparkbeam.io.filebased import BadRecordError

    where = f"'{op.label}': the record {line!r} of {path}"
    if code == BAD_RECORD:
        table = op.table
        width = table.width if table is not None else "?"
        return BadRecordError, (
            f"{where} does not fit the columns read from the first file (expected {width} fields of the "
            f"kinds {dict(op.columns)}). Use ReadFromCsv(...).with_exception_handling() to route bad records "
            "to a second output."
        )
    if code == DISAGREES:
        return ValueError, (
            f"{where} holds a value Spark's reader would not read as ReadFromCsv does (an int beyond 64 "
            "bits, digits outside ASCII, or a timestamp outside Beam's range); run with --no_sql_plans "
            "to read it with ReadFromCsv itself"
        )
    return TypeError, (
        f"{where} has a missing value in a field the aggregation sums, averages, compares or stamps "
        "by; ReadFromCsv reads it as None, which the combiner cannot take (as on the general path)"
    )
