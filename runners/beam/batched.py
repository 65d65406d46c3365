"""Beam's batched DoFns: ``process_batch``, and ``process`` or ``process_batch`` yielding batches.

Beam's SDK harness hands a DoFn that defines only ``process_batch`` batches of its input:
it buffers the elements a bundle brings, up to 4,096, and at that size or at the end of
the bundle makes batches of them with the DoFn's input batch converter (one batch per run
of elements with equal timestamp, windows and pane: a ``HomogeneousWindowedBatch``).
A DoFn that yields batches (``process_batch``, or ``process`` declared with
``@yields_batches``) has them exploded into elements with its output batch converter
for consumers that take elements; every consumer here takes elements, so every output
batch is exploded. ``BeamBatchedDoFnRunner`` does both around Beam's own ``DoFnRunner``
(``process_batch`` is Beam's ``DoFnRunner.process_batch``), so the DataFrame API
(``to_dataframe``, ``to_pcollection``), whose transforms are such DoFns, runs as on Beam.

The converters are those Beam infers when the ParDo is applied
(``ParDo.infer_batch_converters``); the translator infers them again if Beam's runner-API
round trip lost them.
"""

from __future__ import annotations

import warnings
from typing import Any

import attrs
from apache_beam.runners import common
from apache_beam.runners.worker.operations import InefficientExecutionWarning
from apache_beam.utils import windowed_value as beam_wv

from sparkbeam.runners.beam.pardo import (
    BeamDoFnRunner,
    BeamParDoOp,
    Emit,
    _EngineReceiver,
    _Receivers,
)
from sparkbeam.runners.core.elements.execution import pardo_joiner, register_kind
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["BATCH_SIZE", "BeamBatchedDoFnRunner", "BeamBatchedParDoOp", "is_batched", "takes_batches", "warn_if_rebatched"]

#: the most elements one input batch holds (Beam's GeneralPurposeConsumerSet.MAX_BATCH_SIZE)
BATCH_SIZE = 4096


def takes_batches(fn: Any) -> bool:
    """Whether a Beam DoFn takes its input in batches only (``process_batch`` and no
    ``process``; with both, Beam hands elements to ``process``)."""
    return bool(getattr(fn, "_process_batch_defined", False)) and not getattr(fn, "_process_defined", True)


def is_batched(fn: Any) -> bool:
    """Whether a Beam DoFn takes its input in batches only, or yields batches."""
    return takes_batches(fn) or bool(getattr(fn, "_can_yield_batches", False))


@attrs.frozen
class BeamBatchedParDoOp(BeamParDoOp):
    """A ParDo whose Beam DoFn takes batches (``process_batch`` only) or yields them."""


class _ExplodingReceiver(_EngineReceiver):
    """An output's receiver that takes batches too, exploded into elements."""

    def __init__(self, emit: Emit, explode: Any) -> None:
        super().__init__(emit)
        self.explode = explode

    def receive_batch(self, windowed_batch: Any) -> None:
        for windowed_value in windowed_batch.as_windowed_values(self.explode):
            self.receive(windowed_value)


class _DroppingBatches(common.Receiver):
    def receive(self, windowed_value: Any) -> None:
        return None

    def receive_batch(self, windowed_batch: Any) -> None:
        return None


class _BatchReceivers(_Receivers):
    def __missing__(self, tag: Any) -> common.Receiver:
        receiver = self[tag] = _DroppingBatches()
        return receiver


class BeamBatchedDoFnRunner(BeamDoFnRunner):
    """Runs a batched Beam DoFn over a bundle: input elements gathered into batches of
    equal timestamp, windows and pane, output batches exploded."""

    def __init__(self, op: BeamParDoOp, emitters: dict[str | None, Emit], side_inputs: Any) -> None:
        self.takes_batches = takes_batches(op.dofn)
        self.produce_batch = op.dofn.input_batch_converter.produce_batch if self.takes_batches else None
        self._buffer: list[Any] = []
        super().__init__(op, emitters, side_inputs)

    def receivers(self, op: BeamParDoOp, emitters: dict[str | None, Emit]) -> _Receivers:
        converter = getattr(op.dofn, "output_batch_converter", None)
        receivers = _BatchReceivers()
        for tag, emit in emitters.items():
            receivers[tag] = _ExplodingReceiver(emit, converter.explode_batch if converter is not None else _not_a_batch)
        if None not in receivers:
            receivers[None] = _DroppingBatches()
        return receivers

    def process(self, wv: WindowedValue) -> None:
        if not self.takes_batches:
            super().process(wv)
            return
        self._buffer.append(self.to_beam(wv))
        if len(self._buffer) >= BATCH_SIZE:
            self._flush()

    def finish(self) -> None:
        self._flush()
        super().finish()

    def _flush(self) -> None:
        if not self._buffer:
            return
        buffered, self._buffer = self._buffer, []
        for batch in beam_wv.WindowedBatch.from_windowed_values(buffered, produce_fn=self.produce_batch):
            self._guard(lambda batch=batch: self.runner.process_batch(batch))


def warn_if_rebatched(node: Any, main: Any) -> None:
    """Beam's warning where a DoFn taking batches reads batches of another type: its input
    is exploded and made into batches again (as Beam's harness does, warning at run time)."""
    producer = main.producer
    producer_fn = getattr(getattr(producer, "transform", None), "fn", None)
    if producer_fn is None or not getattr(producer_fn, "_can_yield_batches", False):
        return
    produced = getattr(getattr(producer_fn, "output_batch_converter", None), "batch_type", None)
    consumed = getattr(getattr(node.transform.fn, "input_batch_converter", None), "batch_type", None)
    if produced is None or consumed is None or produced == consumed:
        return
    message = (
        f"Input to operation '{node.full_label}' ({type(node.transform.fn).__name__}) must be rebatched "
        f"from type {produced!r} to {consumed!r}.\nThis is very inefficient, consider re-structuring "
        "your pipeline or adding a DoFn to directly convert between these types."
    )
    warnings.warn(message, InefficientExecutionWarning, stacklevel=2)


def _not_a_batch(values: Any) -> Any:
    msg = f"a batch output reached a DoFn with no output batch converter: {values!r}"
    raise TypeError(msg)


# A Beam ParDo in every way but for its DoFn's runner.
register_kind(BeamBatchedParDoOp, like=BeamParDoOp, join_body=pardo_joiner(BeamBatchedDoFnRunner))
