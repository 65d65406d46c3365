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

__all__ = ["read_partitions", "read_records", "save_records"]

#: a piece closes after this many records or this many pickled bytes, whichever first
PIECE_RECORDS = 4096
PIECE_BYTES = 4 << 20


def _sealed_lines(sealer: Sealer, purpose: str, records: Iterable[Any]) -> Iterator[bytes]:
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
    rdd.mapPartitions(functools.partial(_sealed_lines, sealer, purpose)).saveAsTextFile(path)
    commits.restrict(path)


def _opened(sealer: Sealer, purpose: str, where: str, lines: Iterable[bytes]) -> Iterator[Any]:
    for line in lines:
        if not line:
            continue
        try:
            sealed = base64.b64decode(line, validate=True)
        except ValueError:
            sealed = b""  # refused by open, naming the file
        payload = sealer.open(purpose, sealed, where=where)
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
        rdds.append(lines.mapPartitions(functools.partial(_opened, sealer, purpose, where)))
    return rdds[0] if len(rdds) == 1 else sc.union(rdds)


def _tagged(index: int, records: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    for record in records:
        yield index, record


def read_partitions(sc: Any, path: str, sealer: Sealer, purpose: str, partitions: int) -> Any:
    """The records ``save_records`` wrote under ``path`` from an RDD of ``partitions``
    partitions, each as ``(i, record)`` with ``i`` the partition it was written from (its
    part file's number), checked as ``read_records`` checks them. Refused naming ``path``
    if it does not hold one part file per partition."""
    parts = sorted(name for name in commits.list_names(path) if name.startswith("part-"))
    if len(parts) != partitions:
        msg = f"{path}: {len(parts)} part files where {partitions} partitions were written; the checkpoint directory was changed while the run used it"
        raise OSError(msg)
    rdds = []
    for index, name in enumerate(parts):
        where = commits.join(path, name)
        # One task per part file up to a block's size (the default of two would split even
        # a small file, doubling the tasks of the step that reads the state back).
        lines = sc.textFile(where, minPartitions=1, use_unicode=False)
        opened = lines.mapPartitions(functools.partial(_opened, sealer, purpose, where))
        rdds.append(opened.mapPartitions(functools.partial(_tagged, index)))
    return rdds[0] if len(rdds) == 1 else sc.union(rdds)
