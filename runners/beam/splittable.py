"""Splittable DoFns with bounded restrictions, run on the executors.

A Beam ParDo whose DoFn has a ``DoFn.RestrictionParam`` is lowered, as Beam's portable
runners expand it, into three parts (labels under the ParDo's own):

1. ``SplitRestrictions``: per element, the restriction provider's ``initial_restriction``,
   then ``split_and_size`` (``split`` and ``restriction_size``), each part paired with its
   watermark estimator's initial state: ``((element, (part, estimator_state)), size)``,
   in the element's windows, at its timestamp.
2. ``Redistribute``: the parts spread over Spark partitions by a grouping on a key taken
   from each part's bytes (``ScatterParts``, a grouping in the global window with an
   ``Always`` trigger that never waits for a watermark, ``gather_parts``). Each part's
   timestamp, windows and pane ride along and are restored after, as Beam's ``Reshuffle``
   does; the element and restriction cross the shuffle pickled with Beam's pickler (they
   may be objects of classes Spark's workers cannot import by name, as Beam's coders allow).
3. With ``--drain`` only, ``TruncateRestrictions``: each part truncated by its provider's
   ``truncate`` (by default a bounded restriction is kept whole and an unbounded one
   dropped), as Beam's runners truncate restrictions when a pipeline is drained.
4. The ParDo itself (``BeamSplittableParDoOp``, its own label, so its metrics are where
   Beam puts them): each part is processed by Beam's ``DoFnRunner`` with a tracker the
   provider creates (``process_with_sized_restriction``), and the residual a DoFn leaves by
   self-checkpointing (``tracker.defer_remainder``) is processed again, once its resume
   time has come, until nothing remains. A self-checkpoint ends a bundle in Beam's sense:
   the callbacks the DoFn registered with ``DoFn.BundleFinalizerParam`` run once the part's
   output has been handed on, before its residual resumes (not at the task's end).

A DoFn marked ``unbounded_per_element`` is refused by the translator (``translate.py``),
but for Beam's periodic impulse (``PeriodicImpulse``, ``PeriodicSequence``), whose
restriction ends at each element's stop timestamp: an element with none is refused here.
"""

from __future__ import annotations

import heapq
import itertools
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import attrs
from apache_beam import pvalue as beam_pvalue
from apache_beam.internal import pickler
from apache_beam.runners.common import DoFnSignature
from apache_beam.runners.worker import statesampler
from apache_beam.transforms import core as beam_core
from apache_beam.transforms import periodicsequence as beam_periodic
from apache_beam.transforms.periodicsequence import ImpulseSeqGenDoFn
from apache_beam.utils import timestamp as beam_timestamp
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from sparkbeam.core import DoFn, _CallableDoFn
from sparkbeam.runners.beam.elements import to_beam
from sparkbeam.runners.beam.pardo import BeamDoFnRunner, BeamParDoOp
from sparkbeam.runners.core.elements.execution import pardo_joiner, register_kind
from sparkbeam.runners.core.lowering.errors import UnsupportedError, UserCodeError
from sparkbeam.runners.core.lowering.ops import GroupOp, ParDoOp, WindowIntoOp
from sparkbeam.trigger import AccumulationMode, Always
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import GlobalWindows, TimestampCombiner
from sparkbeam.windowing import Windowing

__all__ = [
    "REDISTRIBUTE_WINDOWING",
    "BeamSplittableParDoOp",
    "ScatterParts",
    "SplitRestrictions",
    "TruncateRestrictions",
    "endless_periodic_impulse",
    "gather_parts",
    "is_endless_periodic_impulse",
    "splittable_ops",
]

#: The redistribution's grouping: the global window, a pane per element as soon as it
#: arrives (never waiting for a watermark), each part's own metadata restored after.
REDISTRIBUTE_WINDOWING = Windowing(
    windowfn=GlobalWindows(),
    triggerfn=Always(),
    accumulation_mode=AccumulationMode.DISCARDING,
    timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
)


class SplitRestrictions(beam.DoFn):
    """Beam's ``PairWithRestriction`` and ``SplitAndSizeRestrictions`` in one DoFn: the
    parts of each element's initial restriction, sized, each with its estimator state."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def setup(self) -> None:
        signature = DoFnSignature(self.fn)
        self.restrictions = signature.get_restriction_provider()
        self.estimators = signature.get_watermark_estimator_provider()
        self.periodic = isinstance(self.fn, ImpulseSeqGenDoFn)

    def process(self, element: Any) -> Iterator[Any]:
        if self.periodic and Timestamp.of(element[1]) >= MAX_TIMESTAMP:
            msg = (
                f"a periodic impulse with no stop timestamp ({element!r}) never ends; sparkbeam's "
                "Beam runner runs splittable DoFns with bounded restrictions only: give it a stop_timestamp"
            )
            raise UnsupportedError(msg)
        initial = self.restrictions.initial_restriction(element)
        for part, size in self.restrictions.split_and_size(element, initial):
            if size < 0:
                msg = f"restriction_size of {part!r} is {size}; sizes must be >= 0"
                raise ValueError(msg)
            yield ((element, (part, self.estimators.initial_estimator_state(element, part))), size)


class TruncateRestrictions(beam.DoFn):
    """Beam's ``TruncateSizedRestriction``, run when a pipeline is drained: each sized part
    as its provider truncates it, sized again; a part truncated to None is dropped."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def setup(self) -> None:
        self.restrictions = DoFnSignature(self.fn).get_restriction_provider()

    def process(self, sized: Any) -> Iterator[Any]:
        (element, (part, estimator_state)), _ = sized
        truncated = self.restrictions.truncate(element, part)
        if truncated is not None:
            yield ((element, (truncated, estimator_state)), self.restrictions.restriction_size(element, truncated))


class ScatterParts(DoFn):
    """A part -> (spreading key, its pickled value with its timestamp, windows and pane).

    The key is the bundle's first part's checksum plus the part's position in the bundle:
    the same on a task's retry (a random key would not be), consecutive within a bundle so
    that the parts of one element (often all there is: one file pattern, one source) go
    round the partitions, and from another base in each bundle."""

    def setup(self) -> None:
        self.position = itertools.count()
        self.base: int | None = None

    def process(self, element: Any, wv: Any = DoFn.WindowedValueParam) -> Iterator[tuple[int, WindowedValue]]:
        payload = pickler.dumps(element)
        if self.base is None:
            self.base = zlib.crc32(payload)
        key = (self.base + next(self.position)) & 0xFFFFFFFF
        yield key, WindowedValue(payload, wv.timestamp_micros, wv.windows, wv.pane_info)


def gather_parts(grouped: tuple[int, Iterable[WindowedValue]]) -> Iterator[WindowedValue]:
    """The parts a key got, each back at its own timestamp, in its own windows and pane."""
    _, parts = grouped
    for part in parts:
        yield WindowedValue(pickler.loads(part.value), part.timestamp_micros, part.windows, part.pane_info)


@attrs.frozen
class BeamSplittableParDoOp(BeamParDoOp):
    """The processing ParDo of a splittable DoFn: its input is the sized parts that
    ``SplitRestrictions`` made, its DoFn the user's."""


class BeamSplittableDoFnRunner(BeamDoFnRunner):
    """Processes each part with its tracker, then the residuals the DoFn defers, each once
    its resume time has come (the earliest first), until none is left."""

    def process(self, wv: WindowedValue) -> None:
        sequence = itertools.count()  # ties in resume time keep the order residuals came in
        pending: list[tuple[float, int, Any]] = [(0.0, next(sequence), to_beam(wv))]
        while pending:
            resume_at, _, part = heapq.heappop(pending)
            wait = resume_at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            residuals = self._process_part(part, wv)
            if residuals and self.runner.bundle_finalizer_param.has_callbacks():
                # A self-checkpoint ends Beam's bundle: its output is handed on (above), then its
                # finalization callbacks run, before the residual resumes (as a new bundle).
                self.finalize_bundle()
            for residual in residuals:
                delay = residual.deferred_timestamp
                seconds = delay.micros / 1e6 if delay is not None else 0.0
                heapq.heappush(pending, (time.monotonic() + max(0.0, seconds), next(sequence), residual.residual_value))

    def _process_part(self, part: Any, wv: WindowedValue) -> list[Any]:
        previous = statesampler.get_current_tracker()
        statesampler.set_current_tracker(self.tracker)  # the DoFn's metrics go to the engine's
        try:
            return list(self.runner.process_with_sized_restriction(part) or ())
        except UserCodeError:
            raise  # from a DoFn downstream in the same stage, already named
        except Exception as error:
            raise UserCodeError(self.label, self.location, error, wv.value[0][0]) from error
        finally:
            statesampler.set_current_tracker(previous)


# Splits and checkpoints its restrictions within a task: never a tiny stage on the driver.
register_kind(BeamSplittableParDoOp, like=ParDoOp, join_body=pardo_joiner(BeamSplittableDoFnRunner), driver_runnable=False)


def endless_periodic_impulse(node: Any, *, inside_one: bool) -> bool:
    """Whether an unbounded_per_element DoFn is known never to end: Beam's periodic impulse
    ends at its elements' stop timestamps, and one with no stop is refused here when the
    PeriodicImpulse is in sight (as applied, or, after Beam's runner-API round trip, as
    TestPipeline's, through the Create or the closure that makes its elements), else on the
    executor, when its element arrives. Any other runs until its restrictions are done, as
    on Beam's local runners (an unbounded source's reader says when it has finished)."""
    if not isinstance(node.transform.fn, beam_periodic.ImpulseSeqGenDoFn):
        return False
    return inside_one or _fed_without_a_stop(node)


def is_endless_periodic_impulse(transform: Any) -> bool:
    if not isinstance(transform, beam_periodic.PeriodicImpulse):
        return False
    return _endless_stop(transform.stop_ts)


def _endless_stop(stop: Any) -> bool:
    try:
        return beam_timestamp.Timestamp.of(stop) >= beam_timestamp.MAX_TIMESTAMP
    except (TypeError, ValueError):
        return False  # not a timestamp: the executor's check decides


def _fed_without_a_stop(node: Any) -> bool:
    """Whether the (start, stop, interval) elements an ImpulseSeqGenDoFn reads come from a
    Create, or from a Map closing over a PeriodicImpulse (its rebasing modes), with no stop."""
    (main,) = [v for v in node.inputs if isinstance(v, beam_pvalue.PCollection)]
    producer = main.producer
    ancestor = producer
    while ancestor is not None and ancestor.transform is not None:
        if isinstance(ancestor.transform, beam_core.Create):
            return any(isinstance(value, tuple) and len(value) == 3 and _endless_stop(value[1]) for value in ancestor.transform.values)
        ancestor = ancestor.parent
    fn = getattr(producer.transform, "fn", None) if producer is not None else None
    impulse = _closed_over_periodic_impulse(getattr(fn, "_fn", fn), depth=3)
    return impulse is not None and is_endless_periodic_impulse(impulse)


def _closed_over_periodic_impulse(function: Any, depth: int) -> Any:
    """A PeriodicImpulse that ``function``'s closure (or a function it closes over) holds."""
    for cell in getattr(function, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, beam_periodic.PeriodicImpulse):
            return value
        if depth > 1 and callable(value):
            found = _closed_over_periodic_impulse(value, depth - 1)
            if found is not None:
                return found
    return None


def splittable_ops(t: Any, process: BeamParDoOp, input_windowing: Windowing, *, drain: bool = False) -> list[Any]:
    """The ops of a splittable ParDo (``process`` as translated for an ordinary one):
    split, redistribute, truncate if the pipeline is drained, process. ``t`` is the
    translation, which numbers PCollections."""
    label, location = process.label, process.location
    (source,) = process.inputs
    bounded = t.infos[source].is_bounded

    def pcoll(name: str, windowing: Windowing) -> int:
        return int(t.new_pcoll(f"{label}/{name}.out", windowing, bounded))

    split = pcoll("SplitRestrictions", input_windowing)
    scattered = pcoll("Redistribute/Scatter", input_windowing)
    global_parts = pcoll("Redistribute/InGlobalWindow", REDISTRIBUTE_WINDOWING)
    grouped = pcoll("Redistribute/Group", REDISTRIBUTE_WINDOWING)
    gathered = pcoll("Redistribute/Gather", input_windowing)

    def plain(name: str, dofn: Any, inputs: int, outputs: int, windowfn: Any) -> ParDoOp:
        return ParDoOp(
            label=f"{label}/{name}",
            location=location,
            inputs=(inputs,),
            outputs=(outputs,),
            dofn=dofn,
            args=(),
            kwargs={},
            output_tags=(None,),
            input_windowfn=windowfn,
        )

    fields = {field.name: getattr(process, field.name) for field in attrs.fields(BeamParDoOp)}
    truncating: list[Any] = []
    parts = gathered
    if drain:
        parts = pcoll("TruncateRestrictions", input_windowing)
        truncating.append(
            BeamParDoOp(
                label=f"{label}/TruncateRestrictions",
                location=location,
                inputs=(gathered,),
                outputs=(parts,),
                dofn=TruncateRestrictions(process.dofn),
                args=(),
                kwargs={},
                output_tags=(None,),
                input_windowfn=input_windowing.windowfn,
                beam_windowing=process.beam_windowing,
            )
        )
    return [
        BeamParDoOp(
            label=f"{label}/SplitRestrictions",
            location=location,
            inputs=(source,),
            outputs=(split,),
            dofn=SplitRestrictions(process.dofn),
            args=(),
            kwargs={},
            output_tags=(None,),
            input_windowfn=input_windowing.windowfn,
            beam_windowing=process.beam_windowing,
        ),
        plain("Redistribute/Scatter", ScatterParts(), split, scattered, input_windowing.windowfn),
        WindowIntoOp(label=f"{label}/Redistribute/InGlobalWindow", location=location, inputs=(scattered,), outputs=(global_parts,), windowfn=GlobalWindows()),
        GroupOp(
            label=f"{label}/Redistribute/Group",
            location=location,
            inputs=(global_parts,),
            outputs=(grouped,),
            windowing=REDISTRIBUTE_WINDOWING,
            keep_pane_indices=False,
        ),
        plain("Redistribute/Gather", _CallableDoFn(gather_parts, "FlatMap"), grouped, gathered, GlobalWindows()),
        *truncating,
        BeamSplittableParDoOp(**{**fields, "inputs": (parts,)}),
    ]
