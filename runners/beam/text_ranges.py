"""Beam's ``ReadFromText`` at its defaults, read range by range with no Python step per line.

Beam splits a text file into byte ranges of about a bundle's size (``reads.source_bundles``)
and its ``_TextSource`` reads each range a line at a time, through a buffer object, a range
tracker and the coder: about 1.4 µs a line, more than everything else the batch benchmark
does per event. Where the source is at its defaults (``text_ranges``), sparkbeam keeps
Beam's ranges but reads each one in a few calls that run in C (``range_lines``): one read
of the range's bytes, one strict UTF-8 decode, ``\\r\\n`` made ``\\n`` and one split. The
result is exactly Beam's, by the rules Beam's reader follows at those settings:

- a range owns the lines that *start* inside it: a line starts at offset 0 or just after a
  ``\\n``; a range starting at ``s > 0`` skips to the first ``\\n`` at or after ``s - 1``,
  and its last line runs past its end to the next ``\\n`` (or the end of the file);
- a line ends at ``\\n``; one ``\\r`` just before that ``\\n`` is dropped; a lone ``\\r``
  (a last one too) stays in the line; an empty last line (the file ends with ``\\n``) is
  no line;
- each line is decoded as UTF-8 strictly (``StrUtf8Coder``): a byte-order mark stays a
  character, bytes that are not UTF-8 fail the read with the ``UnicodeDecodeError`` Beam
  gives for that line (``\\r`` and ``\\n`` are never inside a UTF-8 sequence, so decoding
  the range at once decodes each line, and fails exactly when one line fails).

Any other setting (a header to skip or match, another coder, a delimiter or escape
character, lines kept with their ends, a compressed file, a subclass of ``_TextSource``)
keeps Beam's own reader (``reads.ReadBundles``). ``ReadTextRanges`` runs in a fused body
as a ParDo of its own (``_join_read_text_ranges``): no user code runs there, so each
line goes on as the input's value would, with the range's timestamp, windows and pane,
with no DoFn machinery per line.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from typing import Any

import attrs
from apache_beam.coders import coders as beam_coders
from apache_beam.io import filebasedsource, textio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from sparkbeam.runners.beam.plain import augmented
from sparkbeam.runners.core.errors import UserCodeError
from sparkbeam.runners.core.execution import BodyBuilder, register_kind
from sparkbeam.runners.core.ops import ParDoOp
from sparkbeam.utils.windowed_value import WindowedValue, new_windowed_value

__all__ = ["ReadTextRangesOp", "TextRange", "range_lines", "text_ranges"]

#: how much more of a file is read at a time to find the end of a range's last line
_TAIL_CHUNK = 1 << 16


@attrs.frozen
class TextRange:
    """Bytes ``[start, stop)`` of an uncompressed text file: the lines that start there."""

    path: str
    start: int
    stop: int


def _at_defaults(source: Any) -> bool:
    return (
        type(source) is textio._TextSource
        and source._strip_trailing_newlines is True
        and type(source._coder) is beam_coders.StrUtf8Coder
        and not source._skip_header_lines
        and source._header_matcher is None
        and source._header_processor is None
        and source._delimiter is None
        and source._escapechar is None
    )


def text_ranges(bundles: list[Any]) -> tuple[TextRange, ...] | None:
    """The byte ranges of Beam's ``bundles`` (``SourceBundle``s of a ``ReadFromText``
    source, as ``source.split`` made them) when every one is a range of an uncompressed
    file whose ``_TextSource`` is at its defaults (see the module docs); else None."""
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


class ReadTextRanges:
    """Reads one ``TextRange`` per call: the FlatMap that ``ReadTextRangesOp`` runs. A
    failure is named after the reading step, as Beam's DoFnRunner names it."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, text_range: TextRange) -> list[str]:
        try:
            with FileSystems.open(text_range.path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                return range_lines(handle, text_range.start, text_range.stop)
        except Exception as error:
            raise augmented(error, self.label) from error


@attrs.frozen
class ReadTextRangesOp(ParDoOp):
    """The FlatMap of ``ReadTextRanges`` over the ranges of a ``ReadFromText``: a ParDo to
    the planner, which joins a fused body as one call per range (``_join_read_text_ranges``)."""


#: runs an iterator to its end at C speed, keeping nothing
_push_all = deque[object](maxlen=0).extend


def _join_read_text_ranges(op: ReadTextRangesOp, body: BodyBuilder) -> None:
    read = op.dofn.fn
    label, location = op.label, op.location
    (source,) = op.inputs
    (target,) = op.outputs
    send = body.sender(target)

    def receive(wv: WindowedValue) -> None:
        text_range = wv[0]
        try:
            lines = read(text_range)
        except Exception as error:
            raise UserCodeError(label, location, error, text_range) from error
        # A FlatMap's plain outputs: the input's timestamp, windows and pane, as Beam keeps them.
        _push_all(map(send, map(new_windowed_value, zip(lines, repeat(wv[1]), repeat(wv[2]), repeat(wv[3])))))

    body.receive(source, receive)


register_kind(ReadTextRangesOp, like=ParDoOp, join_body=_join_read_text_ranges)
