"""Text files: ``ReadFromText`` (one element per line) and ``WriteToText`` (sharded output).

>>> lines = p | ReadFromText("logs/*.txt")                              # doctest: +SKIP
>>> counts | WriteToText("out/counts", file_name_suffix=".txt")         # doctest: +SKIP

Both are primitives the runner executes with Spark's own file reading and writing; writes
are atomic (a failed run leaves nothing under the final names). Streaming runs write one
committed directory per step (``out/counts-step-00000042/counts-00000-of-00001.txt``).

A read gives exactly the lines Beam's ``ReadFromText`` gives: a line ends at ``\n`` or
``\r\n`` (a lone ``\r`` stays in its line), a byte-order mark stays a character, bytes that
are not UTF-8 fail the read with ``UnicodeDecodeError``, compressed files are read by their
extension (``compression_type='auto'``), empty files have no lines. At the defaults the
runner reads byte ranges of each file in parallel, a few C calls per range.

``coder=`` works as in Beam: a read decodes each line's bytes with it (default
``StrUtf8Coder``), a write encodes each element with it (default ``ToBytesCoder``: bytes
as they are, anything else as ``str()`` in UTF-8). A read with another coder, a
``delimiter`` or an ``escapechar`` splits each file whole the way Beam does (on ``\n`` and
``\r\n``, or on the delimiter), in Python on the executors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.coders.coders import Coder, StrUtf8Coder, ToBytesCoder
from sparkbeam.core import Create, DoFn, ParDo
from sparkbeam.io.filebased import Spread
from sparkbeam.io.filesystem import FileMetadata, compression_name
from sparkbeam.io.filesystems import FileSystems, readable_path
from sparkbeam.io.filewrites import shard_file_name
from sparkbeam.ptransform import PTransform
from sparkbeam.typehints import typehints

__all__ = ["ReadAllFromText", "ReadFromText", "ReadFromTextWithFilename", "WriteToText", "split_records"]

_COMPRESSIONS = {"auto", "uncompressed", "gzip", "bzip2", "deflate"}


#: a read decompresses what Beam's reader does (zstd needs ``zstandard``, as in Beam)
_READ_COMPRESSIONS = {*_COMPRESSIONS, "lzma", "zstd"}


def _compression(owner: str, value: Any, known: set[str] = _COMPRESSIONS) -> str:
    name = str(getattr(value, "value", value) or "auto").lower()
    if name not in known:
        msg = f"{owner}: compression_type must be one of {sorted(known)}, got {value!r}"
        raise ValueError(msg)
    return name


def _coder(owner: str, coder: Any, needs: str) -> Any:
    if isinstance(coder, type):
        msg = f"{owner}: coder must be a coder instance, e.g. {coder.__name__}(), not the class"
        raise TypeError(msg)
    if not callable(getattr(coder, needs, None)):
        msg = f"{owner}: coder must be a Coder (with {needs}()), got {coder!r}"
        raise TypeError(msg)
    return coder


def _check_delimiters(owner: str, delimiter: Any, escapechar: Any) -> None:
    if delimiter is not None:
        if not isinstance(delimiter, bytes) or not delimiter:
            msg = f"{owner}: delimiter must be a non-empty bytes sequence, got {delimiter!r}"
            raise ValueError(msg)
        if _is_self_overlapping(delimiter):
            msg = f"{owner}: delimiter must not self-overlap, got {delimiter!r}"
            raise ValueError(msg)
    if escapechar is not None and not (isinstance(escapechar, bytes) and len(escapechar) == 1):
        msg = f"{owner}: escapechar must be bytes of size 1, got {escapechar!r}"
        raise ValueError(msg)


def _is_self_overlapping(delimiter: bytes) -> bool:
    return any(delimiter[:i] == delimiter[len(delimiter) - i :] for i in range(1, len(delimiter)))


def _is_escaped(data: bytes, position: int, escapechar: bytes) -> bool:
    """Whether the byte at ``position`` follows an odd number of escape characters."""
    count = 0
    while position - count - 1 >= 0 and data[position - count - 1 : position - count] == escapechar:
        count += 1
    return count % 2 == 1


def _separator(data: bytes, start: int, delimiter: bytes | None, escapechar: bytes | None) -> tuple[int, int] | None:
    """(start, end) of the next record separator at or after ``start``, as Beam finds it."""
    separator = delimiter or b"\n"
    position = start
    while True:
        found = data.find(separator, position)
        if found < 0:
            return None
        if delimiter is None and data[found - 1 : found] == b"\r" and found > start:
            if escapechar is not None and _is_escaped(data, found - 1, escapechar):
                return found, found + 1  # the \r is escaped: \n alone separates
            return found - 1, found + 1
        if escapechar is not None and _is_escaped(data, found, escapechar):
            position = found + len(separator) + 1  # Beam skips the byte after an escaped one too
            continue
        return found, found + len(separator)


def split_records(
    data: bytes,
    *,
    delimiter: bytes | None = None,
    escapechar: bytes | None = None,
    strip_trailing_newlines: bool = True,
    skip_header_lines: int = 0,
) -> Iterator[bytes]:
    """The records of one file's bytes, exactly as Beam's text source reads them: split on
    ``\n`` or ``\r\n`` (or ``delimiter``), an empty last record dropped.

    >>> list(split_records(b"a\r\nb\n\nc"))
    [b'a', b'b', b'', b'c']
    """
    position = 0
    skipped = 0
    while position < len(data):
        bounds = _separator(data, position, delimiter, escapechar)
        if bounds is None:
            record, position = data[position:], len(data)
        else:
            record = data[position : bounds[0] if strip_trailing_newlines else bounds[1]]
            position = bounds[1]
        if skipped < skip_header_lines:
            skipped += 1
            continue
        yield record


class ReadFromText(PTransform):
    """Each line of the files matching ``file_pattern`` (a path or glob), decoded by ``coder``."""

    is_primitive = True

    def __init__(
        self,
        file_pattern: str | None = None,
        min_bundle_size: int = 0,
        compression_type: Any = "auto",
        strip_trailing_newlines: bool = True,
        coder: Coder = StrUtf8Coder(),  # noqa: B008 - Beam's default; coders are stateless
        validate: bool = True,
        skip_header_lines: int = 0,
        delimiter: bytes | None = None,
        escapechar: bytes | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__(label)
        if not isinstance(file_pattern, str) or not file_pattern:
            msg = f"ReadFromText: file_pattern must be a non-empty path or glob, got {file_pattern!r}"
            raise ValueError(msg)
        if not isinstance(skip_header_lines, int) or skip_header_lines < 0:
            msg = f"ReadFromText: skip_header_lines must be a non-negative integer, got {skip_header_lines!r}"
            raise ValueError(msg)
        _check_delimiters("ReadFromText", delimiter, escapechar)
        self.file_pattern = file_pattern
        self.compression_type = _compression("ReadFromText", compression_type, _READ_COMPRESSIONS)
        self.strip_trailing_newlines = strip_trailing_newlines
        self.coder = _coder("ReadFromText", coder, "decode")
        self.validate = validate
        self.skip_header_lines = skip_header_lines
        self.delimiter = delimiter
        self.escapechar = escapechar

    def default_label(self) -> str:
        return "ReadFromText"

    def splits_lines_in_python(self) -> bool:
        """Whether each file is split whole and each record decoded by the coder in Python
        (``split_records``), rather than read in UTF-8 lines by byte ranges."""
        return type(self.coder) is not StrUtf8Coder or self.delimiter is not None or self.escapechar is not None

    def infer_output_type(self, unused_input_type: Any) -> Any:
        try:
            return self.coder.to_type_hint()
        except NotImplementedError:
            return typehints.Any

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = "ReadFromText is a root transform: apply it to the pipeline (p | ReadFromText(...))"
            raise TypeError(msg)
        return pvalue.PCollection(pbegin.pipeline)


class WriteToText(PTransform):
    """Write each element, encoded by ``coder`` (by default its ``str()``), as a line into
    shards ``prefix-00000-of-0000N suffix``.

    >>> counts | WriteToText("out/counts", file_name_suffix=".txt")     # doctest: +SKIP

    In batch the shards are ``out/counts-00000-of-00002.txt``, ..., written atomically. In
    a streaming run (unbounded input, or ``--streaming``) each step with elements writes
    its own directory of shards, named as in batch and each with the header and footer:
    ``out/counts-step-00000042/counts-00000-of-00002.txt``. A step's directory appears
    whole, in one rename, and a step run again after a failure replaces it, so each
    element is written exactly once; steps with no elements write nothing (see
    ``sparkbeam.io.stepfiles``).
    """

    is_primitive = True

    def __init__(
        self,
        file_path_prefix: str,
        file_name_suffix: str = "",
        append_trailing_newlines: bool = True,
        num_shards: int = 0,
        shard_name_template: str | None = None,
        coder: Coder = ToBytesCoder(),  # noqa: B008 - Beam's default; coders are stateless
        compression_type: Any = "auto",
        header: str | None = None,
        footer: str | None = None,
        *,
        max_records_per_shard: int | None = None,
        max_bytes_per_shard: int | None = None,
        skip_if_empty: bool = False,
        triggering_frequency: Any = None,
        label: str | None = None,
    ) -> None:
        super().__init__(label)
        unsupported = {
            "max_records_per_shard": max_records_per_shard,
            "max_bytes_per_shard": max_bytes_per_shard,
            "triggering_frequency": triggering_frequency,
        }
        for name, value in unsupported.items():
            if value is not None:
                msg = (
                    f"WriteToText: {name}= is not supported by sparkbeam (shards follow num_shards "
                    "or the partitions; a stream writes one directory per step)"
                )
                raise NotImplementedError(msg)
        if not isinstance(file_path_prefix, str) or not file_path_prefix:
            msg = f"WriteToText: file_path_prefix must be a non-empty path, got {file_path_prefix!r}"
            raise ValueError(msg)
        if not isinstance(num_shards, int) or num_shards < 0:
            msg = f"WriteToText: num_shards must be a non-negative integer (0 lets the runner choose), got {num_shards!r}"
            raise ValueError(msg)
        template = "-SSSSS-of-NNNNN" if shard_name_template is None else shard_name_template
        if template and ("S" not in template or "N" not in template):
            msg = f"WriteToText: shard_name_template needs S (shard) and N (count) placeholders, got {template!r}"
            raise ValueError(msg)
        self.file_path_prefix = file_path_prefix
        self.file_name_suffix = file_name_suffix
        self.append_trailing_newlines = append_trailing_newlines
        # '' names one file: one shard, as Beam's FileBasedSink sets it (two shards would both
        # be committed to that one name, the last replacing the first)
        self.num_shards = 1 if template == "" else num_shards
        self.shard_name_template = template
        self.compression_type = _compression("WriteToText", compression_type)
        self.header = header
        self.footer = footer
        self.coder = _coder("WriteToText", coder, "encode")
        self.skip_if_empty = bool(skip_if_empty)

    def default_label(self) -> str:
        return "WriteToText"

    def shard_name(self, shard: int, num_shards: int) -> str:
        """The file name of one shard, from Beam's template (``-SSSSS-of-NNNNN``)."""
        return shard_file_name(self.file_path_prefix, self.shard_name_template, self.file_name_suffix, shard, num_shards)

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PDone:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{self.label} writes a PCollection, not {pcoll!r}"
            raise TypeError(msg)
        return pvalue.PDone(pcoll.pipeline)


class _ReadTextFile(DoFn):
    """Every record of one file (``FileMetadata`` or path), split and decoded as Beam does."""

    def __init__(self, read: ReadAllFromText) -> None:
        self.compression = read.compression_type
        self.delimiter = read.delimiter
        self.escapechar = read.escapechar
        self.strip_trailing_newlines = read.strip_trailing_newlines
        self.skip_header_lines = read.skip_header_lines
        self.coder = read.coder
        self.with_filename = read.with_filename

    def process(self, file: Any) -> Iterator[Any]:
        path = file.path if isinstance(file, FileMetadata) else file
        with FileSystems.open(path, compression_type=self.compression) as handle:
            data = handle.read()
        records = split_records(
            data,
            delimiter=self.delimiter,
            escapechar=self.escapechar,
            strip_trailing_newlines=self.strip_trailing_newlines,
            skip_header_lines=self.skip_header_lines,
        )
        decode = self.coder.decode
        for number, record in enumerate(records, start=self.skip_header_lines + 1):
            try:
                value = decode(record)
            except Exception as error:
                msg = f"{path}, record {number}: {self.coder!r} could not decode {record[:80]!r}: {error}"
                raise ValueError(msg) from error
            yield (path, value) if self.with_filename else value


class _MatchTextFiles(DoFn):
    """A pattern's files (an element that is a ``FileMetadata`` already is its own match)."""

    def __init__(self, allow_empty: bool) -> None:
        self.allow_empty = allow_empty

    def process(self, pattern: Any) -> Iterator[Any]:
        if isinstance(pattern, FileMetadata):
            yield pattern
            return
        if not isinstance(pattern, str):
            msg = f"ReadAllFromText reads file patterns (str) or FileMetadata, got {pattern!r}"
            raise TypeError(msg)
        (result,) = FileSystems.match([pattern])
        if not result.metadata_list and not self.allow_empty:
            msg = f"ReadFromTextWithFilename: no files match {pattern!r}"
            raise FileNotFoundError(msg)
        filesystem = FileSystems.get_filesystem(pattern)
        for metadata in result.metadata_list:
            if not filesystem.is_directory(metadata.path):
                yield metadata


class ReadAllFromText(PTransform):
    """The lines of the files matched by each pattern (or ``FileMetadata``) of the input.

    >>> lines = patterns | ReadAllFromText()                            # doctest: +SKIP
    >>> pairs = patterns | ReadAllFromText(with_filename=True)          # doctest: +SKIP

    With ``with_filename=True`` each element is ``(file path, line)``.

    Lines are split and decoded as ``ReadFromText`` does (``coder``, ``delimiter``,
    ``escapechar``, ``skip_header_lines`` per file). A pattern that matches nothing
    yields nothing, as in Beam. Files go through ``FileSystems`` and are spread over the
    runner's partitions; each file is read whole by one task (a file is not split, so
    ``desired_bundle_size`` and ``min_bundle_size`` do not change the output).
    """

    DEFAULT_DESIRED_BUNDLE_SIZE = 64 * 1024 * 1024

    def __init__(
        self,
        min_bundle_size: int = 0,
        desired_bundle_size: int = DEFAULT_DESIRED_BUNDLE_SIZE,
        compression_type: Any = "auto",
        strip_trailing_newlines: bool = True,
        validate: bool = False,
        coder: Coder = StrUtf8Coder(),  # noqa: B008 - Beam's default; coders are stateless
        skip_header_lines: int = 0,
        with_filename: bool = False,
        delimiter: bytes | None = None,
        escapechar: bytes | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__(label)
        owner = type(self).__name__
        for name, value in (("min_bundle_size", min_bundle_size), ("desired_bundle_size", desired_bundle_size)):
            if not isinstance(value, int) or value < 0:
                msg = f"{owner}: {name} must be a non-negative integer, got {value!r}"
                raise ValueError(msg)
        if not isinstance(skip_header_lines, int) or skip_header_lines < 0:
            msg = f"{owner}: skip_header_lines must be a non-negative integer, got {skip_header_lines!r}"
            raise ValueError(msg)
        _check_delimiters(owner, delimiter, escapechar)
        self.compression_type = compression_name(owner, compression_type)
        self.strip_trailing_newlines = strip_trailing_newlines
        self.validate = validate
        self.coder = _coder(owner, coder, "decode")
        self.skip_header_lines = skip_header_lines
        self.with_filename = bool(with_filename)
        self.delimiter = delimiter
        self.escapechar = escapechar
        #: as in Beam, a pattern of the input that matches nothing yields nothing (``validate``
        #: checks the files a pattern matched, which exist)
        self.allow_empty_matches = True

    def default_label(self) -> str:
        return "ReadAllFromText"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{type(self).__name__} reads a PCollection of file patterns: apply it to one (patterns | {type(self).__name__}())"
            raise TypeError(msg)
        return (
            pcoll
            | "MatchAll" >> ParDo(_MatchTextFiles(self.allow_empty_matches))
            | "Spread" >> Spread()
            | "ReadEachFile" >> ParDo(_ReadTextFile(self))
        )


class ReadFromTextWithFilename(PTransform):
    """``(file name, line)`` for each line of the files ``file_pattern`` matches."""

    def __init__(
        self,
        file_pattern: str | None = None,
        min_bundle_size: int = 0,
        compression_type: Any = "auto",
        strip_trailing_newlines: bool = True,
        coder: Coder = StrUtf8Coder(),  # noqa: B008 - Beam's default; coders are stateless
        validate: bool = True,
        skip_header_lines: int = 0,
        delimiter: bytes | None = None,
        escapechar: bytes | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__(label)
        if not isinstance(file_pattern, str) or not file_pattern:
            msg = f"ReadFromTextWithFilename: file_pattern must be a non-empty path or glob, got {file_pattern!r}"
            raise ValueError(msg)
        readable_path("ReadFromTextWithFilename", file_pattern)
        self.file_pattern = file_pattern
        self.read_all = ReadAllFromText(
            min_bundle_size=min_bundle_size,
            compression_type=compression_type,
            strip_trailing_newlines=strip_trailing_newlines,
            validate=validate,
            coder=coder,
            skip_header_lines=skip_header_lines,
            with_filename=True,
            delimiter=delimiter,
            escapechar=escapechar,
        )
        self.read_all.allow_empty_matches = not validate

    def default_label(self) -> str:
        return "ReadFromTextWithFilename"

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = "ReadFromTextWithFilename is a root transform: apply it to the pipeline (p | ReadFromTextWithFilename(...))"
            raise TypeError(msg)
        return pbegin | "Pattern" >> Create([self.file_pattern]) | "Read" >> self.read_all


# Beam defines its CSV and JSON transforms in ``apache_beam.io.textio``; so do we, by name.
from sparkbeam.io.csvio import ReadFromCsv, WriteToCsv  # noqa: E402
from sparkbeam.io.jsonio import ReadFromJson, WriteToJson  # noqa: E402

__all__ += ["ReadFromCsv", "ReadFromJson", "WriteToCsv", "WriteToJson"]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.textio")
