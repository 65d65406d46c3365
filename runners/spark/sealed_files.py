"""Records that executors write to and read from the checkpoint directory, sealed.

Keyed state and the write-ahead log are RDDs of Python objects. Spark's own
``saveAsPickleFile`` / ``pickleFile`` would unpickle whatever the files hold (and go
through Java serialisation on the way); here each partition's records are pickled a few
megabytes at a time, each piece sealed (``sealing.py``) and written as one base64 line of
a text file through Hadoop's ``TextOutputFormat``, which takes any Hadoop URL. Reading
takes the lines back as bytes (Spark passes text lines to Python as data, never through
a pickle), checks each piece's tag and only then unpickles it. Each part file is read by
an RDD of its own, so that a piece that fails names its file.

The sealer (the key with it) travels to the executors inside the functions of the job, as
every stage's functions do: turn on Spark's RPC encryption
(``spark.network.crypto.enabled``) where the network between the driver and the executors
is not trusted.
"""

from __future__ import annotations

import base64
import functools
import io
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.spark import old_paths
from sparkbeam.runners.spark.sealing import Sealer

__all__ = ["checked_pieces", "opened", "read_records", "save_records", "sealed_lines", "unpickled"]

#: a piece closes after this many records or this many pickled bytes, whichever first
PIECE_RECORDS = 4096
PIECE_BYTES = 4 << 20


def sealed_lines(sealer: Sealer, purpose: str, records: Iterable[Any]) -> Iterator[bytes]:
    """A part file's lines for ``records``: pickled in pieces, each sealed and base64-encoded
    (``save_records`` writes them from an RDD; a Spark Connect task writes the same lines)."""
    buffer: io.BytesIO | None = None
    pickler: pickle.Pickler | None = None
    count = 0
    for record in records:
        if buffer is None or pickler is None:
            buffer = io.BytesIO()
            pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
            count = 0
        pickler.dump(record)
        count += 1
        if count >= PIECE_RECORDS or buffer.tell() >= PIECE_BYTES:
            yield base64.b64encode(sealer.seal(purpose, buffer.getvalue()))
            buffer = pickler = None
    if buffer is not None:
        yield base64.b64encode(sealer.seal(purpose, buffer.getvalue()))


def save_records(rdd: Any, path: str, sealer: Sealer, purpose: str) -> None:
    """Write ``rdd``'s records under ``path`` (a new directory of part files), sealed."""
    rdd.mapPartitions(functools.partial(sealed_lines, sealer, purpose)).saveAsTextFile(path)
    commits.restrict(path)


def opened(sealer: Sealer, purpose: str, where: str, lines: Iterable[bytes]) -> Iterator[Any]:
    for payload in checked_pieces(sealer, purpose, where, lines):
        yield from unpickled(payload)


def checked_pieces(sealer: Sealer, purpose: str, where: str, lines: Iterable[bytes]) -> Iterator[memoryview]:
    """The pickled pieces of a part file's ``lines``, each checked with ``sealer`` (one that
    fails is refused naming ``where``); nothing is unpickled (``unpickled`` does that)."""
    for line in lines:
        if not line:
            continue
        try:
            sealed = base64.b64decode(line, validate=True)
        except ValueError:
            sealed = b""  # refused by open, naming the file
        yield sealer.open(purpose, sealed, where=where)


def unpickled(payload: bytes | memoryview) -> Iterator[Any]:
    """The records of one checked piece (``checked_pieces``), in the order they were written."""
    source = io.BytesIO(payload)
    unpickler = old_paths.Unpickler(source)
    end = len(payload)
    while source.tell() < end:
        yield unpickler.load()


def read_records(sc: Any, path: str, sealer: Sealer, purpose: str) -> Any:
    """The records ``save_records`` wrote under ``path``, each piece checked before it is
    unpickled (a piece that fails stops the job, naming its file)."""
    parts = sorted(name for name in commits.list_names(path) if name.startswith("part-"))
    if not parts:
        return sc.emptyRDD()
    rdds = []
    for name in parts:
        where = commits.join(path, name)
        # One task per part file up to a block's size: the default of two splits even a
        # small file, doubling the Python tasks (each with its fixed cost) of the step that reads it.
        lines = sc.textFile(where, minPartitions=1, use_unicode=False)
        rdds.append(lines.mapPartitions(functools.partial(opened, sealer, purpose, where)))
    return rdds[0] if len(rdds) == 1 else sc.union(rdds)
