"""Where a SQL plan's columns come from when a file read starts its segment: Spark's own
readers, with ``ReadFromCsv``'s conversions written as Spark expressions.

The planner (``runners/core/schema/schema_sources.py``) has made sure the files hold nothing on
which a line reader and Python's ``csv`` module could split records differently (no
quotes, no ``\\r``, no lines of spaces...). Spark's text reader reads each line whole, the
plan drops each file's header line (by its text: the planner found it on no other line)
and blank lines (as the general path skips them), and splits each line on the
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

import re
from typing import Any

import attrs

from sparkbeam.runners.core.schema.schema_segments import SchemaAggregateOp
from sparkbeam.schemas import TIMESTAMP_UNITS
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = [
    "BAD_RECORD", "DISAGREES", "LINE", "MICROS", "MISSING", "MISSING_IN_MIN_MAX", "PROBLEM", "csv_lines", "csv_query",
    "describe_problem", "parquet_files", "parquet_query",
]

PROBLEM, LINE, MICROS, _FIELDS, _SIZE = "__problem", "__line", "__micros", "__fields", "__size"
MISSING_IN_MIN_MAX, MISSING, DISAGREES, BAD_RECORD = 1, 2, 3, 4

# csvio._INT and _FLOAT in Java's dialect: ASCII digits only (Python's \d also takes other
# scripts' digits, which the plan reports as a disagreement rather than misreading).
_JAVA_INT = "^[+-]?[0-9]+$"
_JAVA_FLOAT = "(?i)^[+-]?(?:(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:e[+-]?[0-9]+)?|inf|infinity)$"
_REGEX_META = ".$|()[]{}^?*+\\"
_OTHER_DIGITS = "[^\\x00-\\x7f]"  # with a digit somewhere: maybe digits Python reads


def csv_query(op: SchemaAggregateOp, names: dict[str, str], source: str) -> str:
    """The plan's columns (``names``: source column -> Spark name) as SQL text over
    ``source``, the op's files as lines (``csv_lines``), with the line (``LINE``),
    its problem code (``PROBLEM``, 0 for none) and its timestamp in µs (``MICROS``) when the
    segment stamps elements from a column.

    Each projection computes what the next reads more than once (a field, whether it fits
    its kind, its value): Spark keeps a projection whose non-trivial expressions are read
    more than once, where written out inline they would be evaluated once per use."""
    table = _table(op)
    # A separator as one plain character (or a backslash-escaped one) takes Java's fast split.
    separator = _sql_string(table.separator if table.separator.isalnum() or table.separator not in _REGEX_META else "\\" + table.separator)
    # The text reader's lines (``value``) as the read takes them: empty lines skipped (the
    # planner found no other blank-looking ones), each file's header line dropped (the
    # planner found it on no other line).
    kept = "value != ''" + (f" AND value != {_sql_string(table.header_line)}" if table.header else "")
    split = f"SELECT value AS {LINE}, split(value, {separator}, -1) AS {_FIELDS} FROM {source} WHERE {kept}"
    raws = [f"try_element_at({_FIELDS}, {table.position(column) + 1}) AS {_raw(index)}" for index, (column, _) in enumerate(op.columns)]
    fields = f"SELECT {LINE}, size({_FIELDS}) AS {_SIZE}, {', '.join(raws)} FROM ({split})"
    uses = _uses(op)
    tests, values, problems, columns = [], [], [f"CASE WHEN {_SIZE} != {table.width} THEN {BAD_RECORD} ELSE 0 END"], [LINE]
    for index, (column, kind) in enumerate(op.columns):
        used = column in names
        field = _Field(_raw(index), f"__test{index}", f"__value{index}", kind, table, used, _missing_code(uses.get(column, set())))
        tests.append(f"{field.test()} AS {field.test_name}")
        if used:
            values.append(f"{field.value()} AS {field.value_name}")
        problem = field.problem()
        if column == op.timestamp_column:
            micros, out_of_range = _timestamp_micros(field.value_name, kind, op.timestamp_unit)
            problem = f"CASE WHEN {out_of_range} THEN {DISAGREES} ELSE {problem} END"
            columns.append(f"{micros} AS {MICROS}")
        problems.append(problem)
        if used:
            columns.append(f"{field.value_name} AS {names[column]}")
    tested = f"SELECT *, {', '.join(tests)} FROM ({fields})"
    valued = f"SELECT *, {', '.join(values)} FROM ({tested})" if values else tested
    return f"SELECT {', '.join(columns)}, greatest({', '.join(problems)}) AS {PROBLEM} FROM ({valued})"


def csv_lines(spark: Any, op: SchemaAggregateOp) -> Any:
    """The op's CSV files as Spark's text reader reads them: a row per line, in ``value``.
    (Spark's CSV reader, given one column and a separator no line holds, reads the same
    lines at a third more CPU; ``csv_query`` drops blank lines and the header as it does.)"""
    return spark.read.text(list(_table(op).files))


def parquet_query(op: SchemaAggregateOp, names: dict[str, str], source: str) -> str:
    """``csv_query`` for Parquet files (``source`` read by ``spark.read.parquet``): Spark
    reads the typed columns as pyarrow does; a missing value (null, None on the general
    path) is the only problem a value can have."""
    uses = _uses(op)
    columns = [f"to_json(struct(*)) AS {LINE}"]
    problems = ["0"]
    for column, kind in op.columns:
        if column not in names:
            continue
        quoted = "`" + column.replace("`", "``") + "`"
        value = f"CAST({quoted} AS double)" if kind == "float" else quoted  # float32 as Python's float
        missing_code = _missing_code(uses.get(column, set()))
        problem = f"CASE WHEN {quoted} IS NULL THEN {missing_code} ELSE 0 END"
        if column == op.timestamp_column:
            micros, out_of_range = _timestamp_micros(value, kind, op.timestamp_unit)
            problem = f"CASE WHEN {out_of_range} THEN {DISAGREES} ELSE {problem} END"
            columns.append(f"{micros} AS {MICROS}")
        problems.append(problem)
        columns.append(f"{value} AS {names[column]}")
    return f"SELECT {', '.join(columns)}, greatest({', '.join(problems)}) AS {PROBLEM} FROM {source}"


def parquet_files(spark: Any, op: SchemaAggregateOp) -> Any:
    return spark.read.parquet(*_table(op).files)


def _table(op: SchemaAggregateOp) -> Any:
    if op.table is None:  # not reached: only file segments come here
        msg = f"'{op.label}' reads no files"
        raise TypeError(msg)
    return op.table


def _raw(index: int) -> str:
    return f"__raw{index}"


def _sql_string(text: str) -> str:
    """A Spark SQL string literal of ``text`` (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _sql_in(raw: str, values: tuple[str, ...]) -> str:
    return f"({raw} IN ({', '.join(map(_sql_string, values))}))" if values else "false"


def _uses(op: SchemaAggregateOp) -> dict[str, set[str]]:
    uses: dict[str, set[str]] = {}
    for agg in op.aggregates:
        uses.setdefault(agg.column, set()).add(agg.function)
    if op.timestamp_column is not None:
        uses.setdefault(op.timestamp_column, set()).add("timestamp")
    return uses


def _missing_code(uses: set[str]) -> int:
    """What a missing value (None on the general path) means where the column is used."""
    if uses & {"sum", "mean", "timestamp"}:
        return MISSING
    if uses & {"min", "max"}:
        return MISSING_IN_MIN_MAX
    return 0  # a key, a count or an unused column takes None


@attrs.frozen
class _Field:
    """A CSV field of ``kind`` as ``csvio`` converts it, as SQL text in three projections:
    ``test()`` (the one test most fields settle on, named ``test_name``), ``value()`` (named
    ``value_name``, from the test) and ``problem()``: only a field that fails the test is
    classified further."""

    raw: str
    test_name: str
    value_name: str
    kind: str
    table: Any
    used: bool
    missing_code: int

    def missing(self) -> str:
        return _sql_in(self.raw, self.table.na_values)

    def test(self) -> str:
        """str: whether the field is missing; bool: its truth (null for neither); numbers:
        whether it fits the kind."""
        table = self.table
        if self.kind == "str":
            return self.missing()
        if self.kind == "bool":
            return f"CASE WHEN {_sql_in(self.raw, table.true_values)} THEN true WHEN {_sql_in(self.raw, table.false_values)} THEN false END"
        pattern = _JAVA_INT if self.kind == "int" else _JAVA_FLOAT
        fits = f"({self.raw} RLIKE {_sql_string(pattern)})"
        python_pattern = re.compile(pattern.replace("(?i)", ""), re.IGNORECASE)
        if any(python_pattern.search(na) for na in table.na_values):  # e.g. na_values=['-1']
            fits = f"({fits} AND NOT {self.missing()})"
        return fits

    def _bool_fits(self) -> str:
        fits = f"({self.test_name} IS NOT NULL)"
        if set(self.table.na_values) & {*self.table.true_values, *self.table.false_values}:
            fits = f"({fits} AND NOT {self.missing()})"
        return fits

    def value(self) -> str:
        if self.kind == "str":
            return f"CASE WHEN NOT {self.test_name} THEN {self.raw} END"
        if self.kind == "bool":
            return f"CASE WHEN {self._bool_fits()} THEN {self.test_name} END"
        return f"CASE WHEN {self.test_name} THEN try_cast({self.raw} AS {'bigint' if self.kind == 'int' else 'double'}) END"

    def problem(self) -> str:
        if self.kind == "str":
            return f"CASE WHEN {self.test_name} THEN {self.missing_code} ELSE 0 END"
        if self.kind == "bool":
            return f"CASE WHEN {self._bool_fits()} THEN 0 WHEN {self.missing()} THEN {self.missing_code} ELSE {BAD_RECORD} END"
        raw = self.raw
        # Python reads other scripts' digits, and an int column takes a float (csvio converts it
        # to a float); neither fits the column Spark reads, and 64 bits hold fewer ints.
        other_digits = f"({raw} RLIKE {_sql_string(_OTHER_DIGITS)} AND {raw} RLIKE {_sql_string(chr(92) + 'p{Nd}')})"
        readable_otherwise = f"({other_digits} OR {raw} RLIKE {_sql_string(_JAVA_FLOAT)})" if self.kind == "int" else other_digits
        fitting = f"CASE WHEN {self.value_name} IS NULL THEN {DISAGREES} ELSE 0 END" if self.used else "0"
        return (
            f"CASE WHEN {self.test_name} THEN {fitting} WHEN {self.missing()} THEN {self.missing_code} "
            f"WHEN {readable_otherwise} THEN {DISAGREES if self.used else 0} ELSE {BAD_RECORD} END"
        )


def _timestamp_micros(value: str, kind: str, unit: str) -> tuple[str, str]:
    """The timestamp in µs (rounded half to even, as ``Timestamp.of``) and whether it is
    out of Beam's range (where the general path's stamp fails), as SQL text."""
    per_unit = TIMESTAMP_UNITS[unit]
    low, high = MIN_TIMESTAMP.micros // per_unit, MAX_TIMESTAMP.micros // per_unit
    in_range = f"(({value}) > {low} AND ({value}) < {high})"
    if kind == "int":
        micros = f"({value}) * {per_unit}L"
    else:
        micros = f"CAST(bround(({value}) * {float(per_unit)!r}D) AS bigint)"
    # (a missing value is no timestamp either: its problem is already MISSING)
    return f"CASE WHEN {in_range} THEN {micros} END", f"(({value}) IS NOT NULL AND NOT {in_range})"


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
            f"{where} holds a value Spark's reader would not read as the read does (in a CSV file an int "
            "beyond 64 bits, a float in an int column, digits outside ASCII; a timestamp outside Beam's "
            "range); run with --no_sql_plans to read it with the read itself"
        )
    return TypeError, (
        f"{where} has a missing value in a field the aggregation sums, averages, compares or stamps "
        "by; the read gives None there, which the combiner cannot take (as on the general path)"
    )
