"""Translation: an apache_beam pipeline, after Beam's own expansion, as the engine's lowered ops.

The translator walks Beam's graph (``AppliedPTransform`` nodes) depth first, in the order
transforms were applied, so producers come before consumers. These composites are
translated whole (Beam's ReadFromKafka and WriteToKafka too, as sparkbeam's, ``kafka.py``):

- ``CombinePerKey`` with no side arguments becomes one grouping that combines as it
  groups (combiner lifting), with the user's Beam ``CombineFn``;
- ``Read`` of a ``BoundedSource`` becomes a source of the source's bundles, split before
  the run, and a ParDo reading each bundle on the executors (``reads.py``), labelled as
  the splittable ParDo of Beam's expansion. Beam's expansion would run too (as any
  splittable DoFn), but the split before the run needs no shuffle to spread the bundles
  and reads a quarter faster (the batch benchmark). The reading ParDo is run as a FlatMap
  by the engine's own DoFnRunner (``plain.py``); Beam's ``ReadFromText`` at its defaults
  is read instead as a bounded source of the engine whose lines are read in C
  (``text_ranges.py``).

Every other composite is walked into, and each primitive is translated by the function
registered for its type: ``Impulse``, ``ParDo`` (a Beam DoFn run by Beam's DoFnRunner,
``pardo.py``, but for a plain Map, FlatMap or Filter, which the engine's own DoFnRunner
runs with its fast paths, ``plain.py``; a splittable one is split, its parts spread and processed, ``splittable.py``;
a stateful or timely one heads a keyed stage of its own, ``stateful.py``; a batched one,
``process_batch`` or yielding batches, has its batches made and exploded, ``batched.py``), ``WindowInto``
(Beam's WindowFn as the engine's, ``windowing.py``), ``GroupByKey`` (keys encoded with
Beam's coders, ``grouping.py``), ``Flatten`` and ``TestStream``. A primitive without a
translation, or a feature the engine cannot honour yet (an unbounded splittable DoFn, an
unbounded source's among them, in a stream; a periodic impulse that never stops), raises
``NotImplementedError`` naming the transform, before Spark starts.

Each PCollection's windowing comes from Beam (``pcoll.windowing``, which Beam's own
composites, Reshuffle among them, may set without a WindowInto), translated once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam import pvalue as beam_pvalue
from apache_beam.io import iobase
from apache_beam.io import kafka as beam_kafka
from apache_beam.io.unbounded_source import UnboundedSource
from apache_beam.options.pipeline_options import TypeOptions
from apache_beam.runners.common import DoFnSignature
from apache_beam.testing import test_stream as beam_test_stream
from apache_beam.transforms import core as beam_core
from apache_beam.transforms import periodicsequence as beam_periodic
from apache_beam.transforms import util as beam_util
from apache_beam.transforms.combiners import SingleInputTupleCombineFn

from sparkbeam.core import _CallableDoFn
from sparkbeam.runners.beam import kafka as beam_kafka_io
from sparkbeam.runners.beam.batched import (
    BeamBatchedParDoOp,
    is_batched,
    takes_batches,
    warn_if_rebatched,
)
from sparkbeam.runners.beam.grouping import BeamCombineFn, KeyCodec, KeyCodingOp, grouping_coders
from sparkbeam.runners.beam.packing import PackingPlan, pack_name, plan_packing, unpack
from sparkbeam.runners.beam.pardo import BeamParDoOp, SideInputName, SideView
from sparkbeam.runners.beam.plain import BeamFnParDoOp, plain_par_do
from sparkbeam.runners.beam.reads import ReadBundles, pickled_bundles, reading_label, source_bundles
from sparkbeam.runners.beam.splittable import (
    endless_periodic_impulse,
    is_endless_periodic_impulse,
    splittable_ops,
)
from sparkbeam.runners.beam.stateful import stateful_par_do
from sparkbeam.runners.beam.text_ranges import TextRangesSource, text_ranges
from sparkbeam.runners.beam.windowing import engine_windowfn, engine_windowing
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import (
    BoundedSourceReadOp,
    CreateOp,
    FlattenOp,
    GroupOp,
    ImpulseOp,
    LoweredPipeline,
    Op,
    ParDoOp,
    PCollectionInfo,
    SideInputSlot,
    TestStreamOp,
    WindowIntoOp,
)
from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.testing import test_stream
from sparkbeam.utils.timestamp import Duration, Timestamp
from sparkbeam.window import TimestampedValue
from sparkbeam.windowing import Windowing

__all__ = ["supported_primitives", "translate"]

#: What to use instead, for transforms that need what a local Spark runner cannot give.
_REFUSED_HINTS = {
    "ExternalTransform": (
        "cross-language transforms need Beam's expansion service and a portable runner; "
        "use a Python transform (Beam's apache_beam.io.kafka.ReadFromKafka and WriteToKafka run as "
        "sparkbeam's own when the pipeline is built with --runner=sparkbeam.SparkRunner)"
    ),
    "_ReadFromPubSub": (
        "Pub/Sub has no local emulator here; read the messages from Kafka or from files "
        "instead (sparkbeam.io.ReadFromKafka, ReadFromTextStream)"
    ),
    "_WriteToPubSub": "Pub/Sub has no local emulator here; write to files or Kafka instead",
}


class _Translation:
    def __init__(
        self, locations: dict[str, str], deterministic_keys: bool, type_checked: bool = False, drain: bool = False, streaming: bool = False
    ) -> None:
        self.locations = locations
        #: the pipeline runs as a stream (where an unbounded splittable DoFn would hold a step)
        self.streaming = streaming
        #: which CombinePerKeys are packed into one grouping (none in a stream, as in Beam)
        self.packing = PackingPlan()
        #: the pipeline runs drained: splittable DoFns' restrictions are truncated
        self.drain = drain
        self.deterministic_keys = deterministic_keys
        #: Beam checks element types at run time (its runtime type check options)
        self.type_checked = type_checked
        self.ids: dict[int, int] = {}
        self.infos: list[PCollectionInfo] = []
        self.ops: list[Op] = []
        self._windowings: dict[int, Windowing] = {}
        # Beam's PCollections by id, kept alive so that their ids stay theirs.
        self._handles: list[Any] = []
        #: inside Beam's Reshuffle, whose groupings' panes nobody sees
        self.reshuffle_depth = 0
        #: inside a PeriodicImpulse without a stop timestamp (seen unless Beam's runner-API
        #: round trip, as TestPipeline's, made it a plain composite)
        self.endless_periodic_depth = 0

    # -- PCollections ----------------------------------------------------------------
    def windowing(self, pcoll: Any, label: str) -> Windowing:
        beam_windowing = pcoll.windowing
        found = self._windowings.get(id(beam_windowing))
        if found is None:
            found = self._windowings[id(beam_windowing)] = engine_windowing(beam_windowing, label)
            self._handles.append(beam_windowing)
        return found

    def pcoll_id(self, pcoll: Any) -> int:
        key = id(pcoll)
        found = self.ids.get(key)
        if found is None:
            label = _pcoll_label(pcoll)
            found = self.ids[key] = self.new_pcoll(label, self.windowing(pcoll, label), bool(pcoll.is_bounded))
            self._handles.append(pcoll)
        return found

    def new_pcoll(self, label: str, windowing: Windowing, is_bounded: bool) -> int:
        """A PCollection of the translation's own (between a grouping and its key coding)."""
        info = PCollectionInfo(len(self.infos), label, windowing, is_bounded)
        self.infos.append(info)
        return info.id

    # -- nodes -----------------------------------------------------------------------
    def _packed(self, node: Any) -> bool:
        """Whether combiner packing (packing.py) translated ``node``: a pack's first
        CombinePerKey as the pack, the others and their duplicate KeyWithVoids as nothing."""
        key = id(node)
        alias = self.packing.key_with_void_aliases.get(key)
        if alias is not None:
            (output,) = _pcolls(node.outputs.values())
            self.ids[id(output)] = self.pcoll_id(alias)
            self._handles.append(output)
            return True
        if key in self.packing.packed_away:
            return True
        members = self.packing.packs.get(key)
        if members is not None:
            self.ops.extend(_packed_combines(self, members))
            return True
        return False

    def location(self, node: Any) -> str:
        return self.locations.get(node.full_label, "<unknown>")

    def base(self, node: Any) -> dict[str, Any]:
        return {
            "label": node.full_label,
            "location": self.location(node),
            "inputs": tuple(self.pcoll_id(pc) for pc in _pcolls(node.inputs)),
            "outputs": tuple(self.pcoll_id(pc) for pc in _pcolls(node.outputs.values())),
        }

    def visit(self, node: Any) -> None:
        transform = node.transform
        hint = _REFUSED_HINTS.get(type(transform).__name__)
        if hint is not None:
            msg = f"'{node.full_label}' ({type(transform).__name__}, applied at {self.location(node)}) cannot run on sparkbeam: {hint}"
            raise UnsupportedError(msg)
        if self._packed(node):
            return
        for kind, translate_whole in _COMPOSITES:
            if isinstance(transform, kind):
                ops = translate_whole(self, node)
                if ops is not None:
                    self.ops.extend(ops)
                    return
        if node.parts:
            reshuffle = isinstance(transform, (beam_util.Reshuffle, beam_util.ReshufflePerKey))
            endless_periodic = is_endless_periodic_impulse(transform)
            self.reshuffle_depth += reshuffle
            self.endless_periodic_depth += endless_periodic
            for part in node.parts:
                self.visit(part)
            self.reshuffle_depth -= reshuffle
            self.endless_periodic_depth -= endless_periodic
            return
        if _passes_through(node):
            return  # a composite that returned its input (Create's MaybeReshuffle of one value)
        self.ops.extend(_PRIMITIVES.lookup((self, node))(self, node))


def _pcolls(values: Any) -> list[Any]:
    return [v for v in values if isinstance(v, beam_pvalue.PCollection)]


def _pcoll_label(pcoll: Any) -> str:
    producer = pcoll.producer.full_label if pcoll.producer is not None else "?"
    return producer if pcoll.tag in (None, "None") else f"{producer}.{pcoll.tag}"


def _passes_through(node: Any) -> bool:
    outputs = _pcolls(node.outputs.values())
    return all(pc.producer is not node for pc in outputs)


Translate = Callable[[_Translation, Any], list[Op]]


def _untranslated(subject: tuple[_Translation, Any], known: list[str]) -> UnsupportedError:
    translation, node = subject
    msg = (
        f"'{node.full_label}' (applied at {translation.location(node)}): the primitive "
        f"{type(node.transform).__name__} has no translation in sparkbeam's Beam runner; "
        f"supported primitives: {', '.join(known)}"
    )
    return UnsupportedError(msg)


#: Beam primitive type -> its translation; a subclass of a primitive translates as its
#: nearest registered base (Beam specialises its primitives).
_PRIMITIVES: Registry[Translate] = Registry(
    "Beam primitives", refuse=_untranslated, key=lambda subject: type(subject[1].transform)
)


def _translates(kind: type) -> Callable[[Translate], Translate]:
    return _PRIMITIVES.register(kind, subclasses=True)


def supported_primitives() -> list[str]:
    """Beam's primitives this runner translates, read off the registry."""
    return _PRIMITIVES.names()


@_translates(beam_core.Impulse)
def _impulse(t: _Translation, node: Any) -> list[Op]:
    return [ImpulseOp(**t.base(node))]


@_translates(beam_core.Flatten)
def _flatten(t: _Translation, node: Any) -> list[Op]:
    base = t.base(node)
    if not base["inputs"]:  # Flatten of no PCollections: an empty one
        return [CreateOp(**base, values=())]
    return [FlattenOp(**base)]


@_translates(beam_core.WindowInto)
def _window_into(t: _Translation, node: Any) -> list[Op]:
    return [WindowIntoOp(**t.base(node), windowfn=engine_windowfn(node.transform.windowing.windowfn))]


def _side_input(t: _Translation, view: Any) -> tuple[SideInputSlot, SideView]:
    pcoll = view.pvalue
    label = _pcoll_label(pcoll)
    windowing = t.windowing(pcoll, label)
    side_view = SideView(type(view), view._view_options())
    # The slot ships with the op: it names the PCollection, never carries it (or its pipeline).
    shown = copy.copy(view)
    shown.pvalue = SideInputName(label)
    slot = SideInputSlot(t.pcoll_id(pcoll), shown, windowing.windowfn, windowing.allowed_lateness)
    return slot, side_view


@_translates(beam_core.ParDo)
def _par_do(t: _Translation, node: Any) -> list[Op]:
    transform = node.transform
    fn = transform.fn
    signature = DoFnSignature(fn)
    where = f"'{node.full_label}' (applied at {t.location(node)})"
    batched = is_batched(fn)
    if batched and (signature.is_stateful_dofn() or signature.is_splittable_dofn()):
        # (Beam refuses process_batch with state or a restriction; this is a process
        # declared to yield batches.)
        kind = "stateful" if signature.is_stateful_dofn() else "splittable"
        msg = (
            f"{where}: {type(fn).__name__} is a {kind} DoFn that yields batches "
            "(@yields_batches); sparkbeam's Beam runner runs batched DoFns that are neither "
            f"stateful nor splittable only: yield elements from the {kind} DoFn"
        )
        raise UnsupportedError(msg)
    if signature.is_stateful_dofn():
        return stateful_par_do(t, node, where)  # a keyed stage of its own (stateful.py)
    splittable = signature.is_splittable_dofn()
    if splittable and signature.is_unbounded_per_element():
        if endless_periodic_impulse(node, inside_one=bool(t.endless_periodic_depth)):
            msg = (
                f"{where}: {type(fn).__name__} is a PeriodicImpulse with no stop_timestamp, which never "
                "ends; give it a stop_timestamp, or, for a stream, use TestStream or sparkbeam's stream "
                "reads in a sparkbeam pipeline"
            )
            raise UnsupportedError(msg)
        if t.streaming and not isinstance(fn, beam_periodic.ImpulseSeqGenDoFn):
            msg = (
                f"{where}: {type(fn).__name__} is an unbounded splittable DoFn (unbounded_per_element); "
                "in a stream sparkbeam's Beam runner would process its restrictions to their end within "
                "one step, holding the stream: run it in batch (where it runs to its end, as on Beam's "
                "local runners), or read the stream with TestStream or sparkbeam's stream reads"
            )
            raise UnsupportedError(msg)
    (main,) = _pcolls(node.inputs)
    if batched and not _has_batch_converters(fn):
        try:  # lost in Beam's runner-API round trip: inferred again, as Beam's ParDo does
            transform.infer_batch_converters(main.element_type)
        except TypeError as error:
            msg = f"{where}: {error}"
            raise TypeError(msg) from error
    if takes_batches(fn):
        warn_if_rebatched(node, main)
    label = _pcoll_label(main)
    windowing = t.windowing(main, label)
    base = t.base(node)
    if not splittable and not batched:
        plain = plain_par_do(node, signature, base, windowing, t.type_checked)
        if plain is not None:
            return [plain]  # the engine's own DoFnRunner and its fast paths (plain.py)
    sides = [_side_input(t, view) for view in node.side_inputs]
    tags = tuple(None if tag in (None, "None") else tag for tag, pc in node.outputs.items() if isinstance(pc, beam_pvalue.PCollection))
    op = (BeamBatchedParDoOp if batched else BeamParDoOp)(
        **base,
        dofn=fn,
        args=tuple(transform.args),
        kwargs=dict(transform.kwargs),
        output_tags=tags,
        side_inputs=tuple(slot for slot, _ in sides),
        input_windowfn=windowing.windowfn,
        beam_windowing=main.windowing,
        side_views=tuple(view for _, view in sides),
    )
    return splittable_ops(t, op, windowing, drain=t.drain) if splittable else [op]


def _has_batch_converters(fn: Any) -> bool:
    needs_input = takes_batches(fn) or getattr(fn, "_process_batch_defined", False)
    needs_output = getattr(fn, "_can_yield_batches", False)
    return (not needs_input or getattr(fn, "input_batch_converter", None) is not None) and (
        not needs_output or getattr(fn, "output_batch_converter", None) is not None
    )


def _key_coded_grouping(
    t: _Translation, node: Any, codec: KeyCodec, decode: Callable[[Any], Any], combine_fn: Any = None
) -> list[Op]:
    """EncodeKey (upstream stage) -> the grouping on encoded keys -> DecodeKey (its stage)."""
    (source,) = _pcolls(node.inputs)
    (output,) = _pcolls(node.outputs.values())
    return _grouping_ops(t, node.full_label, t.location(node), t.pcoll_id(source), t.pcoll_id(output), codec, decode, combine_fn)


def _grouping_ops(
    t: _Translation,
    label: str,
    location: str,
    source_id: int,
    output_id: int,
    codec: KeyCodec,
    decode: Callable[[Any], Any],
    combine_fn: Any = None,
) -> list[Op]:
    source_info, output_info = t.infos[source_id], t.infos[output_id]
    encoded = t.new_pcoll(f"{label}/EncodeKey.out", source_info.windowing, source_info.is_bounded)
    grouped = t.new_pcoll(f"{label}.grouped", output_info.windowing, output_info.is_bounded)
    return [
        KeyCodingOp(
            label=f"{label}/EncodeKey",
            location=location,
            inputs=(source_id,),
            outputs=(encoded,),
            dofn=_CallableDoFn(codec.encode, "Map"),
            bind=codec.encoder,
            str_pairs_pass=codec.str_pairs_pass,
            args=(),
            kwargs={},
            output_tags=(None,),
            input_windowfn=source_info.windowing.windowfn,
        ),
        GroupOp(
            label=label,
            location=location,
            inputs=(encoded,),
            outputs=(grouped,),
            windowing=source_info.windowing,
            combine_fn=combine_fn,
            keep_pane_indices=t.reshuffle_depth == 0,
        ),
        KeyCodingOp(
            label=f"{label}/DecodeKey",
            location=location,
            inputs=(grouped,),
            outputs=(output_id,),
            dofn=_CallableDoFn(decode, "Map"),
            args=(),
            kwargs={},
            output_tags=(None,),
            input_windowfn=output_info.windowing.windowfn,
        ),
    ]


@_translates(beam_core.GroupByKey)
def _group_by_key(t: _Translation, node: Any) -> list[Op]:
    (source,) = _pcolls(node.inputs)
    key_coder, value_coder = grouping_coders(source, node.full_label, t.deterministic_keys)
    codec = KeyCodec(node.full_label, key_coder, value_coder)
    return _key_coded_grouping(t, node, codec, codec.decode_grouped)


@_translates(beam_test_stream.TestStream)
def _test_stream(t: _Translation, node: Any) -> list[Op]:
    transform = node.transform
    if getattr(transform, "_endpoint", None):
        msg = f"'{node.full_label}': a TestStream reading a TestStreamService (endpoint=...) is not supported"
        raise UnsupportedError(msg)
    base = t.base(node)
    tags = tuple(None if tag in (None, "None") else tag for tag, pc in node.outputs.items() if isinstance(pc, beam_pvalue.PCollection))
    events = tuple(_test_stream_event(event, node.full_label) for event in transform._events)
    return [TestStreamOp(**base, events=events, output_tags=tags)]


def _test_stream_event(event: Any, label: str) -> Any:
    if isinstance(event, beam_test_stream.ElementEvent):
        values = [TimestampedValue(tv.value, Timestamp.from_micros(tv.timestamp.micros)) for tv in event.timestamped_values]
        return test_stream.ElementEvent(values, event.tag)
    if isinstance(event, beam_test_stream.WatermarkEvent):
        return test_stream.WatermarkEvent(Timestamp.from_micros(event.new_watermark.micros), event.tag)
    if isinstance(event, beam_test_stream.ProcessingTimeEvent):
        return test_stream.ProcessingTimeEvent(Duration.from_micros(event.advance_by.micros))
    msg = f"'{label}': TestStream event {event!r} is not supported"
    raise UnsupportedError(msg)


# -- composites translated whole ---------------------------------------------------------


def _combine_per_key(t: _Translation, node: Any) -> list[Op] | None:
    transform = node.transform
    if transform.args or transform.kwargs or node.side_inputs:
        return None  # side arguments reach the CombineFn per element: run Beam's expansion
    (source,) = _pcolls(node.inputs)
    key_coder, _ = grouping_coders(source, node.full_label, t.deterministic_keys)
    # The fn as given: Beam's runners do not specialise it (for_input_type would turn
    # MeanCombineFn into an integer mean for ints).
    codec = KeyCodec(node.full_label, key_coder)
    return _key_coded_grouping(t, node, codec, codec.decode_key, combine_fn=BeamCombineFn(transform.fn))


def _packed_combines(t: _Translation, members: list[Any]) -> list[Op]:
    """Sibling CombinePerKeys over one input as one grouping and an Unpack (packing.py)."""
    first = members[0]
    (source,) = _pcolls(first.inputs)
    outputs = [t.pcoll_id(_pcolls(member.outputs.values())[0]) for member in members]
    name = pack_name([member.full_label for member in members])
    label, location = f"{name}/Pack", t.location(first)
    key_coder, _ = grouping_coders(source, label, t.deterministic_keys)
    codec = KeyCodec(label, key_coder)
    first_output = t.infos[outputs[0]]
    packed = t.new_pcoll(f"{label}.out", first_output.windowing, first_output.is_bounded)
    fn = BeamCombineFn(SingleInputTupleCombineFn(*(member.transform.fn for member in members)))
    unpack_op = ParDoOp(
        label=f"{name}/Unpack",
        location=location,
        inputs=(packed,),
        outputs=tuple(outputs),
        dofn=_CallableDoFn(unpack, "FlatMap"),
        args=(),
        kwargs={},
        output_tags=tuple(str(index) for index in range(len(members))),
        input_windowfn=first_output.windowing.windowfn,
    )
    return [*_grouping_ops(t, label, location, t.pcoll_id(source), packed, codec, codec.decode_key, fn), unpack_op]


def _read(t: _Translation, node: Any) -> list[Op] | None:
    source = node.transform.source
    where = f"'{node.full_label}' (applied at {t.location(node)})"
    if isinstance(source, iobase.BoundedSource):
        (output,) = _pcolls(node.outputs.values())
        output_id = t.pcoll_id(output)
        info = t.infos[output_id]
        try:
            bundles = source_bundles(source)
        except Exception as error:
            msg = f"{where}: splitting {source!r} failed: {type(error).__name__}: {error}"
            raise ValueError(msg) from error
        location = t.location(node)
        label_of_reader = reading_label(node)
        # Beam's ReadFromText at its defaults: its files' lines read in C (text_ranges.py).
        ranges = text_ranges(bundles)
        if ranges is not None:
            reader = TextRangesSource(ranges, label_of_reader)
            return [BoundedSourceReadOp(label=label_of_reader, location=location, inputs=(), outputs=(output_id,), source=reader)]
        bundles_id = t.new_pcoll(f"{node.full_label}.bundles", info.windowing, True)
        return [
            CreateOp(label=node.full_label, location=location, inputs=(), outputs=(bundles_id,), values=pickled_bundles(bundles)),
            # Run by the engine's own DoFnRunner as a FlatMap (plain.py), as Beam's Map is.
            BeamFnParDoOp(
                label=label_of_reader,
                location=location,
                inputs=(bundles_id,),
                outputs=(output_id,),
                dofn=_CallableDoFn(ReadBundles(label_of_reader), "FlatMap"),
                args=(),
                kwargs={},
                output_tags=(None,),
                input_windowfn=info.windowing.windowfn,
            ),
        ]
    if isinstance(source, (beam.transforms.PTransform, UnboundedSource)):
        # Read of a transform, or of an unbounded source: its expansion (for an unbounded
        # source, Beam's splittable DoFn driving the source's reader, run to its end in batch).
        return None
    msg = f"{where}: reading {type(source).__name__}, neither a BoundedSource nor an UnboundedSource, is not supported"
    raise UnsupportedError(msg)


def _kafka_read(t: _Translation, node: Any) -> list[Op]:
    """Beam's ReadFromKafka, left unexpanded by ``SparkRunner.apply``: sparkbeam's read (``kafka.py``)."""
    base = t.base(node)
    (output,) = _pcolls(node.outputs.values())
    return list(beam_kafka_io.read_ops(node, base, t.new_pcoll(f"{node.full_label}/Read", t.windowing(output, base["label"]), False)))


_COMPOSITES: list[tuple[type, Callable[[_Translation, Any], list[Op] | None]]] = [
    (beam_core.CombinePerKey, _combine_per_key),
    (iobase.Read, _read),
    (beam_kafka.ReadFromKafka, _kafka_read),
    (beam_kafka.WriteToKafka, lambda t, node: [beam_kafka_io.write_op(t.base(node), node)]),
]


def _type_checked(pipeline: Any) -> bool:
    options = getattr(pipeline, "_options", None)
    if options is None:
        return False
    types = options.view_as(TypeOptions)
    return bool(types.runtime_type_check or types.performance_runtime_type_check)


def translate(
    pipeline: Any,
    *,
    locations: dict[str, str] | None = None,
    captured: Sequence[Any] = (),
    capture_logs: dict[int, str] | None = None,
    deterministic_keys: bool = True,
    drain: bool = False,
    streaming: bool = False,
) -> LoweredPipeline:
    """The engine's ops for a Beam pipeline, producers first; ``captured`` are Beam
    PCollections whose emissions the run records (``capture_logs``: by ``id`` of the
    PCollection, the file each one's log goes to); ``drain``: run it as a drained pipeline
    (splittable DoFns' restrictions truncated); ``streaming``: it runs as a stream."""
    translation = _Translation(locations or {}, deterministic_keys, _type_checked(pipeline), drain, streaming)
    if not streaming:
        translation.packing = plan_packing(pipeline)
    for node in pipeline.transforms_stack[0].parts:
        translation.visit(node)
    for pcoll in captured:
        if id(pcoll) not in translation.ids:
            msg = f"{pcoll} was captured but is not part of this pipeline's graph"
            raise ValueError(msg)
    captured_ids = frozenset(translation.ids[id(pc)] for pc in captured)
    logs = {translation.ids[key]: path for key, path in (capture_logs or {}).items() if key in translation.ids}
    return LoweredPipeline(tuple(translation.ops), tuple(translation.infos), captured_ids, dict(translation.ids), logs)
