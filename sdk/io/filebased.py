"""The machinery behind the file transforms, built only from the SDK's primitives.

Reading (``ReadMatchingFiles``)::

    Impulse | FlatMap(expand the glob) | spread over partitions | ParDo(read one file)

Writing (``WriteShardedFiles``, Beam's WriteFiles pattern)::

    ParDo(write one temporary shard per bundle, or per key after GroupByKey for num_shards)
      | GroupByKey onto one key | ParDo(rename every temporary shard to its final name)

Files are read and written by Python on the executors, so paths must be local or on a
file system that every executor mounts at the same path. Writes are atomic: shards go to a
hidden ``.sparkbeam-temp-*`` directory beside the output and are renamed to their final
names only once every shard is written, so a failed run leaves nothing under the final
names (the hidden directory may remain after a failure, as Beam's temp directories do).
Unbounded input is written once per step instead, a committed directory per step
(``sparkbeam.io.stepfiles``); bounded input is written as above, in any run.

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
import contextlib
import copy
import glob
import lzma
import os
import random
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.core import DoFn, FlatMap, Flatten, GroupByKey, Impulse, Map, ParDo, WindowInto
from sparkbeam.errors import describe
from sparkbeam.io import commits
from sparkbeam.io.filesystem import local_path, match_files, readable_path
from sparkbeam.ptransform import PTransform
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow, GlobalWindows

__all__ = [
    "BadRecord",
    "BadRecordError",
    "ExceptionHandling",
    "FileSink",
    "ReadMatchingFiles",
    "Spread",
    "WriteShardedFiles",
    "schema_row_type",
    "shard_file_name",
    "where",
]

DEFAULT_SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"


def where(pvalueish: pvalue.PValue) -> str:
    """``'Label' (applied at file:line)`` for the transform being expanded."""
    node = pvalueish.pipeline.current_transform()
    return describe(node.full_label, node.location)


# -- records -------------------------------------------------------------------------


@attrs.frozen
class BadRecord:
    """Input a reader could not turn into an element: the dead-letter output's elements.

    ``line`` is the 1-based line where the record starts (None when the whole file is
    unreadable); ``record`` is its raw text (None when there is none to show).
    """

    file: str
    line: int | None
    record: str | None
    error: str

    def describe(self) -> str:
        at = f"line {self.line} of {self.file}" if self.line is not None else self.file
        shown = ""
        if self.record is not None:
            text = self.record if len(self.record) <= 200 else self.record[:197] + "..."
            shown = f"; the record: {text!r}"
        return f"{at}: {self.error}{shown}"


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


# -- writing -------------------------------------------------------------------------


class FileSink:
    """Writes one file: ``open(path)`` returns a writer with ``write(element)`` and ``close()``.

    Subclasses must pickle (they travel to the executors).
    """

    def open(self, path: str) -> Any:
        raise NotImplementedError


def check_shard_name_template(owner: str, template: str | None) -> str:
    """Beam's default (``-SSSSS-of-NNNNN``) for None; other templates need S and N, or ''."""
    if template is None:
        return DEFAULT_SHARD_NAME_TEMPLATE
    if not isinstance(template, str):
        msg = f"{owner}: shard_name_template must be a string, got {template!r}"
        raise TypeError(msg)
    if "W" in template or "V" in template:
        msg = f"{owner}: windowed shard names (W or V in shard_name_template={template!r}) are not supported by sparkbeam"
        raise NotImplementedError(msg)
    if template and ("S" not in template or "N" not in template):
        msg = f"{owner}: shard_name_template needs S (shard) and N (count) placeholders, or '', got {template!r}"
        raise ValueError(msg)
    return template


def shard_file_name(prefix: str, template: str, suffix: str, shard: int, num_shards: int) -> str:
    """A shard's file name: each run of S (shard) and N (count) in the template, zero-padded.

    >>> shard_file_name("out/part", "-SSSSS-of-NNNNN", ".csv", 2, 10)
    'out/part-00002-of-00010.csv'
    """
    name = template
    for letter, number in (("S", shard), ("N", num_shards)):
        start = name.find(letter)
        if start < 0:
            continue
        end = start
        while end < len(name) and name[end] == letter:
            end += 1
        name = name[:start] + str(number).zfill(end - start) + name[end:]
    return f"{prefix}{name}{suffix}"


@attrs.frozen
class _Written:
    """A finished temporary shard: its path, its shard number (fixed sharding) and size."""

    temp_path: str
    shard: int | None
    records: int


_GATHER_KEY = "sparkbeam-written-files"
_WRITE_STARTED = "sparkbeam-write-started"


class _WriteBundles(DoFn):
    """Writes each bundle's elements to a new temporary file; reports it at bundle end."""

    def __init__(self, sink: FileSink, temp_dir: str) -> None:
        self.sink = sink
        self.temp_dir = temp_dir

    def default_label(self) -> str:
        return "WriteBundles"

    def start_bundle(self) -> None:
        self.writer: Any = None
        self.path = ""
        self.records = 0

    def process(self, element: Any) -> None:
        if self.writer is None:
            os.makedirs(self.temp_dir, exist_ok=True)
            self.path = os.path.join(self.temp_dir, uuid.uuid4().hex)
            self.writer = self.sink.open(self.path)
        self.writer.write(element)
        self.records += 1

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self.writer is None:
            return
        self.writer.close()
        self.writer = None
        window = GlobalWindow()
        written = _Written(self.path, None, self.records)
        yield WindowedValue(written, window.max_timestamp().micros, (window,))

    def teardown(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:  # a failed bundle: release the handle, keep nothing
            # The bundle already failed: its own error is the one to report.
            with contextlib.suppress(Exception):
                writer.close()


class _RoundRobinShards(DoFn):
    """Keys elements by shard number, round-robin from a random start (as Beam does)."""

    def __init__(self, num_shards: int) -> None:
        self.num_shards = num_shards

    def start_bundle(self) -> None:
        self.next_shard = random.randrange(self.num_shards)

    def process(self, element: Any) -> Iterator[tuple[int, Any]]:
        yield self.next_shard, element
        self.next_shard = (self.next_shard + 1) % self.num_shards


class _WriteKeyedShards(DoFn):
    """Writes one grouped shard ``(shard, elements)`` to a temporary file."""

    def __init__(self, sink: FileSink, temp_dir: str) -> None:
        self.sink = sink
        self.temp_dir = temp_dir

    def default_label(self) -> str:
        return "WriteShards"

    def process(self, keyed: tuple[int, Iterable[Any]]) -> Iterator[_Written]:
        shard, elements = keyed
        os.makedirs(self.temp_dir, exist_ok=True)
        path = os.path.join(self.temp_dir, uuid.uuid4().hex)
        writer = self.sink.open(path)
        records = 0
        try:
            for element in elements:
                writer.write(element)
                records += 1
        finally:
            writer.close()
        yield _Written(path, shard, records)


def _under_one_key(value: Any) -> tuple[str, Any]:
    return _GATHER_KEY, value


class _Finalize:
    """Renames every temporary shard to its final name, then removes the temporary directory.

    Idempotent: a retried finalize skips shards already renamed.
    """

    def __init__(self, sink: FileSink, prefix: str, template: str, suffix: str, num_shards: int, min_shards: int, temp_dir: str) -> None:
        self.sink = sink
        self.prefix = prefix
        self.template = template
        self.suffix = suffix
        self.num_shards = num_shards
        self.min_shards = min_shards
        self.temp_dir = temp_dir

    def __call__(self, keyed: tuple[str, Iterable[Any]]) -> list[str]:
        written = [item for item in keyed[1] if isinstance(item, _Written)]
        if self.num_shards:
            by_shard = {item.shard: item for item in written if item.shard is not None}
            total = self.num_shards
            wanted = range(total) if self.min_shards else sorted(by_shard)
            shards: list[tuple[int, _Written | None]] = [(shard, by_shard.get(shard)) for shard in wanted]
        else:
            total = max(len(written), self.min_shards)
            ordered = sorted(written, key=lambda item: item.temp_path)
            shards = [(shard, ordered[shard] if shard < len(ordered) else None) for shard in range(total)]
        finals = []
        for shard, item in shards:
            final = shard_file_name(self.prefix, self.template, self.suffix, shard, total)
            if item is None:  # pad with empty shards, as Beam's file sinks do
                os.makedirs(self.temp_dir, exist_ok=True)
                temp_path = os.path.join(self.temp_dir, uuid.uuid4().hex)
                self.sink.open(temp_path).close()
            else:
                temp_path = item.temp_path
            if os.path.exists(temp_path):
                os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
                commits.commit(temp_path, final)
            elif not os.path.exists(final):
                msg = f"the temporary shard {temp_path} for {final} has disappeared; was the temporary directory removed while the pipeline ran?"
                raise FileNotFoundError(msg)
            finals.append(final)
        commits.remove(self.temp_dir)
        return finals


class WriteShardedFiles(PTransform):
    """Writes a PCollection to shards ``prefix + template + suffix``, atomically.

    ``num_shards=0`` writes one shard per bundle (the runner's partitions); a positive
    number spreads elements round-robin over that many shards through a GroupByKey. An
    empty template ('') writes exactly one file named ``prefix + suffix``. ``min_shards``
    shards are written even for empty input (Beam's file sinks write one empty shard; its
    ``fileio`` writes none). The output is the PCollection of the final file names.

    Unbounded input (a streaming run) is written step by step instead, each step with
    elements to a directory of its own, committed atomically and replaced if the step is
    run again: ``prefix-step-00000042/basename(prefix)-00000-of-00002 suffix`` (see
    ``sparkbeam.io.stepfiles``). Steps with no elements write nothing (``min_shards`` does
    not apply) and the output PCollection stays empty. Bounded input is written as above.
    """

    def __init__(
        self,
        sink: FileSink,
        *,
        owner: str,
        file_path_prefix: str,
        file_name_suffix: str = "",
        num_shards: int = 0,
        shard_name_template: str | None = None,
        min_shards: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(file_path_prefix, str) or not file_path_prefix:
            msg = f"{owner}: the output path must be a non-empty string, got {file_path_prefix!r}"
            raise ValueError(msg)
        if not isinstance(num_shards, int) or isinstance(num_shards, bool) or num_shards < 0:
            msg = f"{owner}: num_shards must be a non-negative integer (0 lets the runner choose), got {num_shards!r}"
            raise ValueError(msg)
        self.template = check_shard_name_template(owner, shard_name_template)
        self.sink = sink
        self.owner = owner
        self.prefix = os.path.abspath(local_path(owner, file_path_prefix))
        self.suffix = file_name_suffix or ""
        self.num_shards = 1 if self.template == "" else num_shards
        self.min_shards = min_shards

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{self.owner} writes a PCollection, not {pcoll!r}"
            raise TypeError(msg)
        if not pcoll.is_bounded:
            # stepfiles builds on this module, so it is imported only when needed.
            from sparkbeam.io.stepfiles import StepFiles, WriteFilesPerStep

            files = StepFiles(self.sink, self.prefix, self.template, self.suffix, self.num_shards)
            return pcoll | "WriteEachStep" >> WriteFilesPerStep(files)
        temp_dir = commits.temporary_beside(self.prefix)
        in_global = pcoll | "InGlobalWindow" >> WindowInto(GlobalWindows())
        if self.num_shards:
            written = (
                in_global
                | "AssignShards" >> ParDo(_RoundRobinShards(self.num_shards))
                | "GroupShards" >> GroupByKey()
                | "WriteShards" >> ParDo(_WriteKeyedShards(self.sink, temp_dir))
            )
        else:
            written = in_global | "WriteBundles" >> ParDo(_WriteBundles(self.sink, temp_dir))
        # One element even for empty input, so the finalize step always runs.
        started = pcoll.pipeline | "Started" >> Impulse() | "MarkStarted" >> Map(_constant, _WRITE_STARTED)
        finalize = _Finalize(
            self.sink, self.prefix, self.template, self.suffix, self.num_shards, self.min_shards, temp_dir
        )
        return (
            (written, started)
            | "Gather" >> Flatten()
            | "OneKey" >> Map(_under_one_key)
            | "GatherWritten" >> GroupByKey()
            | "Finalize" >> FlatMap(finalize)
        )


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
