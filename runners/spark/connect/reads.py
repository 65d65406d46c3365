"""Bounded reads under Spark Connect: ReadFromText and ``Read(BoundedSource)``, split where
the files are.

A read is a Python data source (``pyspark.sql.datasource``, Spark 4.0) registered on the
run's session as ``sparkbeam_read``. Its ``partitions()`` runs on the server: it matches
the read's pattern and cuts the files into the same bundles as a classic run
(``textio.range_bundles``: byte ranges of 1 to 32 MiB; a compressed file whole; files
read whole by Python for a coder, a delimiter or an escape character), or splits the
user's ``BoundedSource`` (``split_for``), one partition per bundle. So a remote server
reads its own files, never the client's, and the client touches no file of the read.
Each partition yields one row, its bundle (``tasks.BUNDLE``). The stage that takes the
read's elements reads the bundle in its own task (``BundleReader``, bound into that task's
function): the elements go from the file into its code as objects, neither pickled into
chunks nor moved through the JVM between two Python workers; elsewhere (a collect, a sink,
a union with other inputs) ``read_task`` reads the bundles into element rows
(``tasks.ROWS``). Either way it runs in a task bound to the run's key, so a user's failure
(a missing file, bytes that are not UTF-8, the source's own code) comes back signed, as
the user's exception naming the transform. What the planning raises (no file matches, a
pattern naming a folder, the source's ``split``) travels the same way: as the one bundle
of a read that fails, raised by the reading task.

The read's op goes to the server pickled (cloudpickle, a user's source may live in
``__main__``) and base64-encoded in an option of the data source, as a task's function
goes in its closure: what the client sent, never data. Only local paths (``file://``
included) are read here, as the server's Python opens them; a URL of another file system
is read by Spark's own file sources (``remote_reads.py``). A relative pattern is made absolute on the
client, in its working directory, as a classic run reads it.
"""

from __future__ import annotations

import base64
import copy
import functools
import os
import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparkbeam.io.filesystems import FileSystems
from sparkbeam.io.localfilesystem import LocalFileSystem
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import BoundedSourceReadOp, Op, ReadTextOp
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["DATA_SOURCE", "BundleReader", "SparkbeamRead", "local_pattern", "read_frame", "read_task"]

#: the name the run's session knows the data source by
DATA_SOURCE = "sparkbeam_read"
BUNDLE = tasks.BUNDLE


def local_pattern(op: ReadTextOp) -> bool:
    """Whether the server's Python opens the read's files itself (a path, ``file://``)."""
    try:
        return isinstance(FileSystems.get_filesystem(op.source.file_pattern), LocalFileSystem)
    except ValueError:  # a scheme only the JVM serves (hdfs://, s3a://...) or none at all
        return False


class _Failed:
    """The bundle of a read whose planning failed: reading it raises the failure."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _bundles(op: Op, parallelism: int) -> list[Any]:
    """The read's bundles, as a classic run cuts them; on the server."""
    if isinstance(op, ReadTextOp):
        from sparkbeam.runners.spark import textio

        files = textio.readable_files(op, textio.matched_files(None, op.source.file_pattern))
        if not files:
            return []
        if op.source.splits_lines_in_python():
            # Each file whole, dealt round-robin over the readers.
            paths = [f.path for f in files]
            count = max(1, min(len(paths), parallelism))
            return [("files", tuple(paths[at::count])) for at in range(count)]
        return [("ranges", bundle) for bundle in textio.range_bundles(op, files, parallelism)]
    if isinstance(op, BoundedSourceReadOp):
        from sparkbeam.runners.core.sources.bounded_reads import split_for

        return [("source", bundle) for bundle in split_for(op, parallelism)]
    msg = f"'{op.label}': {type(op).__name__} is no bounded read of the Spark Connect backend"
    raise TypeError(msg)


def _elements(op: Op, bundle: Any) -> Iterator[WindowedValue]:
    if isinstance(bundle, _Failed):
        raise bundle.error
    kind, content = bundle
    if kind == "ranges":
        from sparkbeam.runners.spark.textio import read_range_bundles

        return read_range_bundles(op, (content,))
    if kind == "files":
        from sparkbeam.runners.spark.textio import read_whole_files

        return read_whole_files(op, content)
    from sparkbeam.runners.core.sources.bounded_reads import read_bundles

    return read_bundles(op, [content])


class _BundlePartition(InputPartition):
    """One bundle, cloudpickled by the planning on the server."""


class _Reader(DataSourceReader):
    def __init__(self, options: Any) -> None:
        from pyspark import cloudpickle

        self.op, self.parallelism = cloudpickle.loads(base64.b64decode(options["read"]))

    def partitions(self) -> Sequence[InputPartition]:
        from pyspark import cloudpickle

        try:
            bundles: list[Any] = _bundles(self.op, self.parallelism)
        except Exception as error:  # the reading task raises it, signed (see the module docs)
            bundles = [_Failed(error)]
        # At least one partition: a read with no bundles still yields an empty frame.
        return [_BundlePartition(cloudpickle.dumps(bundle)) for bundle in bundles] or [_BundlePartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, bytes]]:
        if partition.value is not None:
            yield (BUNDLE, 0, partition.value)


class SparkbeamRead(DataSource):
    """sparkbeam's bounded reads as a Python data source (see the module docs)."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE

    def schema(self) -> str:
        return tasks.ROWS

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(self.options)


@attrs.frozen
class BundleReader:
    """Reads the read's bundle rows into (pcoll, element) in whichever task takes them
    (``tasks.Reader``). A bundle was pickled by the planning of this run's data source
    (``_Reader.partitions``), never by a record."""

    op: Op

    def __call__(self, chunk: bytes) -> Iterator[tuple[int, WindowedValue]]:
        from pyspark import cloudpickle

        (pcoll,) = self.op.outputs
        bundle = cloudpickle.loads(chunk)
        try:
            for wv in _elements(self.op, bundle):
                yield pcoll, wv
        except UserCodeError:
            raise
        except Exception as error:  # the planning's failure, or a read's unnamed one
            raise UserCodeError(self.op.label, self.op.location, error) from error


def read_task(read: tasks.Reader, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """The elements of the partition's bundle, a chunk per row, for a reader that does not
    read the bundle itself."""

    def work(container: Any) -> Iterator[Any]:
        output = tasks.Output()
        for pcoll, wv in tasks.elements_of(tasks.rows_of(batches), [], read):
            batch = output.add(pcoll, wv)
            if batch is not None:
                yield batch
        yield output.close()

    return tasks.run_task(key, work)


def _with_absolute_pattern(op: ReadTextOp) -> ReadTextOp:
    """The read of a relative pattern as the client means it: in its working directory
    (the server's Python workers have a directory of their own)."""
    pattern = op.source.file_pattern
    if "://" in pattern or os.path.isabs(pattern):
        return op
    source = copy.copy(op.source)
    source.file_pattern = os.path.abspath(pattern)
    return attrs.evolve(op, source=source)


#: sessions the data source is registered on (by id: a session is not hashable)
_REGISTERED: set[int] = set()


def read_frame(session: Any, op: Op, parallelism: int, key: bytes) -> tuple[Any, Any, tasks.Reader]:
    """The read's DataFrame of element rows, its DataFrame of bundle rows, and what reads
    those in a task that takes them (see the module docs), read on the server."""
    from pyspark import cloudpickle

    if id(session) not in _REGISTERED:
        session.dataSource.register(SparkbeamRead)
        _REGISTERED.add(id(session))
    if isinstance(op, ReadTextOp) and not local_pattern(op):
        from sparkbeam.runners.spark.connect.remote_reads import remote_text_bundles

        bundles, remote = remote_text_bundles(session, op)
        return bundles.mapInArrow(functools.partial(read_task, remote, key), tasks.ROW_TYPE), bundles, remote
    if isinstance(op, ReadTextOp):
        op = _with_absolute_pattern(op)
    shipped = base64.b64encode(cloudpickle.dumps((op, parallelism), protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
    bundles = session.read.format(DATA_SOURCE).option("read", shipped).load()
    read = BundleReader(op)
    return bundles.mapInArrow(functools.partial(read_task, read, key), tasks.ROW_TYPE), bundles, read
