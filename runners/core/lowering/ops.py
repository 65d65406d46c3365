"""Lowering: the user's pipeline graph becomes a flat list of picklable operations.

Each primitive becomes one op that names its input and output PCollections by integer id
and carries only what executing it needs (never the pipeline, so ops pickle small). A
registry maps each primitive type to its lowering; a primitive without an entry is an
error naming the transform. Rewrites run here: ``CombinePerKey`` (with no extra
arguments) lowers to a grouping op that combines as it groups (combiner lifting).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.combine import CombineFn, CombinePerKey
from sparkbeam.core import Create, Flatten, GroupByKey, Impulse, ParDo, WindowInto
from sparkbeam.dofn import DoFn
from sparkbeam.io.fileio import WriteToFiles
from sparkbeam.io.fileio_remote import WriteFilesThroughDriver
from sparkbeam.io.iobase import BoundedSource, ReadBoundedSource
from sparkbeam.io.kafka import WriteKafkaSpec, WriteToKafka
from sparkbeam.io.stepfiles import StepFiles, WriteFilesPerStep
from sparkbeam.io.streaming import StreamReadSpec, _StreamRead
from sparkbeam.io.textio import ReadFromText, WriteToText
from sparkbeam.pipeline import AppliedTransform, Pipeline
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.userstate import is_stateful_dofn
from sparkbeam.utils.timestamp import Duration
from sparkbeam.window import GlobalWindows, WindowFn
from sparkbeam.windowing import Windowing

__all__ = [
    "BoundedSourceReadOp",
    "CreateOp",
    "FlattenOp",
    "GroupOp",
    "ImpulseOp",
    "LoweredPipeline",
    "Op",
    "PCollectionInfo",
    "ParDoOp",
    "ReadTextOp",
    "SideInputSlot",
    "SinkOp",
    "StatefulParDoOp",
    "StreamReadOp",
    "TestStreamOp",
    "WindowIntoOp",
    "WriteFilesPerStepOp",
    "WriteFilesThroughDriverOp",
    "WriteKafkaOp",
    "WriteTextOp",
    "lower",
    "supported_primitives",
]


@attrs.frozen
class PCollectionInfo:
    id: int
    label: str
    windowing: Windowing
    is_bounded: bool


@attrs.frozen
class Op:
    """A lowered primitive; ``execution.py`` says what each type is to the engine."""

    label: str
    location: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def side_inputs(self) -> tuple[SideInputSlot, ...]:
        """The side inputs the op reads (a ParDo's; none for other ops)."""
        return ()


@attrs.frozen
class ImpulseOp(Op):
    pass


@attrs.frozen
class CreateOp(Op):
    values: tuple = attrs.field(converter=tuple)


@attrs.frozen
class ReadTextOp(Op):
    source: ReadFromText


@attrs.frozen
class BoundedSourceReadOp(Op):
    """``Read(BoundedSource)``: split on the driver when the run starts, each bundle read on
    an executor (``sparkbeam.io.iobase``)."""

    source: BoundedSource = attrs.field(eq=False)


@attrs.frozen
class StreamReadOp(Op):
    """An unbounded source read through Spark Structured Streaming."""

    spec: StreamReadSpec


@attrs.frozen
class TestStreamOp(Op):
    __test__ = False
    events: tuple
    output_tags: tuple  # tag of each output, aligned with ``outputs``


@attrs.frozen
class SideInputSlot:
    """Stands in an op's arguments for a side input: which PCollection, viewed how."""

    pcoll: int
    view: pvalue.AsSideInput = attrs.field(eq=False)
    windowfn: WindowFn = attrs.field(eq=False)
    #: how long the side input's windows take late data: their contents are kept that long
    #: past the window's end (behind the reading stage's input watermark), then dropped
    allowed_lateness: Duration = attrs.field(factory=Duration, eq=False)

    def describe(self) -> str:
        """How the user wrote it, e.g. ``AsList(Side)``."""
        return f"{type(self.view).__name__}({self.view.pvalue.label})"


@attrs.frozen
class ParDoOp(Op):
    dofn: DoFn
    args: tuple
    kwargs: dict = attrs.field(hash=False)
    output_tags: tuple  # tag (None = main) of each output, aligned with ``outputs``
    side_inputs: tuple[SideInputSlot, ...] = ()
    #: the main input's window fn: it windows the outputs the DoFn re-stamps (TimestampedValue)
    input_windowfn: WindowFn = attrs.field(factory=GlobalWindows)


@attrs.frozen
class StatefulParDoOp(ParDoOp):
    """A ParDo whose DoFn keeps state or timers per key and window: it heads a keyed stage,
    as a grouping does (``runners/core/state/stateful_step.py``), never a fused body."""

    #: the input's windowing: its allowed lateness decides when a window's state goes
    windowing: Windowing = attrs.field(factory=Windowing)


@attrs.frozen
class WindowIntoOp(Op):
    windowfn: WindowFn


@attrs.frozen
class FlattenOp(Op):
    pass


@attrs.frozen
class GroupOp(Op):
    """GroupByKey, or CombinePerKey when ``combine_fn`` is set (output: (key, combined))."""

    windowing: Windowing
    combine_fn: CombineFn | None = None
    #: False when nothing downstream can see the output's pane indices (``GroupByKey.pane_indices_observed``)
    keep_pane_indices: bool = True


@attrs.frozen
class SinkOp(Op):
    """Writes its one input to files; the planner attaches it to the stage producing it."""


@attrs.frozen
class WriteTextOp(SinkOp):
    sink: WriteToText


@attrs.frozen
class WriteFilesPerStepOp(SinkOp):
    """A streaming file sink: each step's elements to a committed directory of their own."""

    files: StepFiles


@attrs.frozen
class WriteFilesThroughDriverOp(SinkOp):
    """Bounded ``WriteToFiles`` on a URL only the driver reaches (``sparkbeam.io.fileio_remote``)."""

    files: WriteToFiles


@attrs.frozen
class WriteKafkaOp(SinkOp):
    """Each step's (key, value) pairs written to a Kafka topic (``runners/spark/kafka.py``)."""

    spec: WriteKafkaSpec


@attrs.frozen
class LoweredPipeline:
    ops: tuple[Op, ...]
    pcollections: tuple[PCollectionInfo, ...]
    #: PCollection ids the user asked to capture (``sparkbeam.capture``)
    captured: frozenset[int] = frozenset()
    #: driver-side lookup from a PCollection handle (by identity) to its id
    handle_ids: dict[int, int] = attrs.field(factory=dict, eq=False, repr=False)
    #: captured PCollection id -> the file its full history of emissions goes to
    capture_logs: dict[int, str] = attrs.field(factory=dict, eq=False)
    #: op label -> how the planner runs it, where it chose (e.g. "general path: <reason>")
    notes: dict[str, str] = attrs.field(factory=dict, eq=False)

    def id_of(self, pcoll: pvalue.PCollection) -> int:
        try:
            return self.handle_ids[id(pcoll)]
        except KeyError:
            msg = f"{pcoll!r} is not part of this pipeline's graph"
            raise KeyError(msg) from None

    def producer(self, pcoll: int) -> Op:
        for op in self.ops:
            if pcoll in op.outputs:
                return op
        msg = f"no op produces PCollection {pcoll}"
        raise KeyError(msg)

    def consumers(self, pcoll: int) -> list[Op]:
        return [op for op in self.ops if pcoll in op.inputs or any(s.pcoll == pcoll for s in op.side_inputs)]


class _Lowering:
    def __init__(
        self, pipeline: Pipeline, lift_combiners: bool, substitutes: Mapping[int, Callable[[_Lowering], Op | None]]
    ) -> None:
        self.pipeline = pipeline
        self.lift_combiners = lift_combiners
        self.substitutes = substitutes
        self.ids: dict[int, int] = {}
        self.infos: list[PCollectionInfo] = []
        self.ops: list[Op] = []

    def pcoll_id(self, pc: pvalue.PValue) -> int:
        key = id(pc)
        if key not in self.ids:
            if not isinstance(pc, pvalue.PCollection):
                msg = f"expected a PCollection, got {pc!r}"
                raise TypeError(msg)
            self.ids[key] = len(self.infos)
            self.infos.append(PCollectionInfo(len(self.infos), pc.label, pc.windowing, pc.is_bounded))
        return self.ids[key]

    def inputs(self, node: AppliedTransform) -> tuple[int, ...]:
        return tuple(self.pcoll_id(pc) for pc in node.inputs if isinstance(pc, pvalue.PCollection))

    def outputs(self, node: AppliedTransform) -> tuple[int, ...]:
        return tuple(self.pcoll_id(pc) for pc in node.outputs.values() if isinstance(pc, pvalue.PCollection))

    def base(self, node: AppliedTransform) -> dict[str, Any]:
        return {
            "label": node.full_label,
            "location": str(node.location),
            "inputs": self.inputs(node),
            "outputs": self.outputs(node),
        }

    def visit(self, node: AppliedTransform) -> None:
        transform = node.transform
        substitute = self.substitutes.get(id(node))
        if substitute is not None:
            # A backend's rewrite (``schema_segments``): one op for the node, or none for a
            # node that op absorbs.
            op = substitute(self)
            if op is not None:
                self.ops.append(op)
            return
        if (
            self.lift_combiners
            and isinstance(transform, CombinePerKey)
            and not transform.args
            and not transform.kwargs
        ):
            self.ops.append(_lower_combine_per_key(self, node))
            return
        if node.is_primitive:
            self.ops.append(_LOWERINGS.lookup(node)(self, node))
            return
        for part in node.parts:
            self.visit(part)


def _unsupported_primitive(node: AppliedTransform, known: list[str]) -> UnsupportedError:
    msg = (
        f"'{node.full_label}' (applied at {node.location}): the primitive "
        f"{type(node.transform).__name__} is not supported by sparkbeam's runner; "
        f"supported primitives: {', '.join(known)}"
    )
    return UnsupportedError(msg)


#: primitive type -> its lowering; a subclass of a primitive (a transform that specialises
#: one, e.g. a user's Create) lowers as its nearest registered base.
_LOWERINGS: Registry[Callable[[_Lowering, AppliedTransform], Op]] = Registry(
    "lowerings", refuse=_unsupported_primitive, key=lambda node: type(node.transform)
)


def _registers(cls: type) -> Callable:
    return _LOWERINGS.register(cls, subclasses=True)


def supported_primitives() -> list[str]:
    """The primitives the runner executes, read off the lowering registry."""
    return _LOWERINGS.names()


@_registers(Impulse)
def _lower_impulse(lowering: _Lowering, node: AppliedTransform) -> Op:
    return ImpulseOp(**lowering.base(node))


@_registers(Create)
def _lower_create(lowering: _Lowering, node: AppliedTransform) -> Op:
    return CreateOp(**lowering.base(node), values=node.transform.values)


@_registers(ReadFromText)
def _lower_read_text(lowering: _Lowering, node: AppliedTransform) -> Op:
    return ReadTextOp(**lowering.base(node), source=node.transform)


# io (#14 item 4): the BoundedSourceReadOp lowering; a source kind for the execution registry at merge.
@_registers(ReadBoundedSource)
def _lower_read_bounded_source(lowering: _Lowering, node: AppliedTransform) -> Op:
    return BoundedSourceReadOp(**lowering.base(node), source=node.transform.source)


@_registers(_StreamRead)
def _lower_stream_read(lowering: _Lowering, node: AppliedTransform) -> Op:
    return StreamReadOp(**lowering.base(node), spec=node.transform.spec)


@_registers(TestStream)
def _lower_test_stream(lowering: _Lowering, node: AppliedTransform) -> Op:
    transform: TestStream = node.transform
    tags = tuple(pc.tag if pc.tag != "None" else None for pc in node.outputs.values())
    return TestStreamOp(**lowering.base(node), events=transform.events, output_tags=tags)


def _slot(lowering: _Lowering, arg: Any) -> Any:
    if isinstance(arg, pvalue.AsSideInput):
        pc = arg.pvalue
        return SideInputSlot(lowering.pcoll_id(pc), arg, pc.windowing.windowfn, pc.windowing.allowed_lateness)
    return arg


@_registers(ParDo)
def _lower_pardo(lowering: _Lowering, node: AppliedTransform) -> Op:
    transform: ParDo = node.transform
    args = tuple(_slot(lowering, a) for a in transform.args)
    kwargs = {k: _slot(lowering, v) for k, v in transform.kwargs.items()}
    slots = tuple(a for a in (*args, *kwargs.values()) if isinstance(a, SideInputSlot))
    # The main output is tag None whatever the user named it (with_outputs(main=...)).
    tags = tuple(None if tag in (None, "None", transform.main_tag) else tag for tag in node.outputs)
    base = lowering.base(node)
    (main_input,) = base["inputs"]
    windowing = lowering.infos[main_input].windowing
    if is_stateful_dofn(transform.fn):
        return StatefulParDoOp(
            **base,
            dofn=transform.fn,
            args=args,
            kwargs=kwargs,
            output_tags=tags,
            side_inputs=slots,
            input_windowfn=windowing.windowfn,
            windowing=windowing,
        )
    return ParDoOp(
        **base,
        dofn=transform.fn,
        args=args,
        kwargs=kwargs,
        output_tags=tags,
        side_inputs=slots,
        input_windowfn=lowering.infos[main_input].windowing.windowfn,
    )


@_registers(WindowInto)
def _lower_window_into(lowering: _Lowering, node: AppliedTransform) -> Op:
    return WindowIntoOp(**lowering.base(node), windowfn=node.transform.windowing.windowfn)


@_registers(Flatten)
def _lower_flatten(lowering: _Lowering, node: AppliedTransform) -> Op:
    return FlattenOp(**lowering.base(node))


@_registers(GroupByKey)
def _lower_group_by_key(lowering: _Lowering, node: AppliedTransform) -> Op:
    (source,) = node.inputs
    return GroupOp(
        **lowering.base(node),
        windowing=source.windowing,
        keep_pane_indices=node.transform.pane_indices_observed,
    )


@_registers(WriteToText)
def _lower_write_text(lowering: _Lowering, node: AppliedTransform) -> Op:
    return WriteTextOp(**lowering.base(node), sink=node.transform)


@_registers(WriteFilesPerStep)
def _lower_write_files_per_step(lowering: _Lowering, node: AppliedTransform) -> Op:
    return WriteFilesPerStepOp(**lowering.base(node), files=node.transform.files)


@_registers(WriteFilesThroughDriver)
def _lower_write_files_through_driver(lowering: _Lowering, node: AppliedTransform) -> Op:
    return WriteFilesThroughDriverOp(**lowering.base(node), files=node.transform.files)


@_registers(WriteToKafka)
def _lower_write_kafka(lowering: _Lowering, node: AppliedTransform) -> Op:
    return WriteKafkaOp(**lowering.base(node), spec=node.transform.spec)


def _lower_combine_per_key(lowering: _Lowering, node: AppliedTransform) -> Op:
    transform: CombinePerKey = node.transform
    (source,) = node.inputs
    return GroupOp(
        **lowering.base(node),
        windowing=source.windowing,
        combine_fn=transform.combine_fn,
    )


def lower(
    pipeline: Pipeline,
    *,
    lift_combiners: bool = True,
    substitutes: Mapping[int, Callable[[_Lowering], Op | None]] | None = None,
    notes: Mapping[str, str] | None = None,
) -> LoweredPipeline:
    """The pipeline as ops in application order (producers before consumers).

    ``substitutes``: id() of a node -> what lowers it instead (an op, or None to drop a node
    another op absorbs); ``notes``: op label -> how the planner chose to run it."""
    lowering = _Lowering(pipeline, lift_combiners, substitutes or {})
    for node in pipeline.root.parts:
        lowering.visit(node)
    captured = frozenset(lowering.pcoll_id(pc) for pc in pipeline.captured)
    logs = {lowering.pcoll_id(pc): pipeline.capture_logs[id(pc)] for pc in pipeline.captured if id(pc) in pipeline.capture_logs}
    return LoweredPipeline(tuple(lowering.ops), tuple(lowering.infos), captured, dict(lowering.ids), logs, dict(notes or {}))
