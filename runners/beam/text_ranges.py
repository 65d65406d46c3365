"""Beam's ``ReadFromText`` at its defaults, read in byte ranges with no Python step per line
in the reading itself.

Beam splits a text file into byte ranges (``reads.source_bundles``) and its ``_TextSource``
reads each range a line at a time, through a buffer object, a range tracker and the coder:
about 1.4 µs a line, more than everything else the batch benchmark does per event. Where
the source is at its defaults (``text_ranges``: Beam's own split says which files, and that
they are uncompressed), sparkbeam reads byte ranges of those files in a few calls that run
in C, by the rules of Beam's reader (``runners/core/sources/text_lines.py``, which sparkbeam's own
``ReadFromText`` reads with too).

Any other setting (a header to skip or match, another coder, a delimiter or escape
character, lines kept with their ends, a compressed file, a subclass of ``_TextSource``)
keeps Beam's own reader (``reads.ReadBundles``).

The ranges are read as a bounded source of the engine (``TextRangesSource`` under a
``BoundedSourceReadOp``), not by a ParDo over ranges: a ParDo's outputs for one input (a
range's tens of thousands of lines) are all held at the end of its fused stage before they
go on, and that many objects alive at once set Python's cyclic GC scanning again and again
(a third of the map side's time in the batch benchmark). A source's elements enter their
stage one by one instead, as the lines of sparkbeam's own ``ReadFromText`` do; and as
values alone (``yields_plain_values``), with no element built per line where the stage's
first ParDo takes them so.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

from apache_beam.coders import coders as beam_coders
from apache_beam.io import filebasedsource, textio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from sparkbeam.io.iobase import BoundedSource, SourceBundle
from sparkbeam.io.range_trackers import OffsetRangeTracker
from sparkbeam.runners.beam.plain import augmented
from sparkbeam.runners.core.sources.text_lines import (
    TextRange,
    bundle_ranges,
    range_lines,
    read_ranges,
)

__all__ = ["TextRange", "TextRangesSource", "range_lines", "text_ranges"]

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


def _open_uncompressed(path: str, compression: str) -> Any:
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


class TextRangesSource(BoundedSource):
    """Byte ranges of text files (``text_ranges``) as a bounded source of their lines, read
    by the engine's ``BoundedSourceReadOp``: split on the driver when the run starts into
    about one bundle per reader, each bundle's lines read on an executor a block at a time
    (``text_lines.read_ranges``) and handed on one by one, so that what follows the read in
    its stage gets them as it gets any source's elements. Which range a line is read in
    never changes the lines read (a line belongs to the range it starts in), so the ranges
    are cut anew for the run's readers."""

    def __init__(self, ranges: tuple[TextRange, ...], label: str) -> None:
        self.ranges = ranges
        self.label = label

    def estimate_size(self) -> int:
        return sum(r.stop - r.start for r in self.ranges)

    def split(self, desired_bundle_size: int, start_position: Any = None, stop_position: Any = None) -> Iterator[SourceBundle]:
        for held, ranges in bundle_ranges(self.ranges, desired_bundle_size):
            yield SourceBundle(held, TextRangesSource(ranges, self.label), None, None)

    def get_range_tracker(self, start_position: Any, stop_position: Any) -> OffsetRangeTracker:
        # Read whole (sparkbeam splits no bundle while reading it): the tracker is not consulted.
        return OffsetRangeTracker(0, self.estimate_size())

    #: its records are lines (``str``), each an element in the global window at the minimum
    #: timestamp: the engine hands them to the stage as values (``iobase.read_bundle_values``)
    yields_plain_values = True

    def read(self, range_tracker: Any) -> Iterator[str]:
        """The lines of every range, read a block at a time and handed on by ``chain`` (no
        Python frame per line); a failure is named after the reading step, as Beam's
        DoFnRunner names it."""
        return chain.from_iterable(self._blocks())

    def _blocks(self) -> Iterator[list[str]]:
        try:
            yield from read_ranges(self.ranges, _open_uncompressed)
        except Exception as error:
            raise augmented(error, self.label) from error

    def __repr__(self) -> str:
        return f"TextRangesSource({len(self.ranges)} ranges, {self.estimate_size()} bytes)"
