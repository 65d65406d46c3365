"""Bounded ``Read``: a Beam ``BoundedSource`` split on the driver and read on the executors.

Beam expands ``Read(source)`` into Impulse and a splittable DoFn; sparkbeam reads it as
Beam's batch runners read bounded sources: the source is split before the run into
bundles of about ``desired_bundle_size`` bytes, the bundles (pickled with Beam's pickler)
become the elements of a bounded source stage, Spark spreads them over its partitions, and
``ReadBundle`` reads each with the source's own range tracker on an executor.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.internal import pickler

__all__ = ["ReadBundle", "split_source"]

_MIN_BUNDLE_BYTES = 1 << 20
_DEFAULT_BUNDLE_BYTES = 64 << 20
#: bundles to aim for, enough for every core of a typical local or small cluster
_TARGET_BUNDLES = 32


def split_source(source: Any) -> tuple[bytes, ...]:
    """The source's bundles, each pickled (user sources may live in ``__main__``)."""
    try:
        estimate = source.estimate_size()
    except Exception:  # a source that cannot estimate is read in bundles of the default size
        estimate = None
    if estimate:
        desired = max(_MIN_BUNDLE_BYTES, int(estimate) // _TARGET_BUNDLES)
    else:
        desired = _DEFAULT_BUNDLE_BYTES
    return tuple(pickler.dumps(bundle) for bundle in source.split(desired))


class ReadBundle(beam.DoFn):
    """Reads one pickled ``SourceBundle``; a ``TimestampedValue`` the source yields keeps
    its timestamp (Beam's output handling windows it)."""

    def process(self, pickled: bytes) -> Any:
        bundle = pickler.loads(pickled)
        tracker = bundle.source.get_range_tracker(bundle.start_position, bundle.stop_position)
        yield from bundle.source.read(tracker)
