"""A stage's fused body: element-wise ops run in one pass, elements pushed op to op.

``FusedBody`` is built on the worker for each bundle. Its input is a stream of
``(pcoll_id, WindowedValue)`` for the PCollections entering the body; its output is the
same for the PCollections that leave the stage. Within the stage nothing is materialised.
Each op joins the body as its kind says (``execution.OpKind.join_body``).

Per element the body costs as few Python calls as it can (#11 item 2):

- ops join in reverse body order, so that when an op asks for the sender of its output
  every reader of that output has joined: a PCollection read by one receiver gets that
  receiver itself as its sender, with no loop over a list in between;
- a body whose only user code is one ParDo (``scoped_op``; the rest built-in WindowIntos,
  Flattens and ops such as a key codec, which report no metrics: ``OpKind.body_code``;
  the ParDo the engine's own or a front end's joined the same way) names that ParDo's
  metrics step itself around what it
  pushes (a chunk of elements in ``run_bare``, each element in ``run``) instead of
  through a wrapper call per element (``StepScopedRunner``). Everything the elements
  reach in the body then runs in that step, which is where it ran before too; what feeds
  the body and what reads its output run outside it;
- a bare body hands its outputs on a chunk at a time (``run_bare``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice, repeat
from typing import TYPE_CHECKING

from sparkbeam.metrics.execution import current_step, enter_step, leave_step
from sparkbeam.runners.core.elements.dofn_invoker import ElementRunner, SideInputs
from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS, cached_assignment
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import FlattenOp, ParDoOp, WindowIntoOp
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value

if TYPE_CHECKING:  # a type only: the stage plan is a room above this one
    from sparkbeam.runners.core.plan.plan import Stage

__all__ = ["FusedBody"]

Tagged = tuple[int, WindowedValue]
#: takes an element's value, timestamp (µs) and windows, its pane unknown (``stamped_sender``)
StampedReceiver = Callable[[object, int, tuple], None]
#: ``(key_type, others)`` -> what takes the parts of (key, value) pairs whose key is exactly
#: ``key_type`` and hands any other element's to ``others`` (``keyed_stamped_sender``)
KeyedStampedExit = Callable[[type, StampedReceiver], StampedReceiver | None]

#: how many input elements a bare body runs before handing their outputs on (``run_bare``)
CHUNK = 256

_MIN_MICROS = MIN_TIMESTAMP.micros

#: runs an iterator to its end at C speed, keeping nothing (``deque(..., maxlen=0)``)
_push_all: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend


class FusedBody:
    """Executes ``stage.body`` over the elements entering it."""

    def __init__(
        self,
        stage: Stage,
        side_inputs: SideInputs | None = None,
        *,
        bare: bool = False,
        stamped_exit: StampedReceiver | None = None,
        keyed_stamped_exit: KeyedStampedExit | None = None,
    ) -> None:
        """``bare``: the stage has one output, whose elements ``run_bare`` yields without
        their PCollection id (no pair per element to build and take apart again).
        ``stamped_exit``: what reads that output takes an element's parts too,
        ``stamped_exit(value, timestamp_micros, windows)`` for the element with an unknown
        pane, so that an op whose output is the stage's alone sends them with no element
        built (``stamped_sender``); it sees the outputs built as elements, which
        ``run_bare`` yields, nowhere else. ``keyed_stamped_exit``: the same for the pairs
        of one key type alone (``keyed_stamped_sender``)."""
        self.stage = stage
        self._stamped_exit = stamped_exit
        self._keyed_stamped_exit = keyed_stamped_exit
        #: per PCollection, what its one reader does with an element's parts (``receive_stamped``)
        self._stamped_receivers: dict[int, StampedReceiver] = {}
        #: per PCollection, (a receiver, what it does with a value in the global window)
        self._value_receivers: dict[int, tuple[Callable[[WindowedValue], None], Callable[[object], None]]] = {}
        self.side_inputs = side_inputs
        self._out: list = []
        self._receivers: dict[int, list[Callable[[WindowedValue], None]]] = {}
        #: PCollections whose one receiver was handed out as their sender (``sender``)
        self._sent_directly: set[int] = set()
        self._runners: list[ElementRunner] = []
        #: per PCollection, how many of its receivers are exits (set once they are in)
        self._joined_from: dict[int, int] | None = None
        #: elements that entered and left the body (the stage's counters)
        self.elements_in = 0
        self.elements_out = 0
        #: the body's only user code, a ParDo whose step the body names around each
        #: element it pushes (see the module docs); None: each runner names its own
        self.scoped_op: ParDoOp | None = _only_user_code(stage.body)
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
        # Each PCollection's receivers in body order, after its exit: ops joining in reverse
        # order put theirs in front of those of the ops after them.
        self._joined_from = {pcoll: len(receivers) for pcoll, receivers in self._receivers.items()}
        for op in reversed(stage.body):
            kind = kind_of(op)
            if kind.join_body is None:
                msg = f"'{op.label}' (applied at {op.location}): {type(op).__name__} is a {kind.role.value} op, not one a fused body runs"
                raise UnsupportedError(msg)
            kind.join_body(op, self)
        self._runners.reverse()  # joined in reverse: the lifecycle goes in body order
        self._step = self.scoped_op.label if self.scoped_op is not None else None

    # -- what an op joining the body uses (execution.BodyBuilder) -------------------------
    def receive(self, pcoll: int, receiver: Callable[[WindowedValue], None]) -> None:
        """Call ``receiver`` with every element of ``pcoll`` inside the body."""
        if pcoll in self._sent_directly:
            msg = f"'{self.stage.name}': a receiver of PCollection {pcoll} joined after its sender was handed out"
            raise RuntimeError(msg)
        receivers = self._receivers.setdefault(pcoll, [])
        if self._joined_from is None:  # the stage's exits
            receivers.append(receiver)
        else:
            receivers.insert(self._joined_from.get(pcoll, 0), receiver)

    def sender(self, pcoll: int) -> Callable[[WindowedValue], None]:
        """A function that hands an element of ``pcoll`` to whatever reads it: its one
        reader itself, when it has one."""
        receivers = self._receivers.setdefault(pcoll, [])
        if len(receivers) == 1:
            self._sent_directly.add(pcoll)
            return receivers[0]

        def send(wv: WindowedValue) -> None:
            for receive in receivers:
                receive(wv)

        return send

    def stamped_sender(self, pcoll: int) -> StampedReceiver | None:
        """``send(value, timestamp_micros, windows)``, the element ``(value,
        timestamp_micros, windows, PANE_INFO_UNKNOWN)`` handed to what reads ``pcoll`` with
        no element built, when that is the body's stamped exit alone or one op that takes
        parts too (``receive_stamped``); else None."""
        if self._stamped_exit is None or self._reader_counts.get(pcoll) != 1:
            return None
        if pcoll in self.stage.outputs:
            return self._stamped_exit
        return self._stamped_receivers.get(pcoll)

    def keyed_stamped_sender(self, pcoll: int, key_type: type, others: StampedReceiver) -> StampedReceiver | None:
        """``stamped_sender`` for (key, value) pairs whose key is exactly ``key_type``, any
        other element's parts handed to ``others``, when the body's keyed stamped exit
        alone reads ``pcoll``; else None."""
        if self._keyed_stamped_exit is None or self._reader_counts.get(pcoll) != 1 or pcoll not in self.stage.outputs:
            return None
        return self._keyed_stamped_exit(key_type, others)

    def receive_stamped(self, pcoll: int, receiver: StampedReceiver) -> None:
        """``receiver(value, timestamp_micros, windows)`` does what the one reader of
        ``pcoll`` does with the element of those parts with an unknown pane."""
        self._stamped_receivers[pcoll] = receiver

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
        step = self._step
        outer_step = current_step()
        try:
            receivers = self._receivers
            seen = 0
            for pcoll, wv in elements:
                seen += 1
                if step is not None:
                    # Only around the push: what feeds the body and what reads its output
                    # run in steps of their own.
                    outer = enter_step(step)
                    try:
                        for receive in receivers.get(pcoll, ()):
                            receive(wv)
                    finally:
                        leave_step(outer)
                else:
                    for receive in receivers.get(pcoll, ()):
                        receive(wv)
                if out:
                    self.elements_out += len(out)
                    yield from out
                    out.clear()
            self.elements_in += seen
            yield from self._finish()
        finally:
            leave_step(outer_step)  # a failure leaves a fast path's own step named (process_in_step)
            for runner in self._runners:
                runner.teardown()

    def run_bare(self, pcoll: int, elements: Iterable[WindowedValue]) -> Iterator[WindowedValue]:
        """``run`` for a bare body (see ``__init__``) whose elements all enter as ``pcoll``:
        elements in and out without their PCollection ids.

        The outputs are handed on in order a chunk at a time (up to ``CHUNK`` inputs'
        worth), so that the reader pulls them at C speed instead of resuming a generator
        per element."""
        return chain.from_iterable(self._bare_chunks(pcoll, elements))

    def run_bare_chunks(self, pcoll: int, elements: Iterable, *, values: bool = False) -> Iterator[list[WindowedValue]]:
        """``run_bare``'s outputs as the lists it hands on (each emptied once the reader
        resumes it), for a reader that takes a list at a time. ``values``: the elements
        come as their values alone, each in the global window at the minimum timestamp
        with an unknown pane (a text file's lines), and go to the one reader of ``pcoll``
        that way when it takes them so (``receive_global_values``), else as elements."""
        return self._bare_chunks(pcoll, elements, values)

    def run_bare_values(self, pcoll: int, values: Iterable) -> Iterator[WindowedValue]:
        """``run_bare`` over elements given as their values alone (``run_bare_chunks``)."""
        return chain.from_iterable(self._bare_chunks(pcoll, values, True))

    def receive_global_values(self, pcoll: int, receiver: Callable[[WindowedValue], None], value_receiver: Callable[[object], None]) -> None:
        """``value_receiver(value)`` does what ``receiver`` (a receiver of ``pcoll``) does
        with the element of that value in the global window at the minimum timestamp,
        with an unknown pane: used for such elements when ``receiver`` alone reads them."""
        self._value_receivers[pcoll] = (receiver, value_receiver)

    def _bare_chunks(self, pcoll: int, elements: Iterable, values: bool = False) -> Iterator[list[WindowedValue]]:
        out = self._out
        for runner in self._runners:
            runner.start()
        step = self._step
        outer_step = current_step()
        try:
            receivers = self._receivers.get(pcoll, [])
            (receive,) = receivers if len(receivers) == 1 else (self.sender(pcoll),)
            if values:
                receiver, value_receiver = self._value_receivers.get(pcoll, (None, None))
                if value_receiver is not None and receive is receiver:
                    receive = value_receiver
                else:  # the elements built, as a source would have made them
                    elements = map(new_windowed_value, zip(elements, repeat(_MIN_MICROS), repeat(GLOBAL_WINDOWS), repeat(PANE_INFO_UNKNOWN)))
            seen = 0
            iterator = iter(elements)
            while True:
                # Pulled before the body's step is named: what feeds the body runs in its own.
                chunk = list(islice(iterator, CHUNK))
                seen += len(chunk)
                if step is not None:
                    outer = enter_step(step)
                    try:
                        _push_all(map(receive, chunk))
                    finally:
                        leave_step(outer)
                else:
                    _push_all(map(receive, chunk))
                if out:
                    self.elements_out += len(out)
                    # chain reads the whole list before it resumes us to clear it
                    yield out
                    out.clear()
                if len(chunk) < CHUNK:
                    break
            self.elements_in += seen
            yield list(self._finish())
        finally:
            leave_step(outer_step)  # as in ``run``
            for runner in self._runners:
                runner.teardown()

    def _finish(self) -> Iterator:
        out = self._out
        for runner in self._runners:  # in body order: upstream DoFns finish first
            runner.finish()
        self.elements_out += len(out)
        yield from out
        out.clear()


def _only_user_code(body: Iterable[object]) -> ParDoOp | None:
    """The ParDo that is the body's only user code (the other ops are WindowIntos of a
    built-in window fn, Flattens, the engine's routers and ops that run no user code), or
    None. A ParDo is one whose kind says ``pardo_joiner`` joins it (``OpKind.body_code``):
    the engine's own, or a front end's that runs the same way; one that joins its own way
    is not known to."""
    pardos = []
    for op in body:
        kind = type(op)
        if kind is WindowIntoOp:
            if cached_assignment(op.windowfn) is None:  # type: ignore[attr-defined]
                return None
        elif kind is not FlattenOp:
            code = kind_of(op).body_code
            if code == "pardo":
                if not _routes_only(op):
                    pardos.append(op)
            elif code != "none":
                return None
    return pardos[0] if len(pardos) == 1 else None


def _routes_only(op: object) -> bool:
    """Whether a ParDo is the engine's own router (its DoFn's class declares
    ``_engine_routes_only``: a stream read's dead letters), which runs no user code."""
    return bool(getattr(type(getattr(op, "dofn", None)), "_engine_routes_only", None))
