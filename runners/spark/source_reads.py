"""What each source gives a step on Spark: a ``Dataset`` of its elements (registered per op
type under ``SPARK.sources`` in ``backend.py``).

- Create and Impulse: the elements the driver holds, spread over the state's partitions
  (an Impulse's one element also kept, so that a tiny chain off it may run on the driver,
  ``driver_stages.py``);
- ReadFromText: its lines by Beam's rules (``textio.py``), and their values alone;
- a bounded source: split on the driver, one partition per bundle, read on the executors;
- TestStream: the step's elements in one partition (one bundle per event, as Beam's
  runners make it);
- a real stream: the step's micro-batches, as its write-ahead log holds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.lowering.ops import BoundedSourceReadOp, Op, ReadTextOp
from sparkbeam.runners.core.lowering.strategies import SourceRead
from sparkbeam.runners.core.sources.sources import SourceEmission
from sparkbeam.runners.spark import kafka_rows, textio, worker
from sparkbeam.runners.spark.datasets import Dataset

if TYPE_CHECKING:
    from sparkbeam.runners.spark.backend import SparkBackend

__all__ = ["bounded_source", "driver_elements", "test_stream_step", "text_lines", "write_ahead_log"]


def _dataset(rdd: Any, **fields: Any) -> Dataset:
    return Dataset(rdd, **fields)


def driver_elements(backend: SparkBackend, op: Op, emission: SourceEmission) -> Dataset:
    """A Create's or an Impulse's elements, which the driver holds."""
    kind = kind_of(op)
    elements = [] if kind.driver_elements is None else kind.driver_elements(op)
    # Kept on the driver where the kind's read says so (an Impulse's one element: a tiny
    # chain off it may run there, driver_stages.py); a Create's values only go to the
    # executors.
    return backend.from_driver(elements, keep=kind.read(op) is SourceRead.HELD)


def text_lines(backend: SparkBackend, op: ReadTextOp, emission: SourceEmission) -> Dataset:
    rdd, values = textio.read_text(backend.sc, op)
    return _dataset(rdd, values=values)


def bounded_source(backend: SparkBackend, op: BoundedSourceReadOp, emission: SourceEmission) -> Dataset:
    """The source split on the driver, one partition per bundle, read on the executors."""
    from sparkbeam.runners.spark.bounded_reads import read_bounded_source

    rdd, empty, values = read_bounded_source(backend.sc, op)
    return _dataset(rdd, known_empty=empty, values=values)


def test_stream_step(backend: SparkBackend, op: Op, emission: SourceEmission) -> Dataset:
    """The step's elements, shipped as plain tuples (pickled in C, a WindowedValue through
    Python-level calls per element) and rebuilt on the executor, in one partition: one
    bundle per TestStream event, as Beam's runners make it."""
    shipped = backend.sc.parallelize(list(map(tuple, emission.elements)), 1)
    return _dataset(shipped.mapPartitions(worker.windowed_values))


def write_ahead_log(backend: SparkBackend, op: Op, emission: SourceEmission) -> Dataset:
    """A real stream's micro-batches of the step, as its write-ahead log holds them (each
    piece checked with the stream's key before it is unpickled, ``sealed_files.py``)."""
    from sparkbeam.runners.spark import sealed_files

    sc = backend.sc
    if not emission.wal_paths:
        return _dataset(sc.emptyRDD(), known_empty=True)
    sealer = backend.wal_sealer
    if sealer is None:
        msg = f"'{op.label}': a write-ahead log is read only by a stream run that holds its checkpoint's key"
        raise RuntimeError(msg)
    batches = [sealed_files.read_records(sc, path, sealer, "wal") for path in emission.wal_paths]
    records = batches[0] if len(batches) == 1 else sc.union(batches)
    # a Kafka batch's columns pieces become elements here, in the same Python pass (kafka_rows.py)
    return _dataset(records.mapPartitions(kafka_rows.wal_elements))
