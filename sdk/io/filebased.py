"""The machinery behind the file reads, built only from the SDK's primitives::

    Impulse | FlatMap(expand the glob) | spread over partitions | ParDo(read one file)

Files are read by Python on the executors, so paths must be local or on a file system that
every executor mounts at the same path. Writing is in ``filewrites.py``.

A reader yields records, or ``BadRecord`` for input it cannot parse. By default the first
bad record fails the run with ``BadRecordError``, naming the transform, the file and the
line; ``with_exception_handling()`` on a read transform routes them to a second output.

>>> BadRecord("in.jsonl", 3, "{oops", "Expecting property name").line
3
>>> Row = schema_row_type(("name", "age")); Row("ann", 3)
SchemaRow(name='ann', age=3)
"""

from __future__ import annotations

import collections
import copy
import glob
import lzma
import random
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.core import DoFn, FlatMap, GroupByKey, Impulse, Map, ParDo
from sparkbeam.errors import describe
from sparkbeam.io.filesystems import match_files, readable_path
from sparkbeam.ptransform import PTransform
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue

__all__ = [
    "BadRecord",
    "BadRecordError",
    "ExceptionHandling",
    "ReadMatchingFiles",
    "Spread",
    "schema_row_type",
    "where",
]



def where(pvalueish: pvalue.PValue) -> str:
    """``'Label' (applied at file:line)`` for the transform being expanded."""
    node = pvalueish.pipeline.current_transform()
    return describe(node.full_label, node.location)


# -- records -------------------------------------------------------------------------


@attrs.frozen
class BadRecord:
    """Input a reader could not turn into an element: the dead-letter output's elements.

    ``line`` is the 1-based line where the record starts (None when the whole file is
    unreadable); ``record`` is its raw text (None when there is none to show). A line whose
    bytes are not text in the file's encoding also keeps them as read in ``data`` (its
    ``record`` then shows them decoded with U+FFFD for each bad sequence).
    """

    file: str
    line: int | None
    record: str | None
    error: str
    data: bytes | None = None

    def describe(self) -> str:
        at = f"line {self.line} of {self.file}" if self.line is not None else self.file
        shown = ""
        if self.data is not None:
            raw = self.data if len(self.data) <= 200 else self.data[:197] + b"..."
            shown = f"; the line's bytes: {raw!r}"
        elif self.record is not None:
            text = self.record if len(self.record) <= 200 else self.record[:197] + "..."
            shown = f"; the record: {text!r}"
        return f"{at}: {self.error}{shown}"

    @classmethod
    def undecodable(cls, file: str, line: int | None, data: bytes, encoding: str = "utf-8") -> BadRecord:
        """The dead letter of a line that is not text in ``encoding`` (batch and stream reads
        report such a line alike).

        >>> BadRecord.undecodable("in.csv", 2, b"a\\xff").error
        "cannot decode as utf-8: 'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"
        """
        try:
            data.decode(encoding)
        except UnicodeDecodeError as error:
            problem = str(error)
        else:  # the caller's check and Python's disagree: keep the line rather than lose it
            problem = "not valid text"
        return cls(file, line, data.decode(encoding, "replace"), f"cannot decode as {encoding}: {problem}", data)


class BadRecordError(ValueError):
    """A read met input it cannot parse; the message names the transform, file and line."""


_ROW_TYPES: dict[tuple[str, ...], type] = {}


def schema_row_type(fields: Iterable[str]) -> type:
    """The NamedTuple type of schema'd rows with these fields, as Beam's CSV and JSON reads emit.

    Field names that are not Python identifiers are renamed ``_0``, ``_1``... (by position),
    as ``collections.namedtuple(rename=True)`` does. Instances pickle by field names and
    values, so they travel to any process that can import sparkbeam.
    """
    fields = tuple(fields)
    row_type = _ROW_TYPES.get(fields)
    if row_type is None:
        base = collections.namedtuple("SchemaRow", fields, rename=True)  # type: ignore[misc]
        row_type = type(
            "SchemaRow",
            (base,),
            {"__slots__": (), "__module__": __name__, "__reduce__": _reduce_row, "_source_fields": fields},
        )
        _ROW_TYPES[fields] = row_type
    return row_type


def _reduce_row(row: Any) -> tuple:
    return _make_row, (row._source_fields, tuple(row))


def _make_row(fields: tuple[str, ...], values: tuple) -> Any:
    return schema_row_type(fields)(*values)


def as_record_dict(owner: str, element: Any) -> dict:
    """A written element as a dict: dicts, NamedTuples and ``beam.Row`` are accepted."""
    if isinstance(element, dict):
        return element
    for method in ("_asdict", "as_dict"):
        convert = getattr(element, method, None)
        if callable(convert):
            return dict(convert())
    msg = (
        f"{owner}: cannot write {element!r}: elements must be dicts, NamedTuples or beam.Row "
        f"(records with named fields), not {type(element).__name__}"
    )
    raise TypeError(msg)


# -- reading -------------------------------------------------------------------------


class ExceptionHandling:
    """``with_exception_handling()`` for read transforms: bad records go to a second output.

    >>> good, bad = p | ReadFromJson("in.jsonl").with_exception_handling()   # doctest: +SKIP

    ``bad`` holds ``BadRecord(file, line, record, error)`` elements.
    """

    _dead_letter_tags: tuple[str, str] | None = None

    def with_exception_handling(
        self,
        main_tag: str = "good",
        dead_letter_tag: str = "bad",
        *,
        exc_class: Any = Exception,
        partial: bool = False,
        use_subprocess: bool = False,
        threshold: float = 1,
        threshold_windowing: Any = None,
        timeout: Any = None,
        error_handler: Any = None,
        on_failure_callback: Any = None,
    ) -> Any:
        owner = type(self).__name__
        unsupported = {
            "partial": partial is not False,
            "use_subprocess": use_subprocess is not False,
            "threshold": threshold != 1,
            "threshold_windowing": threshold_windowing is not None,
            "timeout": timeout is not None,
            "error_handler": error_handler is not None,
            "on_failure_callback": on_failure_callback is not None,
        }
        for name, given in unsupported.items():
            if given:
                msg = f"{owner}.with_exception_handling({name}=...) is not supported by sparkbeam"
                raise NotImplementedError(msg)
        if not (isinstance(main_tag, str) and isinstance(dead_letter_tag, str)) or main_tag == dead_letter_tag:
            msg = f"{owner}.with_exception_handling: main_tag and dead_letter_tag must be two different strings"
            raise ValueError(msg)
        handled = copy.copy(self)
        handled._dead_letter_tags = (main_tag, dead_letter_tag)
        return handled


class _MatchFiles:
    """A glob's files. No match fails, unless allowed for globs with wildcards (Beam's default
    for reading a PCollection of globs)."""

    def __init__(self, owner: str, allow_empty: bool) -> None:
        self.owner = owner
        self.allow_empty = allow_empty

    def __call__(self, pattern: Any) -> list[str]:
        if not isinstance(pattern, str):
            msg = f"{self.owner}: file patterns must be strings, got {pattern!r}"
            raise TypeError(msg)
        files = match_files(readable_path(self.owner, pattern))
        if not files and not (self.allow_empty and glob.has_magic(pattern)):
            msg = f"{self.owner}: no files match {pattern!r}"
            raise FileNotFoundError(msg)
        return files


# What a missing, truncated or corrupt (compressed) file raises while it is read.
_UNREADABLE = (OSError, EOFError, zlib.error, lzma.LZMAError)


class _ReadEachFile(DoFn):
    """Reads one file per element with ``reader(path)``; routes or raises on bad records."""

    def __init__(self, reader: Callable[[str], Iterable[Any]], owner: str, dead_letter_tag: str | None, hint: str) -> None:
        self.reader = reader
        self.owner = owner
        self.dead_letter_tag = dead_letter_tag
        self.hint = hint

    def default_label(self) -> str:
        return "ReadEachFile"

    def process(self, path: str) -> Iterator[Any]:
        try:
            for item in self.reader(path):
                if type(item) is BadRecord:
                    if self.dead_letter_tag is None:
                        msg = f"{self.owner}: bad record at {item.describe()}. {self.hint}"
                        raise BadRecordError(msg)
                    yield TaggedOutput(self.dead_letter_tag, item)
                else:
                    yield item
        except _UNREADABLE as error:
            if self.dead_letter_tag is None:
                msg = f"{self.owner}: cannot read {path}: {error}"
                raise OSError(msg) from error
            yield TaggedOutput(self.dead_letter_tag, BadRecord(path, None, None, f"{type(error).__name__}: {error}"))


class _AddSpreadKeys(DoFn):
    """Keys elements round-robin (from a random start) and keeps their timestamps."""

    def start_bundle(self) -> None:
        self.next_key = random.getrandbits(16)

    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam) -> Iterator[Any]:
        self.next_key += 1
        yield self.next_key, (element, timestamp)


class _RestoreTimestamps(DoFn):
    """Drops the spread keys; each element gets back its timestamp, in its window, as it
    was before the grouping (the pane is unknown again, as after Beam's Reshuffle)."""

    def process(self, keyed: tuple[Any, Iterable[tuple[Any, Any]]], window: Any = DoFn.WindowParam) -> Iterator[WindowedValue]:
        for element, timestamp in keyed[1]:
            yield WindowedValue(element, timestamp.micros, (window,), PANE_INFO_UNKNOWN)


class Spread(PTransform):
    """Redistributes elements over the runner's partitions, keeping their timestamps.

    Beam's ``Reshuffle`` for one purpose: so that the files a glob matches are read in
    parallel, not all by the one task that expanded the glob.
    """

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return (
            pcoll
            | "AddKeys" >> ParDo(_AddSpreadKeys())
            | "Group" >> GroupByKey()
            | "RemoveKeys" >> ParDo(_RestoreTimestamps())
        )


class ReadMatchingFiles(PTransform):
    """Reads every file a glob matches (``pattern``), or each glob of an input PCollection.

    ``reader(path)`` yields a file's elements (or ``BadRecord``). Applied to the pipeline
    it reads ``pattern``; applied to a PCollection of globs (``pattern=None``) it reads them
    all. ``dead_letter_tags=(main, bad)`` returns both outputs.
    """

    def __init__(
        self,
        pattern: str | None,
        reader: Callable[[str], Iterable[Any]],
        *,
        owner: str,
        hint: str,
        dead_letter_tags: tuple[str, str] | None = None,
        allow_empty: bool = False,
    ) -> None:
        super().__init__()
        self.pattern = pattern
        self.reader = reader
        self.owner = owner
        self.hint = hint
        self.dead_letter_tags = dead_letter_tags
        self.allow_empty = allow_empty

    def expand(self, pbegin: Any) -> Any:
        if self.pattern is not None:
            patterns = pbegin | "Impulse" >> Impulse() | "Pattern" >> Map(_constant, self.pattern)
        else:
            patterns = pbegin
        files = (
            patterns
            | "MatchFiles" >> FlatMap(_MatchFiles(self.owner, self.allow_empty))
            | "Spread" >> Spread()
        )
        if self.dead_letter_tags is None:
            return files | "ReadFiles" >> ParDo(_ReadEachFile(self.reader, self.owner, None, self.hint))
        main_tag, bad_tag = self.dead_letter_tags
        read = ParDo(_ReadEachFile(self.reader, self.owner, bad_tag, self.hint))
        return files | "ReadFiles" >> read.with_outputs(bad_tag, main=main_tag)


def _constant(unused: Any, value: Any) -> Any:
    return value


# pandas' own options (pandas 2.x), by the function Beam hands them to: an option of these
# that sparkbeam does not implement says so; a name that is none of them is a typo.
PANDAS_OPTIONS = {
    "read_csv": frozenset({
        "cache_dates", "chunksize", "comment", "compression", "converters", "date_format", "date_parser",
        "dayfirst", "decimal", "delim_whitespace", "delimiter", "dialect", "doublequote", "dtype",
        "dtype_backend", "encoding", "encoding_errors", "engine", "escapechar", "false_values", "float_precision",
        "header", "index_col", "infer_datetime_format", "iterator", "keep_date_col", "keep_default_na",
        "lineterminator", "low_memory", "memory_map", "na_filter", "na_values", "names", "nrows", "on_bad_lines",
        "parse_dates", "quotechar", "quoting", "sep", "skip_blank_lines", "skipfooter", "skipinitialspace",
        "skiprows", "storage_options", "thousands", "true_values", "usecols", "verbose",
    }),
    "to_csv": frozenset({
        "chunksize", "columns", "compression", "date_format", "decimal", "doublequote", "encoding", "errors",
        "escapechar", "float_format", "header", "index", "index_label", "lineterminator", "mode", "na_rep",
        "quotechar", "quoting", "sep", "storage_options",
    }),
    "read_json": frozenset({
        "chunksize", "compression", "convert_axes", "convert_dates", "date_unit", "dtype", "dtype_backend",
        "encoding", "encoding_errors", "engine", "keep_default_dates", "lines", "nrows", "orient",
        "precise_float", "storage_options", "typ",
    }),
    "to_json": frozenset({
        "compression", "date_format", "date_unit", "default_handler", "double_precision", "force_ascii",
        "indent", "index", "lines", "mode", "orient", "storage_options",
    }),
}


def refuse_pandas_options(owner: str, pandas_function: str, options: dict[str, Any]) -> None:
    """Keywords sparkbeam does not implement: TypeError for names pandas does not know either
    (a misspelt option must not run with the default), NotImplementedError for pandas' own."""
    if not options:
        return
    unknown = sorted(name for name in options if name not in PANDAS_OPTIONS[pandas_function])
    if unknown:
        msg = (
            f"{owner} got unexpected keyword argument(s) {', '.join(repr(name) for name in unknown)}: "
            f"neither sparkbeam's options nor pandas' {pandas_function}'s"
        )
        raise TypeError(msg)
    names = ", ".join(f"{name}=" for name in sorted(options))
    msg = f"{owner}: the pandas option(s) {names} are not supported by sparkbeam"
    raise NotImplementedError(msg)
