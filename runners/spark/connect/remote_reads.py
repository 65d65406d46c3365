"""ReadFromText of files only the server's JVM reaches (``hdfs://``, ``s3a://``, any file
system the server's Hadoop is configured for) under Spark Connect.

The server's Python workers open local files only (``reads.py``), and a Connect client has
no Hadoop file system, so these files are matched and read by Spark's own file sources on
the server, as a classic run reads them through its driver's JVM (``textio.read_text``):

- **Matching** lists the pattern with Spark's ``binaryFile`` source, its paths and lengths
  only (the source reads no content then): Hadoop's glob syntax, a folder standing for the
  files in it (hidden and ``_``-named ones left out), as a classic run matches a URL. A
  pattern that matches nothing is refused as Beam refuses it (unless the read does not
  validate); any other failure of the listing (an unreachable NameNode, a file system the
  server has no connector for, refused credentials) is refused naming the transform, the
  pattern and the server's first line about it.
- **Plain lines** (no coder, delimiter or escape character, no header lines, nothing
  compressed) are read by Spark's splittable text source: a file of any size split over
  tasks, with the same three differences from Beam's lines as a classic run's (README).
  Each line reaches the stage's task as a row of its own, read there as the element
  (``RemoteLines``).
- **Everything else** (compressed files, header lines, a coder, a delimiter or an escape
  character) reads each file whole with ``binaryFile`` (a file up to Spark's
  ``spark.sql.sources.binaryFile.maxLength``, 2 GiB) and splits it in the stage's task by
  Beam's rules (``textio.contents_elements``), as a classic run does with ``binaryFiles``.
  A row carries the file's path and bytes as ``path NUL bytes``: nothing in a read's rows
  is ever unpickled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from sparkbeam.io.filesystem import CompressionTypes
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import ReadTextOp
from sparkbeam.runners.spark import textio
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.stream_rows import functions_of
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["RemoteFiles", "RemoteLines", "remote_text_bundles"]

_SEPARATOR = b"\x00"  # a path never holds it


def _where(op: ReadTextOp) -> str:
    return f"'{op.label}' (applied at {op.location})"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def matched(session: Any, op: ReadTextOp) -> list[textio.MatchedFile]:
    """The files the read's pattern matches, sorted, as the server's file system lists them."""
    pattern = op.source.file_pattern
    try:
        rows = session.read.format("binaryFile").load(pattern).select("path", "length").collect()
    except Exception as error:
        text = str(error)
        if "PATH_NOT_FOUND" in text or "Path does not exist" in text:
            return []
        msg = f"{_where(op)}: the Spark Connect server could not list {pattern!r}: {_first_line(error)}"
        raise TransformError(msg) from None
    return sorted((textio.MatchedFile(row.path, row.length, False) for row in rows), key=lambda f: f.path)


def remote_text_bundles(session: Any, op: ReadTextOp) -> tuple[Any, tasks.Reader]:
    """The DataFrame of the read's rows (``tasks.BUNDLE`` rows) and what reads each row into
    elements in the task that takes them (see the module docs)."""
    F = functions_of(session)
    files = textio.readable_files(op, matched(session, op))
    source = op.source
    plain = not source.splits_lines_in_python() and source.strip_trailing_newlines and not source.skip_header_lines
    if plain and all(textio.compression_of(source, f.path) == CompressionTypes.UNCOMPRESSED for f in files):
        reader: tasks.Reader = RemoteLines(op)
    else:
        reader = RemoteFiles(op)
    if not files:
        return session.createDataFrame([], tasks.ROW_TYPE), reader
    paths = [f.path for f in files]
    if isinstance(reader, RemoteLines):
        frame = session.read.text(paths)
        chunk = F.col("value").cast("binary")
    else:
        frame = session.read.format("binaryFile").load(paths)
        chunk = F.concat(F.encode(F.col("path"), "UTF-8"), F.lit(bytearray(_SEPARATOR)), F.col("content"))
    rows = frame.select(
        F.lit(tasks.BUNDLE).cast("int").alias("pcoll"), F.lit(0).cast("long").alias("h"), chunk.alias("chunk")
    )
    return rows, reader


@attrs.frozen
class RemoteLines:
    """Reads a row of Spark's text source (a line, UTF-8) into its element."""

    op: ReadTextOp

    def __call__(self, chunk: bytes) -> Iterator[tuple[int, WindowedValue]]:
        (pcoll,) = self.op.outputs
        for wv in textio.line_elements((chunk.decode("utf-8"),)):
            yield pcoll, wv


@attrs.frozen
class RemoteFiles:
    """Reads a row of a whole file (``path NUL bytes``) into its elements by Beam's rules."""

    op: ReadTextOp

    def __call__(self, chunk: bytes) -> Iterator[tuple[int, WindowedValue]]:
        (pcoll,) = self.op.outputs
        path, _, data = chunk.partition(_SEPARATOR)
        try:
            for wv in textio.contents_elements(self.op, ((path.decode("utf-8"), data),)):
                yield pcoll, wv
        except UserCodeError:
            raise
        except Exception as error:
            raise UserCodeError(self.op.label, self.op.location, error) from error
