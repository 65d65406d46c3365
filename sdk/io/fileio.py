"""Beam's ``fileio``: files as elements. Match globs, read matched files whole, write
elements to files named per destination, window and shard.

>>> files = p | MatchFiles("logs/*.json") | ReadMatches()               # doctest: +SKIP
>>> texts = files | Map(lambda f: (f.metadata.path, f.read_utf8()))      # doctest: +SKIP
>>> words | WriteToFiles(path="out/", shards=2)                         # doctest: +SKIP

- ``MatchFiles(pattern)`` / ``MatchAll()``: ``FileMetadata`` (path, size, last update) of
  each file a pattern matches, through ``FileSystems.match``; ``EmptyMatchTreatment``
  decides whether a pattern that matches nothing is an error.
- ``ReadMatches()``: a ``ReadableFile`` per match (``open()``, ``read()``, ``read_utf8()``),
  opened where the element is processed, on a Spark executor.
- ``WriteToFiles(path, file_naming=, destination=, sink=, shards=)``: each bundle writes
  a temporary file per destination and window; once a destination's window is complete
  its files are renamed to their final names (``file_naming``) under ``path``. Bounded
  and unbounded input alike: in a stream, a window's files appear when its pane fires
  (default naming puts the window's bounds in the name). The output is a ``FileResult``
  per file written. Bounded input on a URL only the runner's driver reaches (``hdfs://``,
  ``s3a://``...) is written through the driver instead (``fileio_remote``): the same
  files, no ``FileResult``.
"""

from __future__ import annotations

import collections
import contextlib
import random
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Any

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.core import Create, DoFn, Flatten, GroupByKey, Map, ParDo
from sparkbeam.io import filesystem
from sparkbeam.io.fileio_remote import WriteFilesThroughDriver
from sparkbeam.io.filesystem import BeamIOError, CompressionTypes
from sparkbeam.io.filesystems import FileSystems, readable_path
from sparkbeam.ptransform import PTransform
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow

__all__ = [
    "EmptyMatchTreatment",
    "FileResult",
    "FileSink",
    "MatchAll",
    "MatchContinuously",
    "MatchFiles",
    "ReadMatches",
    "ReadableFile",
    "TextSink",
    "WriteToFiles",
    "default_file_naming",
    "destination_prefix_naming",
    "prefix_naming",
    "single_file_naming",
]

#: What a sink asks ``FileSystems.create`` for (Beam's ``fileio.FileMetadata``, not the
#: match result ``filesystem.FileMetadata``).
FileMetadata = collections.namedtuple("FileMetadata", "mime_type compression_type")


class EmptyMatchTreatment:
    """Whether a pattern that matches no file is an error: ``ALLOW``, ``DISALLOW``, or
    ``ALLOW_IF_WILDCARD`` (allowed only for a pattern with ``*``)."""

    ALLOW = "ALLOW"
    DISALLOW = "DISALLOW"
    ALLOW_IF_WILDCARD = "ALLOW_IF_WILDCARD"

    @staticmethod
    def allow_empty_match(pattern: str, setting: str) -> bool:
        if setting == EmptyMatchTreatment.ALLOW:
            return True
        if setting == EmptyMatchTreatment.ALLOW_IF_WILDCARD:
            return "*" in pattern
        if setting == EmptyMatchTreatment.DISALLOW:
            return False
        msg = f"empty_match_treatment must be one of EmptyMatchTreatment.ALLOW, DISALLOW, ALLOW_IF_WILDCARD; got {setting!r}"
        raise ValueError(msg)


def _check_treatment(owner: str, setting: Any) -> str:
    if setting not in (EmptyMatchTreatment.ALLOW, EmptyMatchTreatment.DISALLOW, EmptyMatchTreatment.ALLOW_IF_WILDCARD):
        msg = f"{owner}: empty_match_treatment must be one of EmptyMatchTreatment.ALLOW, DISALLOW, ALLOW_IF_WILDCARD; got {setting!r}"
        raise ValueError(msg)
    return str(setting)


# -- matching ---------------------------------------------------------------------------------


class _MatchAllFn(DoFn):
    def __init__(self, empty_match_treatment: str) -> None:
        self.empty_match_treatment = empty_match_treatment

    def process(self, file_pattern: str) -> list[filesystem.FileMetadata]:
        if not isinstance(file_pattern, str):
            msg = f"MatchAll: file patterns must be strings, got {file_pattern!r}"
            raise TypeError(msg)
        (result,) = FileSystems.match([file_pattern])
        if not result.metadata_list and not EmptyMatchTreatment.allow_empty_match(file_pattern, self.empty_match_treatment):
            msg = f"Empty match for pattern {file_pattern}. Disallowed."
            raise BeamIOError(msg)
        return result.metadata_list


class MatchAll(PTransform):
    """``FileMetadata`` of every file each pattern of the input matches (``FileSystems.match``)."""

    def __init__(self, empty_match_treatment: str = EmptyMatchTreatment.ALLOW, label: str | None = None) -> None:
        super().__init__(label)
        self.empty_match_treatment = _check_treatment("MatchAll", empty_match_treatment)

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | ParDo(_MatchAllFn(self.empty_match_treatment))


class MatchFiles(PTransform):
    """``FileMetadata`` of every file ``file_pattern`` matches; applied to the pipeline."""

    def __init__(
        self,
        file_pattern: str,
        empty_match_treatment: str = EmptyMatchTreatment.ALLOW_IF_WILDCARD,
        label: str | None = None,
    ) -> None:
        super().__init__(label)
        if not isinstance(file_pattern, str) or not file_pattern:
            msg = f"MatchFiles: file_pattern must be a non-empty path or glob, got {file_pattern!r}"
            raise ValueError(msg)
        readable_path("MatchFiles", file_pattern)
        self.file_pattern = file_pattern
        self.empty_match_treatment = _check_treatment("MatchFiles", empty_match_treatment)

    def expand(self, pbegin: Any) -> pvalue.PCollection:
        return pbegin.pipeline | Create([self.file_pattern]) | MatchAll(empty_match_treatment=self.empty_match_treatment)


class MatchContinuously(PTransform):
    """Beam's polling match; not supported by sparkbeam (it raises when constructed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        msg = (
            "fileio.MatchContinuously is not supported by sparkbeam (Beam's Watch and PeriodicImpulse are "
            "not implemented); read a growing folder with sparkbeam.io.ReadFromTextStream (or the CSV, JSON "
            "and Parquet stream reads), which Spark Structured Streaming watches"
        )
        raise NotImplementedError(msg)


# -- reading ----------------------------------------------------------------------------------


class ReadableFile:
    """A matched file: ``metadata`` (``FileMetadata``) and ways to read it."""

    def __init__(self, metadata: filesystem.FileMetadata, compression: str | None = None) -> None:
        self.metadata = metadata
        self._compression = compression

    def open(self, mime_type: str = "text/plain", compression_type: str | None = None) -> IO[bytes]:
        """A binary stream of the file, decompressed as ``compression_type`` (or the
        ``ReadMatches`` setting, or the file's extension) says."""
        compression = compression_type or self._compression or CompressionTypes.AUTO
        return FileSystems.open(self.metadata.path, mime_type=mime_type, compression_type=compression)

    def read(self, mime_type: str = "application/octet-stream") -> bytes:
        with self.open(mime_type) as handle:
            return handle.read()

    def read_utf8(self) -> str:
        return self.read().decode("utf-8")

    def __repr__(self) -> str:
        return f"ReadableFile({self.metadata!r})"


class _ReadMatchesFn(DoFn):
    def __init__(self, compression: str | None, skip_directories: bool) -> None:
        self.compression = compression
        self.skip_directories = skip_directories

    def process(self, file_metadata: Any) -> Iterator[ReadableFile]:
        if isinstance(file_metadata, str):
            metadata = filesystem.FileMetadata(file_metadata, 0)
        elif isinstance(file_metadata, filesystem.FileMetadata):
            metadata = file_metadata
        else:
            msg = f"ReadMatches reads FileMetadata (from MatchFiles or MatchAll) or paths, got {file_metadata!r}"
            raise TypeError(msg)
        path = metadata.path
        is_directory = path.endswith(("/", "\\")) or FileSystems.get_filesystem(path).is_directory(path)
        if is_directory:
            if self.skip_directories:
                return
            msg = f"Directories are not allowed in ReadMatches transform. Found {path}."
            raise BeamIOError(msg)
        yield ReadableFile(metadata, self.compression)


class ReadMatches(PTransform):
    """A ``ReadableFile`` per ``FileMetadata`` (or path) of the input; directories are
    skipped (``skip_directories=False``: an error)."""

    def __init__(self, compression: str | None = None, skip_directories: bool = True, label: str | None = None) -> None:
        super().__init__(label)
        if compression is not None:
            compression = filesystem.compression_name("ReadMatches", compression)
        self.compression = compression
        self.skip_directories = skip_directories

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | ParDo(_ReadMatchesFn(self.compression, self.skip_directories))


# -- writing ----------------------------------------------------------------------------------


class FileSink:
    """How ``WriteToFiles`` writes elements into one file: ``open(fh)`` with the open binary
    stream, ``write(record)`` per element, ``flush()`` before the stream is closed (the
    sink does not close it). ``create_metadata`` says how to create the file."""

    def create_metadata(self, destination: Any, full_file_name: str) -> FileMetadata:
        return FileMetadata(mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO)

    def open(self, fh: IO[bytes]) -> None:
        raise NotImplementedError

    def write(self, record: Any) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError


class TextSink(FileSink):
    """Each element (a str) as a UTF-8 line."""

    def open(self, fh: IO[bytes]) -> None:
        self._fh = fh

    def write(self, record: Any) -> None:
        self._fh.write(record.encode("utf8"))
        self._fh.write(b"\n")

    def flush(self) -> None:
        self._fh.flush()


def _format_shard(window: Any, pane: Any, shard_index: Any, total_shards: Any, compression: Any, prefix: str, suffix: Any) -> str:
    """Beam's default file name: ``prefix-start-end-SSSSS-of-NNNNN suffix compression``,
    with the window's bounds left out for the global window."""
    # Beam numbers a shard only when both the index and the count are known (else 0 of 0).
    known = shard_index is not None and total_shards is not None
    name = str(prefix)
    if window != GlobalWindow():
        name += f"-{window.start.to_utc_datetime().isoformat()}-{window.end.to_utc_datetime().isoformat()}"
    if shard_index is not None:
        name += f"-{int(shard_index) if known else 0:05d}"
    if total_shards is not None:
        name += f"-of-{int(total_shards) if known else 0:05d}"
    if suffix:
        name += suffix
    if compression:
        name += f".{compression}"
    return name


FileNaming = Callable[[Any, Any, int, int, Any, Any], str]


def destination_prefix_naming(suffix: str | None = None) -> FileNaming:
    """Files named after their destination: ``destination-SSSSS-of-NNNNN suffix``."""

    def naming(window: Any, pane: Any, shard_index: Any, total_shards: Any, compression: Any, destination: Any) -> str:
        return _format_shard(window, pane, shard_index, total_shards, compression, str(destination), suffix)

    return naming


def default_file_naming(prefix: str, suffix: str | None = None) -> FileNaming:
    """``prefix[-start-end]-SSSSS-of-NNNNN suffix`` (the window's bounds unless global)."""

    def naming(window: Any, pane: Any, shard_index: Any, total_shards: Any, compression: Any, destination: Any) -> str:
        return _format_shard(window, pane, shard_index, total_shards, compression, prefix, suffix)

    return naming


def prefix_naming(prefix: str) -> FileNaming:
    return default_file_naming(prefix)


def single_file_naming(prefix: str, suffix: str | None = None) -> FileNaming:
    """One file per window, named ``prefix[-start-end] suffix``; more shards are an error."""

    def naming(window: Any, pane: Any, shard_index: Any, total_shards: Any, compression: Any, destination: Any) -> str:
        if shard_index not in (0, None) or total_shards not in (1, None):
            msg = (
                f"single_file_naming({prefix!r}) names one file per window, but the window has "
                f"{total_shards} files; write with shards=1 and fewer writers, or use default_file_naming"
            )
            raise ValueError(msg)
        return _format_shard(window, pane, None, None, compression, prefix, suffix)

    return naming


class FileResult(collections.namedtuple("FileResult", ["file_name", "shard_index", "total_shards", "window", "pane", "destination"])):
    """A file ``WriteToFiles`` wrote: its name, shard, shard count, window, pane, destination."""


def _create_writer(base_path: str, writer_key: tuple[Any, Any], sink: FileSink) -> tuple[str, IO[bytes]]:
    with contextlib.suppress(OSError):  # it exists already
        FileSystems.mkdirs(base_path)
    # The destination's and window's hash first, so that orphaned files can be found later.
    name = f"{abs(hash(writer_key))}_{uuid.uuid4()}"
    full_name = FileSystems.join(base_path, name)
    metadata = sink.create_metadata(writer_key[0], full_name)
    return full_name, FileSystems.create(full_name, **metadata._asdict())


def _timestamp_of(window: Any) -> int:
    # Beam stamps a written file at its window's start (the global window's is the minimum).
    return int(window.start.micros)


class _WriteUnshardedRecordsFn(DoFn):
    """Writes each bundle's records to one temporary file per (destination, window); records
    for more than ``max_writers_per_bundle`` files go to the sharded path instead."""

    SPILLED_RECORDS = "spilled_records"
    WRITTEN_FILES = "written_files"

    def __init__(self, base_path: str, destination_fn: Callable, sink_fn: Callable, max_writers_per_bundle: int) -> None:
        self.base_path = base_path
        self.destination_fn = destination_fn
        self.sink_fn = sink_fn
        self.max_writers_per_bundle = max_writers_per_bundle

    def start_bundle(self) -> None:
        self.writers: dict[tuple[Any, Any], tuple[IO[bytes], FileSink]] = {}
        self.file_names: dict[tuple[Any, Any], str] = {}

    def process(self, record: Any, window: Any = DoFn.WindowParam) -> Any:
        destination = self.destination_fn(record)
        key = (destination, window)
        found = self.writers.get(key)
        if found is None:
            if len(self.writers) >= self.max_writers_per_bundle:
                return [TaggedOutput(self.SPILLED_RECORDS, record)]
            sink = self.sink_fn(destination)
            full_name, writer = _create_writer(self.base_path, key, sink)
            sink.open(writer)
            found = self.writers[key] = (writer, sink)
            self.file_names[key] = full_name
        found[1].write(record)
        return None

    def finish_bundle(self) -> Iterator[Any]:
        for key, (writer, sink) in self.writers.items():
            sink.flush()
            writer.close()
            destination, window = key
            result = FileResult(self.file_names[key], -1, 0, window, None, destination)
            yield TaggedOutput(self.WRITTEN_FILES, WindowedValue(result, _timestamp_of(window), (window,), PANE_INFO_UNKNOWN))
        self.writers = {}

    def teardown(self) -> None:
        for writer, _ in getattr(self, "writers", {}).values():
            with contextlib.suppress(Exception):  # a failed bundle: its own error is the one to report
                writer.close()


class _AppendShardedDestination(DoFn):
    """Keys each spilled record by (destination, shard), shards round-robin per destination."""

    def __init__(self, destination_fn: Callable, shards: int) -> None:
        self.destination_fn = destination_fn
        self.shards = shards

    def start_bundle(self) -> None:
        self.counters: dict[Any, int] = {}

    def process(self, record: Any) -> Iterator[tuple[tuple[Any, int], Any]]:
        destination = self.destination_fn(record)
        shard = (self.counters.get(destination, random.randrange(self.shards)) + 1) % self.shards
        self.counters[destination] = shard
        yield (destination, shard), record


class _WriteShardedRecordsFn(DoFn):
    def __init__(self, base_path: str, sink_fn: Callable, shards: int) -> None:
        self.base_path = base_path
        self.sink_fn = sink_fn
        self.shards = shards

    def process(self, element: Any, window: Any = DoFn.WindowParam, pane: Any = DoFn.PaneInfoParam) -> Iterator[FileResult]:
        (destination, shard), records = element
        sink = self.sink_fn(destination)
        full_name, writer = _create_writer(self.base_path, (destination, window), sink)
        try:
            sink.open(writer)
            for record in records:
                sink.write(record)
            sink.flush()
        finally:
            writer.close()
        yield FileResult(full_name, shard, self.shards, window, pane, destination)


def _by_destination(result: FileResult) -> tuple[Any, FileResult]:
    return result.destination, result


class _MoveTempFilesIntoFinalDestinationFn(DoFn):
    """Renames a destination's temporary files (of one window) to their final names."""

    def __init__(self, path: str, file_naming_fn: FileNaming, temp_dir: str) -> None:
        self.path = path
        self.file_naming_fn = file_naming_fn
        self.temp_dir = temp_dir

    def process(self, element: Any, window: Any = DoFn.WindowParam) -> Iterator[FileResult]:
        destination, results = element
        temp_results = sorted(results, key=lambda result: result.file_name)
        finals = []
        for index, result in enumerate(temp_results):
            name = self.file_naming_fn(result.window, result.pane, index, len(temp_results), "", destination)
            finals.append(FileResult(name, index, len(temp_results), result.window, result.pane, destination))
        with contextlib.suppress(OSError):  # it exists already
            FileSystems.mkdirs(self.path)
        sources = [result.file_name for result in temp_results]
        targets = [FileSystems.join(self.path, final.file_name) for final in finals]
        # A retried bundle finds its files already moved: move what is still there.
        pending = [(source, target) for source, target in zip(sources, targets) if FileSystems.exists(source)]
        missing = [target for source, target in zip(sources, targets) if not FileSystems.exists(source) and not FileSystems.exists(target)]
        if missing:
            msg = f"WriteToFiles: the temporary files for {missing} have disappeared; was {self.temp_dir} removed while the pipeline ran?"
            raise FileNotFoundError(msg)
        if pending:
            FileSystems.rename([source for source, _ in pending], [target for _, target in pending])
        yield from finals
        self._remove_temp_dir_if_empty()

    def _remove_temp_dir_if_empty(self) -> None:
        # Beam leaves its empty temporary folder behind; sparkbeam removes it once no file
        # is left in it (orphans of failed attempts keep it, and it is re-created as needed).
        with contextlib.suppress(OSError):
            (result,) = FileSystems.match([FileSystems.join(self.temp_dir, "*")])
            if not result.metadata_list and FileSystems.exists(self.temp_dir):
                FileSystems.delete([self.temp_dir])


def _sink_fn(sink: Any) -> Callable[[Any], FileSink]:
    if isinstance(sink, type) and issubclass(sink, FileSink):
        return _NewSink(sink)
    if isinstance(sink, FileSink):
        return _NewSink(type(sink))
    if callable(sink):
        return sink
    if sink is None:
        return _NewSink(TextSink)
    msg = f"WriteToFiles: sink must be a FileSink class or instance, or a function of the destination returning one; got {sink!r}"
    raise TypeError(msg)


class _NewSink:
    """A fresh sink of a class per file, as Beam makes them (sinks keep the open handle)."""

    def __init__(self, sink_class: type) -> None:
        self.sink_class = sink_class

    def __call__(self, unused_destination: Any) -> FileSink:
        return self.sink_class()


class _Constant:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, unused_record: Any) -> Any:
        return self.value


class WriteToFiles(PTransform):
    """Writes a PCollection to files under ``path``, per destination and window.

    ``file_naming(window, pane, shard_index, total_shards, compression, destination)``
    names each file (default ``output-SSSSS-of-NNNNN``, with the window's bounds unless
    global); ``destination(record)`` groups records into destinations and
    ``sink(destination)`` (a ``FileSink`` class or instance: ``TextSink`` by default) writes
    them. ``shards`` (default 5) applies to records beyond ``max_writers_per_bundle``
    files in one bundle. Returns a ``FileResult`` per file.
    """

    MAX_NUM_WRITERS_PER_BUNDLE = 20
    DEFAULT_SHARDING = 5

    def __init__(
        self,
        path: str,
        file_naming: FileNaming | None = None,
        destination: Any = None,
        temp_directory: str | None = None,
        sink: Any = None,
        shards: int | None = None,
        output_fn: Any = None,
        max_writers_per_bundle: int = MAX_NUM_WRITERS_PER_BUNDLE,
        label: str | None = None,
    ) -> None:
        super().__init__(label)
        if not isinstance(path, str) or not path:
            msg = f"WriteToFiles: path must be a non-empty directory path, got {path!r}"
            raise ValueError(msg)
        readable_path("WriteToFiles", path)
        if output_fn is not None:
            # Beam keeps it for backward compatibility and never calls it: running it would differ.
            msg = "WriteToFiles: output_fn= is not supported by sparkbeam (Beam ignores it too; drop it)"
            raise NotImplementedError(msg)
        if shards is not None and (not isinstance(shards, int) or isinstance(shards, bool) or shards < 1):
            msg = f"WriteToFiles: shards must be a positive integer, got {shards!r}"
            raise ValueError(msg)
        if not isinstance(max_writers_per_bundle, int) or max_writers_per_bundle < 0:
            msg = f"WriteToFiles: max_writers_per_bundle must be a non-negative integer, got {max_writers_per_bundle!r}"
            raise ValueError(msg)
        if file_naming is not None and not callable(file_naming):
            msg = f"WriteToFiles: file_naming must be a function (window, pane, shard_index, total_shards, compression, destination), got {file_naming!r}"
            raise TypeError(msg)
        self.path = path
        self.file_naming_fn = file_naming or default_file_naming("output")
        self.destination_fn = destination if callable(destination) else _Constant(destination)
        self.sink_fn = _sink_fn(sink)
        self.shards = shards or self.DEFAULT_SHARDING
        self.temp_directory = temp_directory
        self.max_writers_per_bundle = max_writers_per_bundle

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        if pcoll.is_bounded and "://" in self.path and not self.path.startswith("file://"):
            # hdfs://, s3a://...: the DoFns below would write and rename where the
            # executors' Python cannot reach; the runner writes through its driver.
            return pcoll | "WriteThroughDriver" >> WriteFilesThroughDriver(self)
        temp_location = self.temp_directory
        if not temp_location:
            temp_location = FileSystems.join(
                pcoll.pipeline.options.get_all_options().get("temp_location") or self.path, f".temp{uuid.uuid4()}"
            )
        written = pcoll | "WriteUnshardedRecords" >> ParDo(
            _WriteUnshardedRecordsFn(temp_location, self.destination_fn, self.sink_fn, self.max_writers_per_bundle)
        ).with_outputs(_WriteUnshardedRecordsFn.SPILLED_RECORDS, _WriteUnshardedRecordsFn.WRITTEN_FILES)
        spilled_written = (
            written[_WriteUnshardedRecordsFn.SPILLED_RECORDS]
            | "AppendShardedDestination" >> ParDo(_AppendShardedDestination(self.destination_fn, self.shards))
            | "GroupRecordsByDestinationAndShard" >> GroupByKey()
            | "WriteShardedRecords" >> ParDo(_WriteShardedRecordsFn(temp_location, self.sink_fn, self.shards))
        )
        return (
            (written[_WriteUnshardedRecordsFn.WRITTEN_FILES], spilled_written)
            | "FlattenWrittenFiles" >> Flatten()
            | "KeyByDestination" >> Map(_by_destination)
            | "GroupTempFilesByDestination" >> GroupByKey()
            | "MoveTempFilesIntoFinalDestination" >> ParDo(
                _MoveTempFilesIntoFinalDestinationFn(self.path, self.file_naming_fn, temp_location)
            )
        )


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.fileio")
