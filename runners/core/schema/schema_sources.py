"""Schema'd file reads a SQL plan may start from: when a backend's own reader reads them as
sparkbeam's read does.

A segment (``schema_segments.py``) may begin with ``ReadFromCsv`` instead of a ``Create``
of Rows. The read has already taken its columns and their kinds from the first file, as
Beam's pandas-based read does (``sdk/io/csvio.py``); here the planner decides, before the
run, whether a backend may split the same files into the same records and fields itself.
It may when nothing in the options or the bytes of the files could make the two readers
disagree:

- options: one-character separator, no escape character, doubled quotes, no initial-space
  skipping, UTF-8, no skipped rows, no compression, bad records failing the read
  (``on_bad_lines='error'``, no ``with_exception_handling``), no file-name column; every
  column a plain int, float, bool or str (not a column whose sample held missing values);
- bytes, scanned on the driver at C speed: no quote character at all (quoting rules are
  where CSV readers differ most), no ``\\r`` (line ends), no NUL, no blank-looking line made
  of spaces or control characters (Spark skips it, Python's csv reads one field), valid
  UTF-8 without a byte-order mark, and, with a header, the same header in every file and
  on no other line of it (the plan drops the header line by its text).

What depends on the values (a missing value, a value that does not fit its column, a line
with another number of fields) is checked by the plan itself as it reads, with the rules of
``csvio``: a record the general path would reject fails the run as the general path fails
it, naming the file and the record. ``CsvTable`` is what the backend needs to do so.
"""

from __future__ import annotations

import codecs
import csv
import re
from typing import Any

import attrs

from sparkbeam.io.csvio import ReadFromCsv
from sparkbeam.io.filebased import ReadMatchingFiles
from sparkbeam.io.filesystem import CompressionTypes
from sparkbeam.io.filesystems import match_files
from sparkbeam.io.parquetio import ReadFromParquet
from sparkbeam.pipeline import AppliedTransform

__all__ = ["CsvTable", "NotASegment", "ParquetTable", "is_schema_read", "read_table"]

_PLAIN_KINDS = ("int", "float", "bool", "str")
_SCAN_CHUNK = 1 << 24
# a line of spaces or control characters only (Spark's CSV reader skips such lines); the
# text searched starts with a newline (a literal first character makes the search fast)
_BLANK_LOOKING = re.compile(rb"\n[\x01-\x09\x0b-\x20]+(?=\n|\Z)")
_LINE = re.compile(rb"[^\n]+")  # the first non-empty line (without splitting the whole text)


class NotASegment(Exception):
    """Why a chain ending in an aggregation keeps the general path."""


@attrs.frozen
class CsvTable:
    """CSV files as the backend reads them: ``files`` (local paths); ``header``: the first
    line of each is a header, ``header_line`` (the same in every file, and no other line
    of the files is that line); ``width``: fields per record; ``positions``: each column's
    field index; the missing-value and bool spellings of the read (``csvio._Dialect``)."""

    label: str
    files: tuple[str, ...]
    header: bool
    header_line: str | None
    separator: str
    width: int
    positions: tuple[tuple[str, int], ...]
    na_values: tuple[str, ...]
    true_values: tuple[str, ...]
    false_values: tuple[str, ...]

    def position(self, column: str) -> int:
        return dict(self.positions)[column]

    def describe(self) -> str:
        shown = self.files[0] if len(self.files) == 1 else f"{len(self.files)} files"
        return f"CSV read by the plan ({shown})"


@attrs.frozen
class ParquetTable:
    """Parquet files the backend reads with its own reader: ``files`` (local paths), all of
    one schema, whose types (ints, floats, strings, bools) both readers read alike."""

    label: str
    files: tuple[str, ...]

    def describe(self) -> str:
        shown = self.files[0] if len(self.files) == 1 else f"{len(self.files)} files"
        return f"Parquet read by the plan ({shown})"


def is_schema_read(transform: Any) -> bool:
    """Whether a transform is a schema'd read a segment may start from."""
    return isinstance(transform, ReadFromCsv) or type(transform) is ReadFromParquet


def read_table(node: AppliedTransform) -> tuple[tuple[tuple[str, str], ...], CsvTable | ParquetTable]:
    """The columns (name, kind) of a schema'd read and how the plan reads its files, or
    ``NotASegment`` naming what keeps the read on the general path."""
    if isinstance(node.transform, ReadFromCsv):
        return csv_table(node)
    return parquet_table(node)


def parquet_table(node: AppliedTransform) -> tuple[tuple[tuple[str, str], ...], ParquetTable]:
    """``ReadFromParquet(..., as_rows=True)``: the first file's columns, when every file
    has its schema and each column is of a type both readers read alike (a missing value
    is None in both, checked by the plan as it reads)."""
    import pyarrow.parquet as pq

    read: ReadFromParquet = node.transform
    label = node.full_label
    reader = _file_reader(node)
    if not read.as_rows:
        msg = f"'{label}' emits dicts (as_rows=True emits the rows a schema'd aggregation reads by name)"
        raise NotASegment(msg)
    if read._dead_letter_tags is not None:  # ExceptionHandling's own state
        msg = f"'{label}' routes unreadable files to a second output (with_exception_handling)"
        raise NotASegment(msg)
    fields = tuple(reader.row_fields)
    if read.columns is not None and tuple(read.columns) != fields:
        msg = f"'{label}' reads the columns {read.columns} (the plan reads whole columns in the files' order)"
        raise NotASegment(msg)
    files = tuple(match_files(read.file_pattern or ""))
    if not files or any("://" in path for path in files):
        msg = f"'{label}' reads {read.file_pattern!r}, not local files"
        raise NotASegment(msg)
    first = pq.read_schema(files[0]).remove_metadata()
    for path in files[1:]:
        if pq.read_schema(path).remove_metadata() != first:
            msg = f"'{label}': {path} has another schema than {files[0]}"
            raise NotASegment(msg)
    columns = tuple((field, _parquet_kind(label, field, first.field(field).type)) for field in fields)
    return columns, ParquetTable(label=label, files=files)


def _parquet_kind(label: str, name: str, arrow_type: Any) -> str:
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_integer(arrow_type) and not pa.types.is_uint64(arrow_type):
        return "int"
    if pa.types.is_float32(arrow_type) or pa.types.is_float64(arrow_type):
        return "float"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "str"
    msg = f"'{label}': the column {name!r} is {arrow_type} (SQL plans read ints, floats, strings and bools)"
    raise NotASegment(msg)


def csv_table(node: AppliedTransform) -> tuple[tuple[tuple[str, str], ...], CsvTable]:
    """The columns (name, kind) of a ``ReadFromCsv`` and how the plan reads its files, or
    ``NotASegment`` naming what keeps the read on the general path."""
    read: ReadFromCsv = node.transform
    label = node.full_label
    dialect = read.dialect
    reader = _file_reader(node)
    declined = _declined_option(read, dialect, reader)
    if declined is not None:
        msg = f"'{label}' {declined}"
        raise NotASegment(msg)
    for field, kind in zip(reader.fields, reader.kinds):
        if kind not in _PLAIN_KINDS:
            msg = f"'{label}': the column {field!r} had missing values in the sampled records (kind {kind})"
            raise NotASegment(msg)
    files = tuple(match_files(read.path))
    if not files or any("://" in path for path in files):
        msg = f"'{label}' reads {read.path!r}, not local files"
        raise NotASegment(msg)
    headers = [_scan(label, path, dialect.quotechar, header=reader.header) for path in files]
    if reader.header:
        first = headers[0]
        for path, header in zip(files, headers):
            if header != first:
                msg = f"'{label}': {path} has another header than {files[0]} ({header!r} against {first!r})"
                raise NotASegment(msg)
        width = len(first.split(dialect.delimiter)) if first is not None else len(reader.names or ())
        columns = reader.names or tuple(first.split(dialect.delimiter)) if first is not None else ()
    else:
        columns = reader.names or ()
        width = len(columns)
    if len(columns) != width:
        msg = f"'{label}': names= gives {len(columns)} columns for files of {width}"
        raise NotASegment(msg)
    table = CsvTable(
        label=label,
        files=files,
        header=reader.header,
        header_line=headers[0] if reader.header else None,
        separator=dialect.delimiter,
        width=width,
        positions=tuple((field, columns.index(field)) for field in reader.fields),
        na_values=tuple(sorted(dialect.na_values)),
        true_values=tuple(sorted(dialect.true_values)),
        false_values=tuple(sorted(dialect.false_values)),
    )
    return tuple(zip(reader.fields, reader.kinds)), table


def _file_reader(node: AppliedTransform) -> Any:
    for part in node.walk():
        if isinstance(part.transform, ReadMatchingFiles):
            return part.transform.reader
    msg = f"'{node.full_label}' has no file read inside"  # not reached: ReadFromCsv expands to one
    raise NotASegment(msg)


def _declined_option(read: ReadFromCsv, dialect: Any, reader: Any) -> str | None:
    """The option of the read that the plan's reader could honour differently, if any."""
    if read._dead_letter_tags is not None:  # ExceptionHandling's own state
        return "routes bad records to a second output (with_exception_handling)"
    checks = (
        (reader.on_bad_lines != "error", f"has on_bad_lines={reader.on_bad_lines!r}"),
        (reader.filename_column is not None, "adds a file-name column"),
        (dialect.delimiter in ("\n", "\r", dialect.quotechar), f"separates fields with {dialect.delimiter!r}"),
        (dialect.quoting not in (csv.QUOTE_MINIMAL,), "sets quoting="),
        (dialect.escapechar is not None or not dialect.doublequote, "sets an escape character or doublequote=False"),
        (dialect.skipinitialspace, "sets skipinitialspace=True"),
        (dialect.skiprows, "skips rows (skiprows=)"),
        (codecs.lookup(dialect.encoding).name != "utf-8", f"reads {dialect.encoding}, not UTF-8"),
        (dialect.compression not in (CompressionTypes.AUTO, CompressionTypes.UNCOMPRESSED), "reads compressed files"),
    )
    return next((reason for declined, reason in checks if declined), None)


def _scan(label: str, path: str, quotechar: str, *, header: bool) -> str | None:
    """The file's first line (its header, when it has one), or ``NotASegment`` if its bytes
    hold what the plan's reader could read differently. With a ``header``, no other line
    may be the header line (the plan drops the header by its text)."""
    if CompressionTypes.detect_compression_type(path) != CompressionTypes.UNCOMPRESSED:
        msg = f"'{label}' reads the compressed file {path}"
        raise NotASegment(msg)
    quote = quotechar.encode("utf-8")
    decoder = codecs.getincrementaldecoder("utf-8")()
    first_line: bytes | None = None
    header_lines = 0  # lines equal to the first (with a header)
    tail = b""  # the last, unfinished line of the previous chunk
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(_SCAN_CHUNK)
            try:
                # ASCII is UTF-8 (and a check at memory speed) when no sequence is pending.
                if not (chunk.isascii() and not decoder.getstate()[0]):
                    decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError:
                msg = f"'{label}': {path} is not valid UTF-8"
                raise NotASegment(msg) from None
            if not chunk:
                break
            if handle.tell() == len(chunk) and chunk.startswith(b"\xef\xbb\xbf"):
                msg = f"'{label}': {path} starts with a byte-order mark"
                raise NotASegment(msg)
            for byte, what in ((quote, "quote characters"), (b"\r", "carriage returns"), (b"\x00", "NUL bytes")):
                if byte in chunk:
                    msg = f"'{label}': {path} holds {what} (CSV readers disagree on quoting and line ends)"
                    raise NotASegment(msg)
            text = tail + chunk
            cut = text.rfind(b"\n")
            whole, tail = (text[: cut + 1], text[cut + 1 :]) if cut >= 0 else (b"", text)
            if _BLANK_LOOKING.search(b"\n" + whole):
                msg = f"'{label}': {path} has a line of spaces only (Spark skips it, Python's csv reads a field)"
                raise NotASegment(msg)
            if first_line is None:
                found = _LINE.search(whole)
                first_line = found.group() if found else None
            if header and first_line is not None:
                header_lines += _lines_equal_to(b"\n" + whole, first_line)
                _check_one_header(label, path, header_lines)
    if tail and _BLANK_LOOKING.search(b"\n" + tail):
        msg = f"'{label}': {path} has a line of spaces only (Spark skips it, Python's csv reads a field)"
        raise NotASegment(msg)
    if first_line is None:
        first_line = tail or None  # a file of one line without its newline
    if header and tail and tail == first_line:
        _check_one_header(label, path, header_lines + 1)
    return None if first_line is None else first_line.decode("utf-8")


def _lines_equal_to(text: bytes, line: bytes) -> int:
    """How many lines of ``text`` (starting and ending with a newline) are ``line``, up to two."""
    needle = b"\n" + line + b"\n"
    count, at = 0, text.find(needle)
    while at >= 0 and count < 2:
        count += 1
        at = text.find(needle, at + len(needle) - 1)  # the next line starts at this newline
    return count


def _check_one_header(label: str, path: str, header_lines: int) -> None:
    if header_lines > 1:
        msg = f"'{label}': {path} repeats its header line in its data (the plan drops the header by its text)"
        raise NotASegment(msg)
