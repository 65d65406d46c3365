"""Beam's ``ReadFromText`` at its defaults, read in byte ranges with no Python step per line
in the reading itself.

Beam splits a text file into byte ranges (``reads.source_bundles``) and its ``_TextSource``
reads each range a line at a time, through a buffer object, a range tracker and the coder:
about 1.4 µs a line, more than everything else the batch benchmark does per event. Where
the source is at its defaults (``text_ranges``: Beam's own split says which files, and that
they are uncompressed), sparkbeam reads byte ranges of those files in a few calls that run
in C (``range_lines``): one read of the range's bytes, one strict UTF-8 decode, ``\\r\\n``
made ``\\n`` and one split. The result is exactly Beam's for the same range, by the rules
Beam's reader follows at those settings:

- a range owns the lines that *start* inside it: a line starts at offset 0 or just after a
  ``\\n``; a range starting at ``s > 0`` skips to the first ``\\n`` at or after ``s - 1``,
  and its last line runs past its end to the next ``\\n`` (or the end of the file). So the
  lines of a file are the same however it is cut into ranges;
- a line ends at ``\\n``; one ``\\r`` just before that ``\\n`` is dropped; a lone ``\\r``
  (a last one too) stays in the line; an empty last line (the file ends with ``\\n``) is
  no line;
- each line is decoded as UTF-8 strictly (``StrUtf8Coder``): a byte-order mark stays a
  character, bytes that are not UTF-8 fail the read with the ``UnicodeDecodeError`` Beam
  gives for that line (``\\r`` and ``\\n`` are never inside a UTF-8 sequence, so decoding
  the range at once decodes each line, and fails exactly when one line fails).

Any other setting (a header to skip or match, another coder, a delimiter or escape
character, lines kept with their ends, a compressed file, a subclass of ``_TextSource``)
keeps Beam's own reader (``reads.ReadBundles``).

The ranges are read as a bounded source of the engine (``TextRangesSource`` under a
``BoundedSourceReadOp``), not by a ParDo over ranges: a ParDo's outputs for one input (a
range's tens of thousands of lines) are all held at the end of its fused stage before they
go on, and that many objects alive at once set Python's cyclic GC scanning again and again
(a third of the map side's time in the batch benchmark). A source's elements enter their
stage one by one instead, as Spark's lines enter sparkbeam's own ``ReadFromText``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import attrs
from apache_beam.coders import coders as beam_coders
from apache_beam.io import filebasedsource, textio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from sparkbeam.io.iobase import BoundedSource, SourceBundle
from sparkbeam.io.range_trackers import OffsetRangeTracker
from sparkbeam.runners.beam.plain import augmented

__all__ = ["TextRange", "TextRangesSource", "range_lines", "text_ranges"]

#: how much more of a file is read at a time to find the end of a range's last line
_TAIL_CHUNK = 1 << 16


@attrs.frozen
class TextRange:
    """Bytes ``[start, stop)`` of an uncompressed text file: the lines that start there."""

    path: str
    start: int
    stop: int


#: the settings of Beam's ``_TextSource`` that ``range_lines`` reads as Beam does
_DEFAULTS = {
    "_strip_trailing_newlines": True,
    "_skip_header_lines": 0,
    "_header_matcher": None,
    "_header_processor": None,
    "_delimiter": None,
    "_escapechar": None,
}
_MISSING = object()


def _at_defaults(source: Any) -> bool:
    # A setting this Beam does not have (another release) keeps Beam's reader.
    if type(source) is not textio._TextSource or type(getattr(source, "_coder", None)) is not beam_coders.StrUtf8Coder:
        return False
    return all(getattr(source, name, _MISSING) == value for name, value in _DEFAULTS.items())


def text_ranges(bundles: list[Any]) -> tuple[TextRange, ...] | None:
    """The byte ranges of Beam's ``bundles`` (``SourceBundle``s of a ``ReadFromText``
    source, as ``source.split`` made them) when every one is a range of an uncompressed
    file whose ``_TextSource`` is at its defaults (see the module docs); else None (no
    bundles either: Beam's reader says what an empty match means)."""
    if not bundles:
        return None
    ranges = []
    for bundle in bundles:
        single = bundle.source
        if type(single) is not filebasedsource._SingleFileSource or not _at_defaults(single._file_based_source):
            return None
        # Splittable: Beam found the file uncompressed (by its extension under AUTO).
        start, stop = bundle.start_position, bundle.stop_position
        if not single._splittable or type(start) is not int or type(stop) is not int:
            return None
        ranges.append(TextRange(single._file_name, start, stop))
    return tuple(ranges)


def _read_up_to(handle: Any, size: int) -> bytes:
    """``size`` bytes, fewer only at the end of the file (a stream may return less per read)."""
    data = handle.read(size)
    if len(data) == size or not data:
        return data
    parts = [data]
    missing = size - len(data)
    while missing > 0:
        more = handle.read(missing)
        if not more:
            break
        parts.append(more)
        missing -= len(more)
    return b"".join(parts)


def _owned_bytes(handle: Any, start: int, stop: int) -> bytes:
    """The bytes of the lines that start in ``[start, stop)``, their ends included."""
    if start >= stop:
        return b""
    if start == 0:
        body = _read_up_to(handle, stop)
    else:
        # From one byte before the range: a line that starts exactly at ``start`` follows
        # a \n there, and is the range's first.
        handle.seek(start - 1)
        data = _read_up_to(handle, stop - start + 1)
        first_end = data.find(b"\n")
        if first_end < 0:
            return b""  # no line starts in the range
        body = data[first_end + 1 :]
    if not body or body.endswith(b"\n"):
        return body
    # The last line runs on past the range: read on to its \n, or to the end of the file.
    tail = [body]
    while True:
        more = handle.read(_TAIL_CHUNK)
        if not more:
            break
        end = more.find(b"\n")
        if end >= 0:
            tail.append(more[: end + 1])
            break
        tail.append(more)
    return b"".join(tail)


def range_lines(handle: Any, start: int, stop: int) -> list[str]:
    """The lines that start in bytes ``[start, stop)`` of the open file ``handle``, as Beam's
    ``_TextSource`` reads them at its defaults (see the module docs).

    >>> import io
    >>> data = b"a\\r\\nb\\rc\\n\\nd\\r"
    >>> range_lines(io.BytesIO(data), 0, 4), range_lines(io.BytesIO(data), 4, len(data))
    (['a', 'b\\rc'], ['', 'd\\r'])
    """
    owned = _owned_bytes(handle, start, stop)
    try:
        text = owned.decode("utf-8")
    except UnicodeDecodeError:
        # Beam decodes line by line: fail with its error, for the first line that fails.
        for line in owned.replace(b"\r\n", b"\n").split(b"\n"):
            line.decode("utf-8")
        raise
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":  # the last line ended with \n (or nothing starts here)
        lines.pop()
    return lines


#: bytes read at a time within a bundle: a block's lines are held at once
_BLOCK = 1 << 20


def _cut(path: str, start: int, stop: int, size: int) -> list[TextRange]:
    """``[start, stop)`` of ``path`` in consecutive ranges of about ``size`` bytes."""
    count = max(1, -(-(stop - start) // max(1, size)))
    bounds = [start + (stop - start) * i // count for i in range(count + 1)]
    return [TextRange(path, low, high) for low, high in itertools.pairwise(bounds) if low < high]


class TextRangesSource(BoundedSource):
    """Byte ranges of text files (``text_ranges``) as a bounded source of their lines, read
    by the engine's ``BoundedSourceReadOp``: split on the driver when the run starts into
    about one bundle per reader, each bundle's lines read on an executor a block at a time
    (``range_lines``) and handed on one by one, so that what follows the read in its stage
    gets them as it gets any source's elements. Which range a line is read in never changes
    the lines read (a line belongs to the range it starts in), so the ranges are cut anew
    for the run's readers."""

    def __init__(self, ranges: tuple[TextRange, ...], label: str) -> None:
        self.ranges = ranges
        self.label = label

    def estimate_size(self) -> int:
        return sum(r.stop - r.start for r in self.ranges)

    def split(self, desired_bundle_size: int, start_position: Any = None, stop_position: Any = None) -> Iterator[SourceBundle]:
        # Each file's ranges cover it: cut each file's extent anew, then fill bundles.
        extents: dict[str, list[int]] = {}
        for r in self.ranges:
            extent = extents.setdefault(r.path, [r.start, r.stop])
            extent[0], extent[1] = min(extent[0], r.start), max(extent[1], r.stop)
        bundle: list[TextRange] = []
        held = 0
        for path, (low, high) in extents.items():
            for piece in _cut(path, low, high, desired_bundle_size):
                size = piece.stop - piece.start
                if bundle and held + size > desired_bundle_size:
                    yield SourceBundle(held, TextRangesSource(tuple(bundle), self.label), None, None)
                    bundle, held = [], 0
                bundle.append(piece)
                held += size
        if bundle:
            yield SourceBundle(held, TextRangesSource(tuple(bundle), self.label), None, None)

    def get_range_tracker(self, start_position: Any, stop_position: Any) -> OffsetRangeTracker:
        # Read whole (sparkbeam splits no bundle while reading it): the tracker is not consulted.
        return OffsetRangeTracker(0, self.estimate_size())

    def read(self, range_tracker: Any) -> Iterator[str]:
        """The lines of every range, a block at a time; a failure is named after the
        reading step, as Beam's DoFnRunner names it."""
        try:
            for whole in self.ranges:
                with FileSystems.open(whole.path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                    for block in _cut(whole.path, whole.start, whole.stop, _BLOCK):
                        yield from range_lines(handle, block.start, block.stop)
        except Exception as error:
            raise augmented(error, self.label) from error

    def __repr__(self) -> str:
        return f"TextRangesSource({len(self.ranges)} ranges, {self.estimate_size()} bytes)"
