"""``Read(BoundedSource)`` on Spark: one partition per bundle of the source.

The driver splits the source for the session's default parallelism
(``runners/core/bounded_reads.py``) and pickles each bundle with cloudpickle (a user's
source may live in ``__main__``); each partition unpickles its one bundle and reads it
with the source's own range tracker on an executor.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from sparkbeam.runners.core.bounded_reads import read_bundles, split_for
from sparkbeam.runners.core.ops import BoundedSourceReadOp
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["read_bounded_source"]


def _read_partition(label: str, location: str, pickled_bundles: Iterator[bytes]) -> Iterator[WindowedValue]:
    from pyspark import cloudpickle

    # Only what reading needs travels with the task: the bundle carries its source.
    op = BoundedSourceReadOp(label=label, location=location, inputs=(), outputs=(), source=None)
    bundles = [cloudpickle.loads(data) for data in pickled_bundles]
    yield from read_bundles(op, bundles)


def read_bounded_source(sc: Any, op: BoundedSourceReadOp) -> tuple[Any, bool]:
    """An RDD of the source's elements, one partition per bundle; and whether it is known empty."""
    from pyspark import cloudpickle

    bundles = split_for(op, sc.defaultParallelism)
    if not bundles:
        return sc.emptyRDD(), True
    pickled = [cloudpickle.dumps(bundle) for bundle in bundles]
    rdd = sc.parallelize(pickled, len(pickled)).mapPartitions(functools.partial(_read_partition, op.label, op.location))
    rdd.setName(f"{op.label} ({len(pickled)} bundles)")
    return rdd, False
