"""``Read(BoundedSource)`` on Spark: one partition per bundle of the source.

The driver splits the source for the session's default parallelism
(``runners/core/sources/bounded_reads.py``) and pickles each bundle with cloudpickle (a user's
source may live in ``__main__``); each partition unpickles its one bundle and reads it
with the source's own range tracker on an executor. A source that ``yields_plain_values``
is read as its records alone too, for a stage that takes them so (``Dataset.values``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from itertools import repeat
from typing import Any

from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS
from sparkbeam.runners.core.lowering.ops import BoundedSourceReadOp
from sparkbeam.runners.core.sources.bounded_reads import (
    read_bundle_values_of,
    read_bundles,
    split_for,
)
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value

__all__ = ["read_bounded_source"]


def _read_partition(label: str, location: str, pickled_bundles: Iterator[bytes]) -> Iterator[WindowedValue]:
    return read_bundles(_reading_op(label, location), _bundles(pickled_bundles))


def _read_partition_values(label: str, location: str, pickled_bundles: Iterator[bytes]) -> Iterator[Any]:
    return read_bundle_values_of(_reading_op(label, location), _bundles(pickled_bundles))


def _reading_op(label: str, location: str) -> BoundedSourceReadOp:
    # Only what reading needs travels with the task: the bundle carries its source.
    return BoundedSourceReadOp(label=label, location=location, inputs=(), outputs=(), source=None)


def _bundles(pickled_bundles: Iterator[bytes]) -> list[Any]:
    from pyspark import cloudpickle

    return [cloudpickle.loads(data) for data in pickled_bundles]


def _as_global_elements(values: Iterator[Any]) -> Iterator[WindowedValue]:
    # Built by map and zip in C: no Python frame per element.
    return map(new_windowed_value, zip(values, repeat(MIN_TIMESTAMP.micros), repeat(GLOBAL_WINDOWS), repeat(PANE_INFO_UNKNOWN)))


def read_bounded_source(sc: Any, op: BoundedSourceReadOp) -> tuple[Any, bool, Any]:
    """An RDD of the source's elements, one partition per bundle; whether it is known empty;
    and an RDD of the elements' values alone when the source ``yields_plain_values`` (each
    in the global window at the minimum timestamp with an unknown pane), else None."""
    from pyspark import cloudpickle

    bundles = split_for(op, sc.defaultParallelism)
    if not bundles:
        return sc.emptyRDD(), True, None
    pickled = sc.parallelize([cloudpickle.dumps(bundle) for bundle in bundles], len(bundles))
    name = f"{op.label} ({len(bundles)} bundles)"
    if getattr(op.source, "yields_plain_values", False) is True:
        values = pickled.mapPartitions(functools.partial(_read_partition_values, op.label, op.location))
        values.setName(name)
        return values.mapPartitions(_as_global_elements), False, values
    rdd = pickled.mapPartitions(functools.partial(_read_partition, op.label, op.location))
    rdd.setName(name)
    return rdd, False, None
