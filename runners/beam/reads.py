"""Bounded ``Read``: a Beam ``BoundedSource`` split on the driver and read on the executors.

Beam expands ``Read(source)`` into Impulse and a splittable DoFn; sparkbeam reads it as
Beam's batch runners read bounded sources: the source is split before the run into
bundles of about ``desired_bundle_size`` bytes, the bundles (pickled with Beam's pickler)
become the elements of a bounded source stage, Spark spreads them over its partitions, and
``ReadBundles`` reads each with the source's own range tracker on an executor, run as a
FlatMap by the engine's DoFnRunner (``plain.py``: a ``TimestampedValue`` the source yields
keeps its timestamp, as Beam's output handler keeps it). Beam's ``ReadFromText`` at its
defaults is read instead as a bounded source of the engine, its lines read in C
(``text_ranges.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from apache_beam.internal import pickler
from apache_beam.runners.common import DoFnSignature
from apache_beam.transforms import core as beam_core

from sparkbeam.runners.beam.plain import _CONVERTERS, _UNSEEN, augmented, engine_output

__all__ = ["ReadBundles", "pickled_bundles", "reading_label", "source_bundles"]

_MIN_BUNDLE_BYTES = 1 << 20
_DEFAULT_BUNDLE_BYTES = 64 << 20
#: bundles to aim for, enough for every core of a typical local or small cluster
_TARGET_BUNDLES = 32


def source_bundles(source: Any) -> list[Any]:
    """The source's ``SourceBundle``s, as its own ``split`` makes them."""
    try:
        estimate = source.estimate_size()
    except Exception:  # a source that cannot estimate is read in bundles of the default size
        estimate = None
    if estimate:
        desired = max(_MIN_BUNDLE_BYTES, int(estimate) // _TARGET_BUNDLES)
    else:
        desired = _DEFAULT_BUNDLE_BYTES
    return list(source.split(desired))


def pickled_bundles(bundles: list[Any]) -> tuple[bytes, ...]:
    """Each bundle pickled by Beam's pickler (user sources may live in ``__main__``)."""
    return tuple(pickler.dumps(bundle) for bundle in bundles)


class ReadBundles:
    """Reads one pickled ``SourceBundle`` per call, for the engine's DoFnRunner as a FlatMap
    (``plain.py``): records of Beam's types become the engine's (a ``TimestampedValue``
    keeps its timestamp, as Beam's output handler keeps it), in this one generator, and a
    failure is named after the reading step as Beam's DoFnRunner names it."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, pickled: bytes) -> Iterator[Any]:
        converters, unseen = _CONVERTERS, _UNSEEN
        try:
            bundle = pickler.loads(pickled)
            tracker = bundle.source.get_range_tracker(bundle.start_position, bundle.stop_position)
            for record in bundle.source.read(tracker):
                convert = converters.get(type(record), unseen)
                yield record if convert is None else engine_output(record)
        except Exception as error:
            raise augmented(error, self.label) from error


def reading_label(node: Any) -> str:
    """The label of the splittable ParDo that reads in Beam's expansion of ``Read``
    (``.../SDFBoundedSourceReader/ParDo(SDFBoundedSourceDoFn)``): the source's metrics go
    under the step where Beam's runners put them."""
    for part in node.parts:
        if isinstance(part.transform, beam_core.ParDo) and DoFnSignature(part.transform.fn).is_splittable_dofn():
            return str(part.full_label)
        found = reading_label(part)
        if not found.endswith("/ReadBundle"):
            return found
    return f"{node.full_label}/ReadBundle"
