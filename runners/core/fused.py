"""A stage's fused body: element-wise ops run in one pass, elements pushed op to op.

``FusedBody`` is built on the worker for each bundle. Its input is a stream of
``(pcoll_id, WindowedValue)`` for the PCollections entering the body; its output is the
same for the PCollections that leave the stage. Within the stage nothing is materialised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from sparkbeam.runners.core.dofn_invoker import SideInputs
from sparkbeam.runners.core.errors import UserCodeError
from sparkbeam.runners.core.metrics import StepScopedRunner
from sparkbeam.runners.core.ops import FlattenOp, ParDoOp, WindowIntoOp
from sparkbeam.runners.core.plan import Stage
from sparkbeam.runners.core.window_assignment import cached_assignment
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import WindowFn

__all__ = ["FusedBody", "window_assigner"]

Tagged = tuple[int, WindowedValue]


def window_assigner(op: WindowIntoOp) -> Callable[[WindowedValue], list[WindowedValue]]:
    """WindowInto: the element once per window it was in, re-windowed by the window fn.

    As in Beam, the pane becomes unknown and an element in several windows is assigned
    once per window (so it can be duplicated).
    """
    windowfn = op.windowfn
    assign = windowfn.assign
    AssignContext = WindowFn.AssignContext
    cached = cached_assignment(windowfn)
    if cached is not None:

        def reassign_cached(wv: WindowedValue) -> list[WindowedValue]:
            micros = wv.timestamp_micros
            windows = cached(micros)
            copy = WindowedValue(wv.value, micros, windows, PANE_INFO_UNKNOWN)
            # The built-in fns depend on the timestamp alone: one copy per input window.
            return [copy] * len(wv.windows)

        return reassign_cached

    def reassign(wv: WindowedValue) -> list[WindowedValue]:
        value, micros = wv.value, wv.timestamp_micros
        timestamp = Timestamp.from_micros(micros)
        out = []
        try:
            for window in wv.windows:
                windows = tuple(assign(AssignContext(timestamp, value, window)))
                out.append(WindowedValue(value, micros, windows, PANE_INFO_UNKNOWN))
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, value) from error
        return out

    return reassign


class FusedBody:
    """Executes ``stage.body`` over the elements entering it."""

    def __init__(self, stage: Stage, side_inputs: SideInputs | None = None) -> None:
        self.stage = stage
        self._out: list[Tagged] = []
        self._receivers: dict[int, list[Callable[[WindowedValue], None]]] = {}
        self._runners: list[StepScopedRunner] = []
        for pcoll in stage.outputs:
            self._receivers.setdefault(pcoll, []).append(self._exit(pcoll))
        for op in stage.body:
            if isinstance(op, ParDoOp):
                emitters = {tag: self._dispatch(pcoll) for tag, pcoll in zip(op.output_tags, op.outputs)}
                # Named with its step, so that the DoFn's metric updates land under its label.
                runner = StepScopedRunner(op.label, op.element_runner(emitters, side_inputs))
                self._runners.append(runner)
                (source,) = op.inputs
                self._receivers.setdefault(source, []).append(runner.process)
            elif isinstance(op, WindowIntoOp):
                (source,) = op.inputs
                self._receivers.setdefault(source, []).append(self._window_into(op))
            elif isinstance(op, FlattenOp):
                (target,) = op.outputs
                for source in op.inputs:
                    self._receivers.setdefault(source, []).append(self._dispatch(target))
            else:
                msg = f"'{op.label}': {type(op).__name__} cannot run in a fused body"
                raise TypeError(msg)

    def _exit(self, pcoll: int) -> Callable[[WindowedValue], None]:
        append = self._out.append
        return lambda wv: append((pcoll, wv))

    def _dispatch(self, pcoll: int) -> Callable[[WindowedValue], None]:
        def send(wv: WindowedValue) -> None:
            for receive in self._receivers.get(pcoll, ()):
                receive(wv)

        return send

    def _window_into(self, op: WindowIntoOp) -> Callable[[WindowedValue], None]:
        reassign = window_assigner(op)
        (target,) = op.outputs
        send = self._dispatch(target)

        def receive(wv: WindowedValue) -> None:
            for out in reassign(wv):
                send(out)

        return receive

    def finalize_bundle(self) -> None:
        """After the bundle's output has been handed on: run its finalization callbacks."""
        for runner in self._runners:
            runner.finalize_bundle()

    def run(self, elements: Iterable[Tagged]) -> Iterator[Tagged]:
        """Process a bundle: lifecycle calls around it, outputs yielded as they are made."""
        out = self._out
        for runner in self._runners:
            runner.start()
        try:
            receivers = self._receivers
            for pcoll, wv in elements:
                for receive in receivers.get(pcoll, ()):
                    receive(wv)
                if out:
                    yield from out
                    out.clear()
            for runner in self._runners:  # in body order: upstream DoFns finish first
                runner.finish()
            yield from out
            out.clear()
        finally:
            for runner in self._runners:
                runner.teardown()
