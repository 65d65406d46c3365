"""JSON files: ``ReadFromJson`` (schema'd rows) and ``WriteToJson``, with Beam's names.

``ReadFromJson(path)`` reads JSON lines (one object per line, Beam's default) or, with
``lines=False``, files that each hold one array of objects. Like Beam's, it emits one
NamedTuple row per object, with the columns of the first matching file (the first 10,000
records of it) and each column converted as Beam's pandas-based read converts it: ints,
floats (ints with missing values become floats), bools, and ``str`` for strings and for
everything else (mixed types, nested arrays and objects become ``str(value)``, as in Beam).
Missing fields are None.

A line that is not valid JSON, not an object, has a field the columns lack, or a value that
does not fit its column fails the read with ``BadRecordError`` naming the transform, file
and line; ``.with_exception_handling()`` sends those lines to a second output instead::

    rows = p | beam.io.ReadFromJson("events/*.jsonl")                      # doctest: +SKIP
    rows, bad = p | beam.io.ReadFromJson("events/*.jsonl.gz").with_exception_handling()

``WriteToJson(path)`` writes dicts, NamedTuples or Rows as JSON lines to shards
``path-00000-of-0000N`` and returns ``{'files_written': PCollection of file names}``::

    rows | beam.io.WriteToJson("out/events", num_shards=2)                 # doctest: +SKIP

Compression follows the file name (``.gz``, ``.bz2``, ...) when reading; when writing it
follows ``file_name_suffix`` or ``compression=``. Files are read and written by Python on
the executors: paths must be local or on a file system shared by every executor.

Not as in Beam: date-like columns are not turned into pandas Timestamps (pandas'
``convert_dates``), and floats are written with Python's shortest repr after rounding to
``double_precision`` decimals, which differs from pandas for very large or small numbers.
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import json
import math
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
from sparkbeam.ptransform import PTransform

__all__ = ["ReadFromJson", "WriteToJson"]

_HINT = "Use ReadFromJson(...).with_exception_handling() to route bad records to a second output."


def check_encoding(owner: str, encoding: str) -> str:
    """An encoding in which a newline is the byte ``\\n`` (so lines can be split as bytes)."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        msg = f"{owner}: unknown encoding {encoding!r}"
        raise LookupError(msg) from None
    if "\n".encode(encoding) != b"\n":
        msg = f"{owner}: encoding {encoding!r} is not supported (sparkbeam reads ASCII-compatible encodings such as utf-8 or latin-1)"
        raise NotImplementedError(msg)
    return encoding


# -- reading -------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "nested"


def _infer_kind(types: set[str], missing: bool) -> str:
    """A column's kind from the JSON types seen in the sample, as pandas (dtype=False) infers it."""
    if not types:
        return "any"
    if types == {"bool"}:
        return "str" if missing else "bool"  # pandas keeps bools with nulls as objects: strings in Beam
    if types == {"int"}:
        return "float" if missing else "int"
    if types <= {"int", "float"}:
        return "float"
    return "str"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


class _JsonRecords:
    """The objects of one JSON file, as ``(line, raw text, object)`` or BadRecord."""

    def __init__(self, lines: bool, encoding: str, compression: str) -> None:
        self.lines = lines
        self.encoding = encoding
        self.compression = compression

    def __call__(self, path: str) -> Iterator[Any]:
        with open_compressed(path, "rb", self.compression) as handle:
            if self.lines:
                yield from self._lines(path, handle)
            else:
                yield from self._array(path, handle)

    def _lines(self, path: str, handle: Any) -> Iterator[Any]:
        for number, raw in enumerate(iter_lines(handle), start=1):
            try:
                text = raw.decode(self.encoding)
            except UnicodeDecodeError:
                yield BadRecord.undecodable(path, number, raw, self.encoding)
                continue
            if number == 1:
                text = text.removeprefix("\ufeff")  # a byte-order mark is no data
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                yield BadRecord(path, number, text, f"invalid JSON: {error}")
                continue
            if not isinstance(record, dict):
                yield BadRecord(path, number, text, f"a JSON lines record must be an object, not {_json_type(record)}")
                continue
            yield number, text, record

    def _array(self, path: str, handle: Any) -> Iterator[Any]:
        data = handle.read()
        try:
            records = json.loads(data.decode(self.encoding).removeprefix("\ufeff"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            line = getattr(error, "lineno", None)
            yield BadRecord(path, line, None, f"invalid JSON: {error}")
            return
        if not isinstance(records, list):
            yield BadRecord(path, None, None, f"with lines=False a file must hold an array of objects, not {_json_type(records)}")
            return
        for record in records:
            if not isinstance(record, dict):
                yield BadRecord(path, None, json.dumps(record), f"array items must be objects, not {_json_type(record)}")
                continue
            yield None, None, record


class _JsonFileReader:
    """Reads one JSON file into rows of the given fields and kinds (BadRecord for bad ones)."""

    def __init__(self, records: _JsonRecords, fields: tuple[str, ...], kinds: tuple[str, ...], first_file: str) -> None:
        self.records = records
        self.fields = fields
        self.kinds = kinds
        self.first_file = first_file

    def __call__(self, path: str) -> Iterator[Any]:
        row_type = schema_row_type(self.fields)
        positions = {field: index for index, field in enumerate(self.fields)}
        for item in self.records(path):
            if type(item) is BadRecord:
                yield item
                continue
            line, text, record = item
            values: list[Any] = [None] * len(self.fields)
            problem = None
            for name, value in record.items():
                index = positions.get(name)
                if index is None:
                    problem = (
                        f"field {name!r} is not among the columns {list(self.fields)} (taken from the "
                        f"first file, {self.first_file}); declare it with dtype={{{name!r}: str}} or another type"
                    )
                    break
                converted = _convert(value, self.kinds[index])
                if converted is _MISFIT:
                    problem = (
                        f"field {name!r} holds {value!r}, which does not fit the column's type "
                        f"{self.kinds[index]}; set the column's type with dtype={{{name!r}: str}}"
                    )
                    break
                values[index] = converted
            if problem is not None:
                yield BadRecord(path, line, text if text is not None else json.dumps(record), problem)
            else:
                yield row_type(*values)


_MISFIT = object()


def _convert(value: Any, kind: str) -> Any:
    if value is None:
        return None
    is_bool = isinstance(value, bool)
    if kind == "str":
        return _as_text(value)
    if kind == "int":
        return value if isinstance(value, (int, float)) and not is_bool else _MISFIT
    if kind == "float":
        return float(value) if isinstance(value, (int, float)) and not is_bool else _MISFIT
    if kind == "bool":
        return value if is_bool else _MISFIT
    return str(value) if isinstance(value, (list, dict)) else value  # any


class ReadFromJson(ExceptionHandling, PTransform):
    """Schema'd rows (NamedTuples) from JSON lines files, as Beam's ``ReadFromJson`` emits.

    >>> rows = p | ReadFromJson("in/*.jsonl")             # doctest: +SKIP
    >>> rows, bad = p | ReadFromJson("in/*.jsonl").with_exception_handling()   # doctest: +SKIP

    ``dtype={'col': int, ...}`` sets column types (and adds columns the first file lacks);
    ``encoding`` and ``compression`` ('infer' by extension, 'gzip', 'bz2', ...) as in pandas.
    """

    def __init__(
        self,
        path: str,
        *,
        orient: str = "records",
        lines: bool = True,
        dtype: Any = False,
        encoding: str = "utf-8",
        compression: Any = "infer",
        convert_dates: Any = None,
        keep_default_dates: Any = None,
        precise_float: Any = None,
        typ: str = "frame",
        engine: str = "ujson",
        **pandas_options: Any,
    ) -> None:
        super().__init__()
        owner = "ReadFromJson"
        refuse_pandas_options(owner, "read_json", pandas_options)
        if not isinstance(path, str) or not path:
            msg = f"{owner}: path must be a non-empty path or glob, got {path!r}"
            raise ValueError(msg)
        if orient != "records" or typ != "frame":
            msg = f"{owner}: only orient='records' (and typ='frame') are supported by sparkbeam, got orient={orient!r}, typ={typ!r}"
            raise NotImplementedError(msg)
        if convert_dates not in (None, False):
            msg = f"{owner}: convert_dates={convert_dates!r} is not supported by sparkbeam (dates are read as the strings or numbers the JSON holds)"
            raise NotImplementedError(msg)
        self.path = readable_path(owner, path)
        self.lines = bool(lines)
        self.dtype = dtype
        self.encoding = check_encoding(owner, encoding)
        self.compression = compression_name(owner, compression)

    def default_label(self) -> str:
        return "ReadFromJson"

    def expand(self, pbegin: pvalue.PBegin) -> Any:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = "ReadFromJson is a root transform: apply it to the pipeline (p | ReadFromJson(...))"
            raise TypeError(msg)
        owner = where(pbegin)
        files = match_files(self.path)
        if not files:
            msg = f"{owner}: no files match {self.path!r}"
            raise FileNotFoundError(msg)
        records = _JsonRecords(self.lines, self.encoding, self.compression)
        fields, kinds = self._schema(owner, records, files[0])
        reader = _JsonFileReader(records, fields, kinds, files[0])
        return pbegin | "ReadFiles" >> ReadMatchingFiles(
            self.path, reader, owner=owner, hint=_HINT, dead_letter_tags=self._dead_letter_tags
        )

    def _schema(self, owner: str, records: _JsonRecords, first_file: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        types: dict[str, set[str]] = {}
        present: dict[str, int] = {}
        seen = 0
        for item in records(first_file):
            if type(item) is BadRecord:
                continue  # reported when the file is read
            record = item[2]
            for name, value in record.items():
                kinds = types.setdefault(name, set())
                present[name] = present.get(name, 0) + 1
                if value is not None:
                    kinds.add(_json_type(value))
                else:
                    present[name] -= 1
            seen += 1
            if seen >= SAMPLE_RECORDS:
                break
        overrides, every = dtype_kinds(owner, self.dtype, list(types))
        fields = list(types) + [name for name in overrides if name not in types]
        if not fields:
            msg = f"{owner}: the first matching file, {first_file}, holds no JSON objects to take the columns from"
            raise ValueError(msg)
        column_kinds = tuple(
            overrides.get(name) or every or _infer_kind(types.get(name, set()), present.get(name, 0) < seen)
            for name in fields
        )
        return tuple(fields), column_kinds


# -- writing -------------------------------------------------------------------------


class _JsonEncoder:
    """One record as pandas' ``to_json(orient='records')`` writes it (escaped ``/``, ASCII)."""

    def __init__(self, owner: str, double_precision: int, force_ascii: bool, date_format: str | None, date_unit: str, default_handler: Any) -> None:
        if not isinstance(double_precision, int) or not 0 <= double_precision <= 15:
            msg = f"{owner}: double_precision must be an integer from 0 to 15, got {double_precision!r}"
            raise ValueError(msg)
        if date_format not in (None, "epoch", "iso"):
            msg = f"{owner}: date_format must be 'epoch' or 'iso', got {date_format!r}"
            raise ValueError(msg)
        units = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
        if date_unit not in units:
            msg = f"{owner}: date_unit must be one of {sorted(units)}, got {date_unit!r}"
            raise ValueError(msg)
        self.owner = owner
        self.double_precision = double_precision
        self.force_ascii = force_ascii
        self.iso_dates = date_format == "iso"
        self.per_second = units[date_unit]
        self.default_handler = default_handler

    def encode(self, record: dict) -> str:
        text = json.dumps(
            self._plain(record), ensure_ascii=self.force_ascii, separators=(",", ":"), allow_nan=False
        )
        return text.replace("/", "\\/")  # '/' only occurs inside JSON strings

    def _plain(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return round(value, self.double_precision) if math.isfinite(value) else None
        if isinstance(value, dict):
            return {str(k): self._plain(v) for k, v in value.items()}
        if hasattr(value, "_asdict") or hasattr(value, "as_dict"):
            return self._plain(as_record_dict(self.owner, value))
        if isinstance(value, (list, tuple)):
            return [self._plain(v) for v in value]
        if isinstance(value, datetime.date):
            if not isinstance(value, datetime.datetime):
                value = datetime.datetime(value.year, value.month, value.day)
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.timezone.utc)
            if self.iso_dates:
                return value.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat(timespec="milliseconds")
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            delta = value - epoch
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            return micros * self.per_second // 1_000_000
        if isinstance(value, decimal.Decimal):
            return self._plain(float(value))
        if self.default_handler is not None:
            return self._plain(self.default_handler(value))
        msg = f"{self.owner}: cannot write {value!r} ({type(value).__name__}) as JSON; pass default_handler= to convert it"
        raise TypeError(msg)


class _JsonShardWriter:
    def __init__(self, handle: Any, encoder: _JsonEncoder, lines: bool, encoding: str) -> None:
        self.handle = handle
        self.encoder = encoder
        self.lines = lines
        self.encoding = encoding
        self.first = True
        if not lines:
            handle.write(b"[")

    def write(self, element: Any) -> None:
        text = self.encoder.encode(as_record_dict(self.encoder.owner, element))
        if self.lines:
            self.handle.write((text + "\n").encode(self.encoding))
        else:
            self.handle.write((text if self.first else "," + text).encode(self.encoding))
        self.first = False

    def close(self) -> None:
        if not self.lines:
            self.handle.write(b"]")
        self.handle.close()


class _JsonSink(FileSink):
    def __init__(self, encoder: _JsonEncoder, lines: bool, encoding: str, compression: str) -> None:
        self.encoder = encoder
        self.lines = lines
        self.encoding = encoding
        self.compression = compression

    def open(self, path: str) -> _JsonShardWriter:
        return _JsonShardWriter(open_compressed(path, "wb", self.compression), self.encoder, self.lines, self.encoding)


class WriteToJson(PTransform):
    """Writes dicts, NamedTuples or Rows as JSON lines to shards ``path-SSSSS-of-NNNNN``.

    >>> rows | WriteToJson("out/rows", num_shards=1)      # doctest: +SKIP

    Returns ``{'files_written': PCollection of the final file names}``, as Beam does.
    ``lines=False`` writes each shard as one JSON array. sparkbeam additions:
    ``file_name_suffix`` (e.g. ``'.jsonl.gz'``, which also compresses) and
    ``shard_name_template``, as for ``WriteToText``. The write is atomic.
    """

    def __init__(
        self,
        path: str,
        *,
        num_shards: int | None = None,
        file_naming: Any = None,
        orient: str = "records",
        lines: bool | None = None,
        double_precision: int = 10,
        force_ascii: bool = True,
        date_format: str | None = None,
        date_unit: str = "ms",
        default_handler: Any = None,
        encoding: str = "utf-8",
        compression: Any = "infer",
        file_name_suffix: str = "",
        shard_name_template: str | None = None,
        **pandas_options: Any,
    ) -> None:
        super().__init__()
        owner = "WriteToJson"
        refuse_pandas_options(owner, "to_json", pandas_options)
        if file_naming is not None:
            msg = f"{owner}: file_naming= (a fileio.FileNaming) is not supported by sparkbeam; use file_name_suffix= and shard_name_template="
            raise NotImplementedError(msg)
        if orient != "records":
            msg = f"{owner}: only orient='records' is supported by sparkbeam, got {orient!r}"
            raise NotImplementedError(msg)
        compression = compression_name(owner, compression)
        if compression == CompressionTypes.AUTO:
            compression = CompressionTypes.detect_compression_type(file_name_suffix or "")
        self.encoder = _JsonEncoder(owner, double_precision, force_ascii, date_format, date_unit, default_handler)
        self.lines = True if lines is None else bool(lines)
        self.encoding = check_encoding(owner, encoding)
        self.compression = compression
        self.write = WriteShardedFiles(
            _JsonSink(self.encoder, self.lines, self.encoding, compression),
            owner=owner,
            file_path_prefix=path,
            file_name_suffix=file_name_suffix,
            num_shards=num_shards or 0,
            shard_name_template=shard_name_template,
            min_shards=0,
        )

    def default_label(self) -> str:
        return "WriteToJson"

    def expand(self, pcoll: pvalue.PCollection) -> dict[str, pvalue.PCollection]:
        self.encoder.owner = self.write.owner = where(pcoll)
        return {"files_written": pcoll | "WriteFiles" >> self.write}
