"""The lines of text files by the rules of Beam's ``_TextSource`` with ``StrUtf8Coder``, read
in byte ranges with no Python step per line in the reading itself.

Beam's reader goes a line at a time through a buffer object, a range tracker and the coder:
about 1.4 µs a line. Here a range is read in a few calls that run in C (``range_lines``):
one read of the range's bytes, one strict UTF-8 decode, ``\\r\\n`` made ``\\n`` and one split.
The result is exactly Beam's for the same range, by the rules its reader follows:

- a range owns the lines that *start* inside it: a line starts at offset 0 or just after a
  ``\\n``; a range starting at ``s > 0`` skips to the first ``\\n`` at or after ``s - 1``,
  and its last line runs past its end to the next ``\\n`` (or the end of the file). So the
  lines of a file are the same however it is cut into ranges;
- a line ends at ``\\n``; one ``\\r`` just before that ``\\n`` is dropped (both are kept with
  ``keep_ends``, Beam's ``strip_trailing_newlines=False``); a lone ``\\r`` (a last one too)
  stays in the line; an empty last line (the file ends with ``\\n``) is no line;
- each line is decoded as UTF-8 strictly: a byte-order mark stays a character, bytes that
  are not UTF-8 fail the read with the ``UnicodeDecodeError`` Beam gives for that line
  (``\\r`` and ``\\n`` are never inside a UTF-8 sequence, so decoding the range at once
  decodes each line, and fails exactly when one line fails);
- ``skip_header_lines=n`` skips each file's lines up to its ``n``-th ``\\n``; a file with
  fewer is all header (its unfinished last line too, as Beam's reader ends up skipping it);
- a compressed file is one range, read whole as a stream, by the same rules.

Both front ends read with it: sparkbeam's own ``ReadFromText`` (``runners/spark/textio.py``)
and Beam's at its defaults (``runners/beam/text_ranges.py``). It needs neither Spark nor
Beam: ``read_ranges`` takes the function that opens a file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs

__all__ = ["TextRange", "bundle_ranges", "cut", "header_end", "range_lines", "read_ranges", "stream_lines"]

UNCOMPRESSED = "uncompressed"
#: how much more of a file is read at a time to find the end of a range's last line
TAIL_CHUNK = 1 << 16
#: bytes read at a time within a range: a block's lines are held at once
BLOCK = 1 << 20


@attrs.frozen
class TextRange:
    """Bytes ``[start, stop)`` of a text file: the lines that start there. A compressed file
    (``compression`` as ``CompressionTypes`` names it) is read whole, ``stop`` its size."""

    path: str
    start: int
    stop: int
    compression: str = UNCOMPRESSED


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
        handle.seek(0)
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
        more = handle.read(TAIL_CHUNK)
        if not more:
            break
        end = more.find(b"\n")
        if end >= 0:
            tail.append(more[: end + 1])
            break
        tail.append(more)
    return b"".join(tail)


def _split(owned: bytes, keep_ends: bool) -> list[str]:
    """The lines of ``owned`` (whole lines, the last one perhaps unfinished), decoded."""
    try:
        text = owned.decode("utf-8")
    except UnicodeDecodeError:
        # Beam decodes line by line: fail with its error, for the first line that fails,
        # decoding exactly the bytes Beam decodes (an unfinished sequence before a line's
        # end fails otherwise when the end is kept).
        pieces = owned.split(b"\n")
        for piece in pieces[:-1]:
            (piece + b"\n" if keep_ends else piece.removesuffix(b"\r")).decode("utf-8")
        pieces[-1].decode("utf-8")
        raise
    if keep_ends:
        lines = text.split("\n")
        last = lines.pop()
        ended = [line + "\n" for line in lines]
        if last:
            ended.append(last)
        return ended
    if "\r" in text:  # a search at memchr speed; the replace's own scan is slower
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[-1] == "":  # the last line ended with \n (or nothing starts here)
        lines.pop()
    return lines


def range_lines(handle: Any, start: int, stop: int, keep_ends: bool = False) -> list[str]:
    """The lines that start in bytes ``[start, stop)`` of the open file ``handle``, as Beam's
    ``_TextSource`` reads them with ``StrUtf8Coder`` (see the module docs).

    >>> import io
    >>> data = b"a\\r\\nb\\rc\\n\\nd\\r"
    >>> range_lines(io.BytesIO(data), 0, 4), range_lines(io.BytesIO(data), 4, len(data))
    (['a', 'b\\rc'], ['', 'd\\r'])
    """
    return _split(_owned_bytes(handle, start, stop), keep_ends)


def header_end(handle: Any, count: int) -> int | None:
    """The offset just after the ``count``-th ``\\n`` of the file, where its lines after a
    header of ``count`` lines start; None when it has fewer (it is all header)."""
    handle.seek(0)
    offset = 0
    left = count
    while left:
        block = handle.read(TAIL_CHUNK)
        if not block:
            return None
        start, left = _past_newlines(block, left)
        if not left:
            return offset + start
        offset += len(block)
    return offset


def _past_newlines(block: bytes, count: int) -> tuple[int, int]:
    """Where ``block`` goes on after its first ``count`` ``\n`` (its end when it has fewer),
    and how many of the ``count`` it lacked."""
    at = -1
    while count:
        at = block.find(b"\n", at + 1)
        if at < 0:
            return len(block), count
        count -= 1
    return at + 1, 0


def stream_lines(handle: IO[bytes], skip_header_lines: int = 0, keep_ends: bool = False) -> Iterator[list[str]]:
    """A whole file's lines read from a stream (a compressed file's), a block at a time."""
    to_skip = skip_header_lines
    unfinished: list[bytes] = []  # the last line of the blocks so far, not yet ended
    while True:
        block = handle.read(BLOCK)
        if not block:
            break
        last_end = block.rfind(b"\n")
        if last_end < 0:
            unfinished.append(block)
            continue
        owned = b"".join((*unfinished, block[: last_end + 1]))
        unfinished = [block[last_end + 1 :]]
        if to_skip:
            start, to_skip = _past_newlines(owned, to_skip)
            owned = owned[start:]
        if owned:
            yield _split(owned, keep_ends)
    rest = b"".join(unfinished)
    if rest and not to_skip:  # with header lines still to skip, the unfinished line is one
        yield _split(rest, keep_ends)


def cut(path: str, start: int, stop: int, size: int) -> list[TextRange]:
    """``[start, stop)`` of ``path`` in consecutive ranges of about ``size`` bytes."""
    count = max(1, -(-(stop - start) // max(1, size)))
    bounds = [start + (stop - start) * i // count for i in range(count + 1)]
    return [TextRange(path, low, high) for low, high in itertools.pairwise(bounds) if low < high]


def bundle_ranges(ranges: tuple[TextRange, ...], size: int) -> Iterator[tuple[int, tuple[TextRange, ...]]]:
    """``ranges`` (each file's covering it) cut anew into bundles of about ``size`` bytes, as
    (bytes, ranges): which range a line is read in never changes the lines read (a line
    belongs to the range it starts in). A compressed file is never cut."""
    extents: dict[str, list[Any]] = {}
    for r in ranges:
        extent = extents.setdefault(r.path, [r.start, r.stop, r.compression])
        extent[0], extent[1] = min(extent[0], r.start), max(extent[1], r.stop)
    bundle: list[TextRange] = []
    held = 0
    for path, (low, high, compression) in extents.items():
        pieces = cut(path, low, high, size) if compression == UNCOMPRESSED else [TextRange(path, low, high, compression)]
        for piece in pieces:
            piece_size = piece.stop - piece.start
            if bundle and held + piece_size > size:
                yield held, tuple(bundle)
                bundle, held = [], 0
            bundle.append(piece)
            held += piece_size
    if bundle:
        yield held, tuple(bundle)


#: ``open_file(path, compression)``: a binary file object, decompressing (seekable when uncompressed)
Opener = Callable[[str, str], Any]


def read_ranges(ranges: tuple[TextRange, ...], open_file: Opener, *, skip_header_lines: int = 0, keep_ends: bool = False) -> Iterator[list[str]]:
    """The lines of every range, a block at a time (each block a list of lines)."""
    for whole in ranges:
        with open_file(whole.path, whole.compression) as handle:
            if whole.compression != UNCOMPRESSED:
                yield from stream_lines(handle, skip_header_lines, keep_ends)
                continue
            start = whole.start
            if skip_header_lines:
                after_header = header_end(handle, skip_header_lines)
                if after_header is None:
                    continue
                # The header's end is a line's start (a \n precedes it): the range reads from there.
                start = max(start, after_header)
            for block in cut(whole.path, start, whole.stop, BLOCK):
                yield range_lines(handle, block.start, block.stop, keep_ends)
