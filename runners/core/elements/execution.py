"""The execution registry: what each lowered op is to the engine, and what each backend does with it.

Ibis's backend compilers are the model (STYLE.md): one registration per op type, a
dispatcher whose base case raises naming the op, and the list of what runs read off the
registry, never kept by hand. Every table here is a ``registry.Registry``, with its one
lookup rule.

**The engine's side**: one ``OpKind`` per op type (``register_kind``, at the end of this
module for the engine's own ops), declaring

- its ``Role`` in planning (``plan.py``): a source heads a stage, a grouping heads one after
  a shuffle, an element-wise op fuses into the stage its input comes from, a sink is
  attached to the stage that produces its input; a keyed op that keeps user state
  (``user_state``: a stateful DoFn) is a grouping the physical plan runs as one;
- for a source, the state that feeds it step by step (``source_state``), the elements
  the driver holds for it, if any (``driver_elements``: Create, Impulse), and where its
  elements come from (``read``, a ``strategies.SourceRead``: kept on the driver, spread
  from it, read on the executors);
- for an element-wise op, whether a tiny stage of it may run in the driver's process
  (``driver_runnable``);
- for an element-wise op, how it joins a stage's fused body (``join_body``, ``fused.py``);
- what of it must pickle to reach Spark's executors (``shipped_parts``) and the op as they
  need it (``for_executors``: a source's contents stay on the driver);
- what a checkpoint's shape records of it (``shape``), whether its stage splits into one
  stage per output (``split_stages``), whether its input never ends (``endless``), whether
  it scripts processing time too (``scripts_processing_time``: the run's clock is manual).

**Each backend's side**: a backend registers, under its name (``backend_ops``), how it reads
each source it supports into its datasets (memory: lists; Spark: RDDs), how it runs each
strategy of the physical plan (``strategies.Strategy``: a fused map, a lifted grouping, a
stateful stage... chosen per stage by ``physical.py`` from what the backend registered),
how it writes each sink. Element-wise ops need no registration: every backend runs them
through the shared fused body. What a backend does not register is refused, naming the
op's label, where it was applied and the backend; what it runs is ``supported_ops(backend)``.

Adding a primitive is one ``register_kind`` (here for the engine's own ops, beside the op
for a front end's: ``runners/beam/pardo.py``) and one registration per backend that runs it.
Kinds are looked up by the op's exact type: a subclass of a registered op type is refused
until it is registered itself (``like=`` its base type keeps the base's hooks).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sparkbeam.runners.core.elements.dofn_invoker import DoFnRunner, ElementRunner, SideInputs
from sparkbeam.runners.core.elements.metrics import StepScopedRunner
from sparkbeam.runners.core.elements.window_assignment import cached_assignment, window_assigner
from sparkbeam.runners.core.lowering.descriptions import describe
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import (
    BoundedSourceReadOp,
    CreateOp,
    FlattenOp,
    GroupOp,
    ImpulseOp,
    Op,
    ParDoOp,
    ReadTextOp,
    StatefulParDoOp,
    StreamReadOp,
    TestStreamOp,
    WindowIntoOp,
    WriteFilesPerStepOp,
    WriteFilesThroughDriverOp,
    WriteKafkaOp,
    WriteTextOp,
)
from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.runners.core.lowering.strategies import (
    Capabilities,
    SourceRead,
    StateStore,
    Strategy,
)
from sparkbeam.runners.core.sources.sources import BoundedSourceState, SourceState, TestStreamState
from sparkbeam.runners.core.sources.stream_sources import StreamSourceState
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from sparkbeam.window import GlobalWindow

if TYPE_CHECKING:
    from sparkbeam.runners.core.plan.plan import StagePlan

__all__ = [
    "KINDS",
    "BackendOps",
    "BodyBuilder",
    "OpKind",
    "Role",
    "backend_ops",
    "keyed_strategy",
    "kind_of",
    "pardo_joiner",
    "register_kind",
    "supported_ops",
]

Receiver = Callable[[WindowedValue], None]


class Role(enum.Enum):
    """Where an op goes when the plan cuts the pipeline into stages."""

    SOURCE = "source"
    ELEMENT_WISE = "element-wise"
    GROUPING = "grouping"
    SINK = "sink"


class BodyBuilder(Protocol):
    """What a fused body offers an element-wise op joining it (``fused.FusedBody``)."""

    side_inputs: SideInputs | None
    #: the body's only user code, whose metrics step the body names around each element
    #: it pushes (so its runner need not); None when each runner names its own
    scoped_op: Any

    def receive(self, pcoll: int, receiver: Receiver) -> None:
        """Call ``receiver`` with every element of ``pcoll`` inside the body."""

    def sender(self, pcoll: int) -> Receiver:
        """A function that hands an element of ``pcoll`` to whatever reads it."""

    def add_runner(self, runner: ElementRunner) -> None:
        """A DoFn runner whose bundle lifecycle (start, finish, teardown) the body drives."""

    def sole_reader(self, pcoll: int) -> Any:
        """The one op of the body that reads ``pcoll``, when nothing else does (neither
        another op nor the stage's outputs); else None."""

    def receive_global_values(self, pcoll: int, receiver: Receiver, value_receiver: Callable[[Any], None]) -> None:
        """``value_receiver(value)`` does what ``receiver`` does with that value's element
        in the global window at the minimum timestamp, with an unknown pane."""

    def stamped_sender(self, pcoll: int) -> Callable[[Any, int, tuple], None] | None:
        """``send(value, timestamp_micros, windows)``: an element of ``pcoll`` with an
        unknown pane handed on with no element built, when the body's exit that reads
        it alone takes that, or an op that does (``receive_stamped``); else None."""

    def keyed_stamped_sender(
        self, pcoll: int, key_type: type, others: Callable[[Any, int, tuple], None]
    ) -> Callable[[Any, int, tuple], None] | None:
        """``stamped_sender`` for (key, value) pairs whose key is exactly ``key_type``, any
        other element's parts handed to ``others``; None where the exit takes no parts."""

    def receive_stamped(self, pcoll: int, receiver: Callable[[Any, int, tuple], None]) -> None:
        """``receiver(value, timestamp_micros, windows)`` does with those parts what this
        op, the one reader of ``pcoll``, does with their element with an unknown pane."""


def _nothing(op: Any) -> tuple:
    return ()


def _same(op: Any) -> Any:
    return op


def _read_on_executors(op: Any) -> SourceRead:
    return SourceRead.EXECUTORS


@attrs.frozen
class OpKind:
    """What the engine knows about one op type (see the module docs)."""

    op_type: type
    role: Role
    source_state: Callable[[Any], SourceState] | None = None
    driver_elements: Callable[[Any], list[WindowedValue]] | None = None
    join_body: Callable[[Any, BodyBuilder], None] | None = None
    #: (what, value) pairs that must pickle to ship the op to executors
    shipped_parts: Callable[[Any], tuple[tuple[str, Any], ...]] = _nothing
    for_executors: Callable[[Any], Any] = _same
    #: what a checkpoint's record of the pipeline's shape says of the op, besides its type and label
    shape: Callable[[Any], tuple[str, ...]] = _nothing
    #: (stage name, the op for one output, source tag) per output, for a source whose
    #: outputs each get a stage (each output has its own watermark); () for one stage
    split_stages: Callable[[Any], tuple[tuple[str, Any, Any], ...]] = _nothing
    #: a source whose input never ends by itself (a real stream)
    endless: bool = False
    #: a source that scripts processing time too (TestStream): the run's clock is manual
    scripts_processing_time: bool = False
    #: for an element-wise op, what its code is to a fused body that names one ParDo's
    #: metrics step itself (``fused.py``): "pardo", a ParDo joined by ``pardo_joiner``
    #: (it runs its runner's ``process`` unwrapped when the body names its step); "none",
    #: an op whose code reports no metrics (a key codec), which may run in any step;
    #: None, not known (the body then names no step itself)
    body_code: str | None = None
    #: a keyed op whose user code keeps state and timers per key (a stateful DoFn)
    user_state: bool = False
    #: a source: where its elements come from
    read: Callable[[Any], SourceRead] = _read_on_executors
    #: an element-wise op a tiny stage may run in the driver's process, as a task would
    driver_runnable: bool = True

    def __attrs_post_init__(self) -> None:
        needs = {Role.SOURCE: ("source_state", self.source_state), Role.ELEMENT_WISE: ("join_body", self.join_body)}
        name, hook = needs.get(self.role, ("", True))
        if hook is None:
            msg = f"{self.op_type.__name__} is registered as {self.role.value} without {name}"
            raise TypeError(msg)


def _where(op: Any) -> str:
    return f"'{getattr(op, 'label', op)}' (applied at {getattr(op, 'location', 'an unknown place')})"


def _unknown_op(op: Any, known: list[str]) -> UnsupportedError:
    msg = f"{_where(op)}: sparkbeam's engine cannot execute {type(op).__name__}; it executes {', '.join(known)}"
    return UnsupportedError(msg)


#: op type -> its kind. Exact types only: a subclass of a registered op type is an op of
#: its own, registered ``like`` its base when it is one.
KINDS: Registry[OpKind] = Registry("op kinds", refuse=_unknown_op)


def register_kind(op_type: type, role: Role | None = None, *, like: type | None = None, **hooks: Any) -> OpKind:
    """Declare what ``op_type`` is to the engine (one call per op type). ``like``: an op
    type already registered whose role and hooks this one keeps, but for ``hooks`` (a
    front end's ParDo whose DoFns run on other machinery is a ParDo but for its runner)."""
    if like is not None:
        base = KINDS.at(like)
        if "join_body" in hooks:  # joins its own way: what its code is, it says itself
            hooks.setdefault("body_code", None)
        kind = attrs.evolve(base, op_type=op_type, role=role or base.role, **hooks)
    elif role is None:
        msg = f"register_kind({op_type.__name__}): give its role, or the op type it is like"
        raise TypeError(msg)
    else:
        kind = OpKind(op_type, role, **hooks)
    KINDS.add(op_type, kind)
    return kind


def kind_of(op: Op) -> OpKind:
    """The op's kind; an op type the engine does not know is refused, naming the op."""
    return KINDS.lookup(op)


def make_source_state(op: Op) -> SourceState:
    """The state that feeds a source stage headed by ``op``, step by step."""
    kind = kind_of(op)
    if kind.source_state is None:
        msg = f"{_where(op)}: {type(op).__name__} is not a source"
        raise TypeError(msg)
    return kind.source_state(op)


def keyed_strategy(kind: OpKind) -> Strategy:
    """The strategy every backend that runs a keyed op of this kind registers: a stateful
    DoFn's, or the general one of a grouping (lifting and batch combining are options of
    the physical plan, ``physical.py``)."""
    return Strategy.STATEFUL if kind.user_state else Strategy.UNLIFTED_GROUPING


def _refusal(backend: str, work: str) -> Callable[[Any, list[str]], UnsupportedError]:
    def refuse(op: Any, known: list[str]) -> UnsupportedError:
        can = ", ".join(known) or "nothing"
        msg = (
            f"{_where(op)}: the {backend} backend cannot {work} {type(op).__name__} "
            f"(it can {work} {can}); run the pipeline on a runner that supports it"
        )
        return UnsupportedError(msg)

    return refuse


def _no_strategy(backend: str) -> Callable[[Any, list[str]], UnsupportedError]:
    def refuse(strategy: Any, known: list[str]) -> UnsupportedError:
        msg = f"the {backend} backend does not run the strategy {strategy.value!r} (it runs {', '.join(known) or 'none'})"
        return UnsupportedError(msg)

    return refuse


class BackendOps:
    """What one backend registers: how it reads sources, runs each strategy of the
    physical plan, writes sinks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sources: Registry[Callable[..., Any]] = Registry(f"{name} sources", refuse=_refusal(name, "read"))
        self.strategies: Registry[Callable[..., Any]] = Registry(f"{name} strategies", refuse=_no_strategy(name), key=None)
        self.sinks: Registry[Any] = Registry(f"{name} sinks", refuse=_refusal(name, "write"))

    def capabilities(
        self, *, driver_runs_tiny_stages: bool = False, puts_off_summaries: bool = False, lazy: bool = False
    ) -> Capabilities:
        """What the physical plan may use: the strategies registered, and what the backend
        and its session declare (see ``Capabilities``)."""
        return Capabilities(
            self.name,
            frozenset(key for key in self.strategies if isinstance(key, Strategy)),
            driver_runs_tiny_stages=driver_runs_tiny_stages and Strategy.DRIVER_RUN in self.strategies,
            puts_off_summaries=puts_off_summaries,
            lazy=lazy,
            state_stores=frozenset(key for key in self.strategies if isinstance(key, StateStore)),
        )

    def state_store(self, stage_name: str, store: StateStore | None) -> Any:
        """What a keyed stage's tasks build to hold a partition's state for a step, for the
        store the physical plan chose: the picklable factory this backend registered."""
        if store is None:
            msg = f"'{stage_name}': the physical plan chose no keyed-state store for a keyed stage on {self.name}; this is a sparkbeam bug"
            raise RuntimeError(msg)
        return self.strategies.lookup(store)

    def runs_keyed(self, kind: OpKind) -> bool:
        """Whether the backend runs a keyed op of this kind: a stateful DoFn's strategy, or
        a grouping's general one."""
        return keyed_strategy(kind) in self.strategies

    def check(self, plan: StagePlan) -> None:
        """Refuse, before anything runs, an op of ``plan`` the backend does not run,
        naming it (a stream would otherwise fail only at the first step reaching it)."""
        for stage in plan.stages:
            head = stage.head
            if head is not None:
                role = kind_of(head).role
                if role is Role.SOURCE:
                    self.sources.lookup(head)
                elif role is Role.GROUPING and not self.runs_keyed(kind_of(head)):
                    raise _refusal(self.name, "group with")(head, self.keyed_op_types())
            for op in stage.body:
                kind_of(op)
            for sink in stage.sinks:
                self.sinks.lookup(sink)

    def keyed_op_types(self) -> list[str]:
        """The keyed op types the backend runs (groupings and stateful DoFns)."""
        return sorted(kind.op_type.__name__ for _, kind in KINDS.items() if kind.role is Role.GROUPING and self.runs_keyed(kind))


_BACKENDS: dict[str, BackendOps] = {}


def backend_ops(name: str) -> BackendOps:
    """The registrations of the backend called ``name`` (made at its first use)."""
    found = _BACKENDS.get(name)
    if found is None:
        found = _BACKENDS[name] = BackendOps(name)
    return found


def supported_ops(backend: str) -> list[str]:
    """The op types the backend runs: its registered sources, groupings and sinks, and
    every element-wise op (the fused body is the same on every backend)."""
    ops = backend_ops(backend)
    element_wise = [kind.op_type.__name__ for _, kind in KINDS.items() if kind.role is Role.ELEMENT_WISE]
    return sorted({*element_wise, *ops.sources.names(), *ops.keyed_op_types(), *ops.sinks.names()})


# ---------------------------------------------------------------------------- the engine's ops

_GLOBAL = (GlobalWindow(),)


def _create_elements(op: CreateOp) -> list[WindowedValue]:
    """Create's values, in the global window at the minimum timestamp."""
    return [WindowedValue(v, MIN_TIMESTAMP.micros, _GLOBAL, PANE_INFO_UNKNOWN) for v in op.values]


def _impulse_elements(op: ImpulseOp) -> list[WindowedValue]:
    return [WindowedValue(b"", MIN_TIMESTAMP.micros, _GLOBAL, PANE_INFO_UNKNOWN)]


def _stream_source_state(op: StreamReadOp) -> SourceState:
    return StreamSourceState(op)


def _test_stream_stages(op: TestStreamOp) -> tuple[tuple[str, Any, Any], ...]:
    if len(op.outputs) <= 1:
        return ()
    return tuple(
        (f"{op.label}[{tag}]", attrs.evolve(op, outputs=(pcoll,), output_tags=(tag,)), tag)
        for pcoll, tag in zip(op.outputs, op.output_tags)
    )


def pardo_joiner(make_runner: Callable[[Any, dict[Any, Receiver], SideInputs | None], ElementRunner]) -> Callable[[Any, BodyBuilder], None]:
    """How a ParDo joins a fused body, its DoFn run by what ``make_runner(op, emitters,
    side_inputs)`` builds per bundle (sparkbeam's ``DoFnRunner``; a front end's own)."""

    def join(op: ParDoOp, body: BodyBuilder) -> None:
        emitters = {tag: body.sender(pcoll) for tag, pcoll in zip(op.output_tags, op.outputs)}
        element_runner = make_runner(op, emitters, body.side_inputs)
        if isinstance(element_runner, DoFnRunner):
            _restamp_into_window_into(op, body, element_runner)
        # Run in its step, so that the DoFn's metric updates land under its label: named by
        # the body around each element when this is its only user code, else by the
        # runner's fast path itself where it has one, else per call.
        runner = StepScopedRunner(op.label, element_runner)
        body.add_runner(runner)
        (source,) = op.inputs
        if body.scoped_op is op:
            receiver = element_runner.process
        else:
            in_step = getattr(element_runner, "process_in_step", None)
            receiver = (in_step(op.label) if in_step is not None else None) or runner.process
        body.receive(source, receiver)
        by_value = getattr(element_runner, "process_global_value", None)
        if by_value is not None and receiver is element_runner.process:
            body.receive_global_values(source, receiver, by_value)

    return join


def _restamp_into_window_into(op: ParDoOp, body: BodyBuilder, runner: DoFnRunner) -> None:
    """A ParDo whose main output only a WindowInto of a built-in window fn reads (the idiom
    ``Map(... TimestampedValue ...) | WindowInto(...)``): its re-stamped outputs are
    windowed by that WindowInto at once, with no element in between."""
    outputs = dict(zip(op.output_tags, op.outputs))
    if None not in outputs:
        return
    reader = body.sole_reader(outputs[None])
    if type(reader) is not WindowIntoOp:
        return
    assign = cached_assignment(reader.windowfn)
    if assign is not None:
        (target,) = reader.outputs
        runner.window_restamped_into(assign, body.sender(target), body.stamped_sender(target))


def _join_window_into(op: WindowIntoOp, body: BodyBuilder) -> None:
    (source,) = op.inputs
    (target,) = op.outputs
    body.receive(source, window_assigner(op.windowfn, op.label, op.location, body.sender(target)))


def _join_flatten(op: FlattenOp, body: BodyBuilder) -> None:
    (target,) = op.outputs
    send = body.sender(target)
    for source in op.inputs:
        body.receive(source, send)


register_kind(
    ImpulseOp,
    Role.SOURCE,
    source_state=BoundedSourceState,
    driver_elements=_impulse_elements,
    # one element: the driver keeps it (a tiny chain off it may run there)
    read=lambda op: SourceRead.HELD,
)
register_kind(
    CreateOp,
    Role.SOURCE,
    source_state=BoundedSourceState,
    driver_elements=_create_elements,
    for_executors=lambda op: attrs.evolve(op, values=()),  # each step ships its own elements
    read=lambda op: SourceRead.SPREAD,
)
register_kind(ReadTextOp, Role.SOURCE, source_state=BoundedSourceState)
register_kind(
    BoundedSourceReadOp,
    Role.SOURCE,
    source_state=BoundedSourceState,
    shipped_parts=lambda op: (("BoundedSource", op.source),),
    for_executors=lambda op: attrs.evolve(op, source=None),  # each bundle ships its own source
)
register_kind(
    StreamReadOp,
    Role.SOURCE,
    source_state=_stream_source_state,
    shipped_parts=lambda op: (("timestamp, partition_by and watermark settings", op.spec),),
    shape=lambda op: (f"source={op.spec.format}",),
    endless=True,
)
register_kind(
    TestStreamOp,
    Role.SOURCE,
    source_state=lambda op: TestStreamState(op, op.output_tags[0]),
    for_executors=lambda op: attrs.evolve(op, events=()),  # the script stays on the driver
    split_stages=_test_stream_stages,
    scripts_processing_time=True,
    read=lambda op: SourceRead.SPREAD,
)
register_kind(
    ParDoOp,
    Role.ELEMENT_WISE,
    join_body=pardo_joiner(DoFnRunner),
    shipped_parts=lambda op: (("DoFn", op.dofn), ("arguments", (op.args, op.kwargs))),
    body_code="pardo",
)
register_kind(WindowIntoOp, Role.ELEMENT_WISE, join_body=_join_window_into)
register_kind(FlattenOp, Role.ELEMENT_WISE, join_body=_join_flatten)
register_kind(
    GroupOp,
    Role.GROUPING,
    shipped_parts=lambda op: () if op.combine_fn is None else (("CombineFn", op.combine_fn),),
    shape=lambda op: (
        f"windowing={describe(op.windowing)} combine={type(op.combine_fn).__name__ if op.combine_fn else None}",
    ),
)
register_kind(
    StatefulParDoOp,
    # Keyed like a grouping: its state and timers live per key between steps (stateful_step.py).
    Role.GROUPING,
    user_state=True,
    shipped_parts=lambda op: (("DoFn", op.dofn), ("arguments", (op.args, op.kwargs))),
    shape=lambda op: (f"windowing={describe(op.windowing)} dofn={type(op.dofn).__name__}",),
)
register_kind(WriteTextOp, Role.SINK)
register_kind(WriteFilesPerStepOp, Role.SINK)
register_kind(WriteFilesThroughDriverOp, Role.SINK)
register_kind(WriteKafkaOp, Role.SINK, shape=lambda op: (f"topic={op.spec.topic}",))
