"""CSV files: ``ReadFromCsv`` (schema'd rows) and ``WriteToCsv``, with Beam's names.

``ReadFromCsv(path)`` emits one NamedTuple row per record, as Beam's does. The columns come
from the header of the first matching file; each column's type is inferred, as pandas
infers it, from that file's first 10,000 records: int (float if a value is missing), float,
bool (the strings 'True' and 'False' if a value is missing, as Beam gives), or str. Missing values (``''``, ``NA``, ``null``, ``NaN``... pandas' defaults) are
None. Quoted fields may span lines. Later files may order their columns differently; they
must have the same ones.

A malformed record (broken quoting, a field count that differs from the header's, a value
that does not fit its column's type, undecodable bytes) fails the read with
``BadRecordError`` naming the transform, the file and the line. pandas' ``on_bad_lines``
('error', 'warn', 'skip') is honoured, and ``.with_exception_handling()`` routes bad records
to a second output instead::

    rows = p | beam.io.ReadFromCsv("in/*.csv")                         # doctest: +SKIP
    rows, bad = p | beam.io.ReadFromCsv("in/*.csv.gz").with_exception_handling()

``WriteToCsv(path)`` writes dicts, NamedTuples or Rows with a header line to shards
``path-00000-of-0000N``, formatted as pandas' ``to_csv`` formats them, and returns
``{'files_written': PCollection of file names}``::

    rows | beam.io.WriteToCsv("out/table", num_shards=1)             # doctest: +SKIP

Files are read and written by Python on the executors: local paths or a file system shared
by every executor. Compression follows the file name (``.gz``, ``.bz2``, ...).
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections.abc import Iterator
from typing import Any

from sparkbeam import pvalue
from sparkbeam.io.columns import SAMPLE_RECORDS, dtype_kinds
from sparkbeam.io.filebased import (
    BadRecord,
    ExceptionHandling,
    ReadMatchingFiles,
    as_record_dict,
    refuse_pandas_options,
    schema_row_type,
    where,
)
from sparkbeam.io.filesystem import CompressionTypes, compression_name, iter_lines
from sparkbeam.io.filesystems import match_files, open_compressed, readable_path
from sparkbeam.io.filewrites import FileSink, WriteShardedFiles
from sparkbeam.io.jsonio import check_encoding
from sparkbeam.ptransform import PTransform

__all__ = ["ReadFromCsv", "WriteToCsv"]

_LOG = logging.getLogger(__name__)
_HINT = "Use ReadFromCsv(...).with_exception_handling() to route bad records to a second output."

# pandas' default missing-value markers.
DEFAULT_NA_VALUES = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
})
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity)", re.IGNORECASE)


class _Dialect:
    """How one CSV file is split into records and fields, and which strings mean what."""

    def __init__(self, owner: str, options: dict[str, Any]) -> None:
        self.delimiter = options["sep"]
        self.quotechar = options["quotechar"]
        # Reading, the csv module would turn unquoted fields into floats; types are ours to infer.
        self.quoting: Any = csv.QUOTE_MINIMAL if options["quoting"] == csv.QUOTE_NONNUMERIC else options["quoting"]
        self.doublequote = options["doublequote"]
        self.escapechar = options["escapechar"]
        self.skipinitialspace = options["skipinitialspace"]
        self.encoding = check_encoding(owner, options["encoding"])
        self.compression = compression_name(owner, options["compression"])
        self.skiprows = options["skiprows"]
        na_values = options["na_values"]
        if isinstance(na_values, dict):
            msg = f"{owner}: na_values as a per-column dict is not supported by sparkbeam; pass a list"
            raise NotImplementedError(msg)
        extra = {na_values} if isinstance(na_values, str) else set(na_values or ())
        defaults = DEFAULT_NA_VALUES if options["keep_default_na"] else frozenset()
        self.na_values = frozenset(defaults | {str(v) for v in extra}) if options["na_filter"] else frozenset()
        self.true_values = frozenset({"True", "TRUE", "true", *map(str, options["true_values"] or ())})
        self.false_values = frozenset({"False", "FALSE", "false", *map(str, options["false_values"] or ())})

    def records(self, path: str) -> Iterator[Any]:
        """``(line, raw text, fields)`` per record of the file, or BadRecord."""
        record_lines: list[str] = []
        problems: list[BadRecord] = []
        position = {"line": 0, "start": 0}

        with open_compressed(path, "rb", self.compression) as handle:

            def source() -> Iterator[str]:
                for raw in iter_lines(handle):
                    position["line"] += 1
                    if position["line"] <= self.skiprows:
                        continue
                    try:
                        text = raw.decode(self.encoding)
                    except UnicodeDecodeError:
                        problems.append(BadRecord.undecodable(path, position["line"], raw, self.encoding))
                        continue
                    if position["line"] == 1:
                        text = text.removeprefix("\ufeff")  # a byte-order mark is no data
                    if not record_lines:
                        position["start"] = position["line"]
                    record_lines.append(text)
                    yield text + "\n"

            reader = csv.reader(
                source(),
                delimiter=self.delimiter,
                quotechar=self.quotechar,
                quoting=self.quoting,
                doublequote=self.doublequote,
                escapechar=self.escapechar,
                skipinitialspace=self.skipinitialspace,
                strict=True,
            )
            while True:
                record_lines.clear()
                try:
                    fields = next(reader)
                except StopIteration:
                    yield from problems
                    return
                except csv.Error as error:
                    yield from problems
                    problems.clear()
                    yield BadRecord(path, position["start"], "\n".join(record_lines), f"malformed CSV: {error}")
                    continue
                yield from problems
                problems.clear()
                if fields:  # a blank line is no record (pandas' skip_blank_lines)
                    yield position["start"], "\n".join(record_lines), fields

    def kind_of(self, values: list[str]) -> str:
        """A column's kind from its sampled strings, as pandas' parser infers it."""
        present = [v for v in values if v not in self.na_values]
        missing = len(present) < len(values)
        if not present:
            return "any"
        if all(_INT.fullmatch(v) for v in present):
            return "float" if missing else "int"
        if all(_FLOAT.fullmatch(v) for v in present):
            return "float"
        if all(v in self.true_values or v in self.false_values for v in present):
            # pandas keeps bools with missing values as objects, which Beam turns into strings.
            return "boolstr" if missing else "bool"
        return "str"

    def convert(self, value: str, kind: str) -> Any:
        if value in self.na_values:
            return None
        if kind == "str":
            return value
        if kind == "any":
            kind = self.kind_of([value])
            if kind == "str":
                return value
        if kind in ("int", "float"):
            if kind == "int" and _INT.fullmatch(value):
                return int(value)
            if _FLOAT.fullmatch(value):
                return float(value)
            return _MISFIT
        if value in self.true_values:
            return "True" if kind == "boolstr" else True
        if value in self.false_values:
            return "False" if kind == "boolstr" else False
        return _MISFIT


_MISFIT = object()


class _CsvFileReader:
    """Reads one CSV file into rows of the schema's fields (BadRecord for bad records)."""

    def __init__(self, dialect: _Dialect, header: bool, names: tuple[str, ...] | None, fields: tuple[str, ...], kinds: tuple[str, ...], filename_column: str | None, on_bad_lines: str, first_file: str) -> None:
        self.dialect = dialect
        self.header = header
        self.names = names
        self.fields = fields
        self.kinds = kinds
        self.filename_column = filename_column
        self.on_bad_lines = on_bad_lines
        self.first_file = first_file

    def __call__(self, path: str) -> Iterator[Any]:
        for item in self._rows(path):
            if type(item) is BadRecord and self.on_bad_lines != "error":
                if self.on_bad_lines == "warn":
                    _LOG.warning("ReadFromCsv skipped a bad record at %s", item.describe())
                continue
            yield item

    def _rows(self, path: str) -> Iterator[Any]:
        row_type = schema_row_type(self.fields + ((self.filename_column,) if self.filename_column else ()))
        records = self.dialect.records(path)
        columns = self.names
        if self.header:
            for item in records:
                if type(item) is BadRecord:
                    yield item
                    continue
                line, text, header = item
                columns = self.names or tuple(header)
                missing = [f for f in self.fields if f not in columns]
                if missing or len(columns) != len(header):
                    problem = f"lacks the columns {missing}" if missing else f"has {len(header)} columns, names= {len(columns)}"
                    yield BadRecord(
                        path, line, text,
                        f"the header {problem} (the columns, from the first file {self.first_file}, are "
                        f"{list(self.fields)}); the file is skipped",
                    )
                    return
                break
            else:
                return
        if columns is None:  # not reached: header=None comes with names=
            return
        positions = [columns.index(f) for f in self.fields]
        width = len(columns)
        extra = (path,) if self.filename_column else ()
        convert = self.dialect.convert
        for item in records:
            if type(item) is BadRecord:
                yield item
                continue
            line, text, values = item
            if len(values) != width:
                yield BadRecord(path, line, text, f"expected {width} fields (the header's), saw {len(values)}")
                continue
            row = []
            for position, kind, field in zip(positions, self.kinds, self.fields):
                converted = convert(values[position], kind)
                if converted is _MISFIT:
                    yield BadRecord(
                        path, line, text,
                        f"column {field!r} holds {values[position]!r}, which is not a {kind} (the type inferred "
                        f"from the first file); set the column's type with dtype={{{field!r}: str}}",
                    )
                    break
                row.append(converted)
            else:
                yield row_type(*row, *extra)


_READ_DEFAULTS: dict[str, Any] = {
    "sep": ",", "delimiter": None, "header": "infer", "names": None, "usecols": None, "dtype": None,
    "na_values": None, "keep_default_na": True, "na_filter": True, "true_values": None,
    "false_values": None, "skiprows": 0, "skip_blank_lines": True, "quotechar": '"',
    "quoting": csv.QUOTE_MINIMAL, "doublequote": True, "escapechar": None, "skipinitialspace": False,
    "encoding": "utf-8", "compression": "infer", "on_bad_lines": "error", "engine": None,
    "index_col": None, "low_memory": True,
}


class ReadFromCsv(ExceptionHandling, PTransform):
    """Schema'd rows (NamedTuples) from CSV files, as Beam's ``ReadFromCsv`` emits.

    >>> rows = p | ReadFromCsv("in/*.csv", dtype={"zip": str})      # doctest: +SKIP

    Supported pandas options: sep/delimiter, header (0 or None with names), names, usecols
    (names), dtype, na_values, keep_default_na, na_filter, true_values, false_values,
    skiprows (a count), quotechar, quoting, doublequote, escapechar, skipinitialspace,
    encoding, compression, on_bad_lines ('error', 'warn', 'skip'). ``splittable`` is
    accepted: a file is read by one task, so quoted fields may always span lines.
    """

    def __init__(self, path: str, *, splittable: bool = True, filename_column: str | None = None, **pandas_options: Any) -> None:
        super().__init__()
        owner = "ReadFromCsv"
        refuse_pandas_options(owner, "read_csv", {k: v for k, v in pandas_options.items() if k not in _READ_DEFAULTS})
        options = {**_READ_DEFAULTS, **pandas_options}
        if not isinstance(path, str) or not path:
            msg = f"{owner}: path must be a non-empty path or glob, got {path!r}"
            raise ValueError(msg)
        if options["delimiter"] is not None:
            options["sep"] = options["delimiter"]
        if not isinstance(options["sep"], str) or len(options["sep"]) != 1:
            msg = f"{owner}: sep must be a single character (regular-expression separators are not supported), got {options['sep']!r}"
            raise NotImplementedError(msg)
        if not isinstance(options["skiprows"], int) or options["skiprows"] < 0:
            msg = f"{owner}: skiprows must be a number of lines (lists and callables are not supported), got {options['skiprows']!r}"
            raise NotImplementedError(msg)
        if options["on_bad_lines"] not in ("error", "warn", "skip"):
            msg = f"{owner}: on_bad_lines must be 'error', 'warn' or 'skip' (callables are not supported), got {options['on_bad_lines']!r}"
            raise NotImplementedError(msg)
        if not options["skip_blank_lines"]:
            msg = f"{owner}: skip_blank_lines=False is not supported by sparkbeam"
            raise NotImplementedError(msg)
        if options["index_col"] not in (None, False):
            msg = f"{owner}: index_col= is not supported (Beam's ReadFromCsv emits no index either)"
            raise NotImplementedError(msg)
        header = options["header"]
        names = options["names"]
        if header == "infer":
            header = 0 if names is None else None
        if header not in (0, None):
            msg = f"{owner}: header must be 0 (the first line) or None (with names=), got {header!r}"
            raise NotImplementedError(msg)
        if header is None and not names:
            msg = f"{owner}: header=None needs names= (sparkbeam rows need column names)"
            raise ValueError(msg)
        usecols = options["usecols"]
        if usecols is not None and (callable(usecols) or not all(isinstance(c, str) for c in usecols)):
            msg = f"{owner}: usecols must be a list of column names, got {usecols!r}"
            raise NotImplementedError(msg)
        self.path = readable_path(owner, path)
        self.dialect = _Dialect(owner, options)
        self.header = header == 0
        self.names = tuple(str(n) for n in names) if names is not None else None
        self.usecols = tuple(usecols) if usecols is not None else None
        self.dtype = options["dtype"]
        self.filename_column = filename_column
        self.on_bad_lines = options["on_bad_lines"]

    def default_label(self) -> str:
        return "ReadFromCsv"

    def expand(self, pbegin: pvalue.PBegin) -> Any:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = "ReadFromCsv is a root transform: apply it to the pipeline (p | ReadFromCsv(...))"
            raise TypeError(msg)
        owner = where(pbegin)
        files = match_files(self.path)
        if not files:
            msg = f"{owner}: no files match {self.path!r}"
            raise FileNotFoundError(msg)
        fields, kinds = self._schema(owner, files[0])
        reader = _CsvFileReader(
            self.dialect, self.header, self.names, fields, kinds, self.filename_column, self.on_bad_lines, files[0]
        )
        return pbegin | "ReadFiles" >> ReadMatchingFiles(
            self.path, reader, owner=owner, hint=_HINT, dead_letter_tags=self._dead_letter_tags
        )

    def _schema(self, owner: str, first_file: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        columns = None if self.header else self.names
        samples: list[list[str]] = []
        for item in self.dialect.records(first_file):
            if type(item) is BadRecord:
                continue  # reported when the file is read
            values = item[2]
            if columns is None:  # the header line
                columns = self.names or tuple(values)
                continue
            if len(values) == len(columns):
                samples.append(values)
                if len(samples) >= SAMPLE_RECORDS:
                    break
        if columns is None:
            msg = f"{owner}: the first matching file, {first_file}, has no header line to take the columns from"
            raise ValueError(msg)
        fields = [c for c in columns if self.usecols is None or c in self.usecols]
        if self.usecols is not None:
            unknown = [c for c in self.usecols if c not in columns]
            if unknown:
                msg = f"{owner}: usecols names {unknown}, which are not columns of {first_file}: {list(columns)}"
                raise ValueError(msg)
        overrides, every = dtype_kinds(owner, self.dtype, fields)
        kinds = []
        for field in fields:
            index = columns.index(field)
            kinds.append(overrides.get(field) or every or self.dialect.kind_of([row[index] for row in samples]))
        return tuple(fields), tuple(kinds)


# -- writing -------------------------------------------------------------------------


class _CsvFormatter:
    """Values as pandas' ``to_csv`` writes them: None as na_rep, floats in repr, bools as True."""

    def __init__(self, na_rep: str, float_format: Any, date_format: str | None) -> None:
        self.na_rep = na_rep
        self.float_format = float_format
        self.date_format = date_format

    def __call__(self, value: Any) -> str:
        if value is None:
            return self.na_rep
        if isinstance(value, float):
            if value != value:  # NaN
                return self.na_rep
            if self.float_format is None:
                return repr(value)
            if callable(self.float_format):
                return str(self.float_format(value))
            return self.float_format % value
        if self.date_format is not None and hasattr(value, "strftime"):
            return value.strftime(self.date_format)
        return str(value)


class _CsvShardWriter:
    def __init__(self, sink: _CsvSink, handle: Any) -> None:
        self.sink = sink
        self.handle = handle
        self.writer: Any = None
        self.columns: tuple[str, ...] | None = sink.columns

    def write(self, element: Any) -> None:
        sink = self.sink
        record = as_record_dict(sink.owner, element)
        if self.writer is None:
            self.text = io.TextIOWrapper(self.handle, encoding=sink.encoding, newline="")
            self.writer = csv.writer(self.text, **sink.dialect)
            if self.columns is None:
                self.columns = tuple(record)
            if sink.header is True:
                self.writer.writerow(self.columns)
            elif sink.header:
                self.writer.writerow(sink.header)
        columns = self.columns or ()
        if (sink.columns is None and len(record) != len(columns)) or any(c not in record for c in columns):
            msg = (
                f"{sink.owner}: {element!r} has the fields {list(record)}, but this file's columns are "
                f"{list(columns)} (from its first element); every element must have the same fields, "
                "or pass columns= to choose them"
            )
            raise ValueError(msg)
        self.writer.writerow([sink.format(record[c]) for c in columns])

    def close(self) -> None:
        if self.writer is not None:
            self.text.close()
        else:
            self.handle.close()


class _CsvSink(FileSink):
    def __init__(self, owner: str, options: dict[str, Any], compression: str) -> None:
        self.owner = owner
        self.columns = tuple(options["columns"]) if options["columns"] is not None else None
        header = options["header"]
        if header not in (True, False) and (self.columns is None or len(header) != len(self.columns)):
            msg = f"{owner}: header= as a list of aliases needs columns= of the same length"
            raise ValueError(msg)
        self.header = header if header in (True, False) else tuple(header)
        self.encoding = check_encoding(owner, options["encoding"])
        self.compression = compression
        self.dialect = {
            "delimiter": options["sep"],
            "quotechar": options["quotechar"],
            "quoting": options["quoting"],
            "lineterminator": options["lineterminator"],
            "escapechar": options["escapechar"],
            "doublequote": options["doublequote"],
        }
        self.format = _CsvFormatter(options["na_rep"], options["float_format"], options["date_format"])

    def open(self, path: str) -> _CsvShardWriter:
        return _CsvShardWriter(self, open_compressed(path, "wb", self.compression))


_WRITE_DEFAULTS: dict[str, Any] = {
    "sep": ",", "na_rep": "", "float_format": None, "columns": None, "header": True,
    "encoding": "utf-8", "compression": "infer", "quoting": csv.QUOTE_MINIMAL, "quotechar": '"',
    "lineterminator": "\n", "escapechar": None, "doublequote": True, "date_format": None,
    "decimal": ".", "mode": "w",
}


class WriteToCsv(PTransform):
    """Writes dicts, NamedTuples or Rows as CSV (a header line, then one line per element).

    >>> rows | WriteToCsv("out/table")                         # doctest: +SKIP

    Shards are named ``path-SSSSS-of-NNNNN``; returns ``{'files_written': file names}``.
    Each shard's columns are its first element's fields unless ``columns=`` chooses them.
    Supported pandas options: sep, na_rep, float_format, columns, header, encoding,
    quoting, quotechar, lineterminator, escapechar, doublequote, date_format, compression.
    sparkbeam additions: ``file_name_suffix`` (``'.csv.gz'`` also compresses) and
    ``shard_name_template``. The write is atomic.
    """

    def __init__(
        self,
        path: str,
        num_shards: int | None = None,
        file_naming: Any = None,
        *,
        file_name_suffix: str = "",
        shard_name_template: str | None = None,
        **pandas_options: Any,
    ) -> None:
        super().__init__()
        owner = "WriteToCsv"
        refuse_pandas_options(owner, "to_csv", {k: v for k, v in pandas_options.items() if k not in _WRITE_DEFAULTS})
        if file_naming is not None:
            msg = f"{owner}: file_naming= (a fileio.FileNaming) is not supported by sparkbeam; use file_name_suffix= and shard_name_template="
            raise NotImplementedError(msg)
        options = {**_WRITE_DEFAULTS, **pandas_options}
        if options["decimal"] != "." or options["mode"] != "w":
            msg = f"{owner}: decimal= other than '.' and mode= other than 'w' are not supported by sparkbeam"
            raise NotImplementedError(msg)
        compression = compression_name(owner, options["compression"])
        if compression == CompressionTypes.AUTO:
            compression = CompressionTypes.detect_compression_type(file_name_suffix or "")
        self.sink = _CsvSink(owner, options, compression)
        self.write = WriteShardedFiles(
            self.sink,
            owner=owner,
            file_path_prefix=path,
            file_name_suffix=file_name_suffix,
            num_shards=num_shards or 0,
            shard_name_template=shard_name_template,
            min_shards=0,
        )

    def default_label(self) -> str:
        return "WriteToCsv"

    def expand(self, pcoll: pvalue.PCollection) -> dict[str, pvalue.PCollection]:
        self.sink.owner = self.write.owner = where(pcoll)
        return {"files_written": pcoll | "WriteFiles" >> self.write}
