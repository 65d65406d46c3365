"""A stage's fused body: element-wise ops run in one pass, elements pushed op to op.

``FusedBody`` is built on the worker for each bundle. Its input is a stream of
``(pcoll_id, WindowedValue)`` for the PCollections entering the body; its output is the
same for the PCollections that leave the stage. Within the stage nothing is materialised.
Each op joins the body as its kind says (``execution.OpKind.join_body``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from sparkbeam.runners.core.dofn_invoker import ElementRunner, SideInputs
from sparkbeam.runners.core.errors import UnsupportedError
from sparkbeam.runners.core.execution import kind_of
from sparkbeam.runners.core.plan import Stage
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["FusedBody"]

Tagged = tuple[int, WindowedValue]


class FusedBody:
    """Executes ``stage.body`` over the elements entering it."""

    def __init__(self, stage: Stage, side_inputs: SideInputs | None = None, *, bare: bool = False) -> None:
        """``bare``: the stage has one output, whose elements ``run_bare`` yields without
        their PCollection id (no pair per element to build and take apart again)."""
        self.stage = stage
        self.side_inputs = side_inputs
        self._out: list = []
        self._receivers: dict[int, list[Callable[[WindowedValue], None]]] = {}
        self._runners: list[ElementRunner] = []
        #: elements that entered and left the body (the stage's counters)
        self.elements_in = 0
        self.elements_out = 0
        # How many readers each PCollection has in the body (an exit counts as one).
        self._reader_counts: dict[int, int] = {pcoll: 1 for pcoll in stage.outputs}
        self._readers: dict[int, object] = {}
        for op in stage.body:
            for pcoll in op.inputs:
                self._reader_counts[pcoll] = self._reader_counts.get(pcoll, 0) + 1
                self._readers[pcoll] = op
        if bare:
            if len(stage.outputs) != 1:
                msg = f"'{stage.name}' has {len(stage.outputs)} outputs; a bare fused body has one"
                raise ValueError(msg)
            self.receive(stage.outputs[0], self._out.append)
        else:
            for pcoll in stage.outputs:
                self.receive(pcoll, self._exit(pcoll))
        for op in stage.body:
            kind = kind_of(op)
            if kind.join_body is None:
                msg = f"'{op.label}' (applied at {op.location}): {type(op).__name__} is a {kind.role.value} op, not one a fused body runs"
                raise UnsupportedError(msg)
            kind.join_body(op, self)

    # -- what an op joining the body uses (execution.BodyBuilder) -------------------------
    def receive(self, pcoll: int, receiver: Callable[[WindowedValue], None]) -> None:
        """Call ``receiver`` with every element of ``pcoll`` inside the body."""
        self._receivers.setdefault(pcoll, []).append(receiver)

    def sender(self, pcoll: int) -> Callable[[WindowedValue], None]:
        """A function that hands an element of ``pcoll`` to whatever reads it."""

        # The list that receive() extends: readers that join the body later are seen.
        receivers = self._receivers.setdefault(pcoll, [])

        def send(wv: WindowedValue) -> None:
            for receive in receivers:
                receive(wv)

        return send

    def sole_reader(self, pcoll: int) -> object | None:
        """The one op of the body that reads ``pcoll``, when nothing else does (neither
        another op nor the stage's outputs); else None."""
        if self._reader_counts.get(pcoll) != 1:
            return None
        return self._readers.get(pcoll)

    def add_runner(self, runner: ElementRunner) -> None:
        """A DoFn runner whose bundle lifecycle the body drives, in body order."""
        self._runners.append(runner)

    def finalize_bundle(self) -> None:
        """After the bundle's output has been handed on: run its finalization callbacks."""
        for runner in self._runners:
            runner.finalize_bundle()

    def _exit(self, pcoll: int) -> Callable[[WindowedValue], None]:
        append = self._out.append
        return lambda wv: append((pcoll, wv))

    def run(self, elements: Iterable[Tagged]) -> Iterator[Tagged]:
        """Process a bundle: lifecycle calls around it, outputs yielded as they are made."""
        out = self._out
        for runner in self._runners:
            runner.start()
        try:
            receivers = self._receivers
            seen = 0
            for pcoll, wv in elements:
                seen += 1
                for receive in receivers.get(pcoll, ()):
                    receive(wv)
                if out:
                    self.elements_out += len(out)
                    yield from out
                    out.clear()
            self.elements_in += seen
            yield from self._finish()
        finally:
            for runner in self._runners:
                runner.teardown()

    def run_bare(self, pcoll: int, elements: Iterable[WindowedValue]) -> Iterator[WindowedValue]:
        """``run`` for a bare body (see ``__init__``) whose elements all enter as ``pcoll``:
        elements in and out without their PCollection ids."""
        out = self._out
        for runner in self._runners:
            runner.start()
        try:
            receivers = self._receivers.get(pcoll, [])
            seen = 0
            if len(receivers) == 1:
                (receive,) = receivers
                for wv in elements:
                    seen += 1
                    receive(wv)
                    if out:
                        self.elements_out += len(out)
                        yield from out
                        out.clear()
            else:
                for wv in elements:
                    seen += 1
                    for receive in receivers:
                        receive(wv)
                    if out:
                        self.elements_out += len(out)
                        yield from out
                        out.clear()
            self.elements_in += seen
            yield from self._finish()
        finally:
            for runner in self._runners:
                runner.teardown()

    def _finish(self) -> Iterator:
        out = self._out
        for runner in self._runners:  # in body order: upstream DoFns finish first
            runner.finish()
        self.elements_out += len(out)
        yield from out
        out.clear()
