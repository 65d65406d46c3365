"""Grouping a Beam PCollection in the engine: keys by Beam's coders, combines by Beam's CombineFns.

Where encoding happens, and why:

- **Keys** are encoded with the input PCollection's key coder, made deterministic as Beam
  requires for grouping (``Coder.as_deterministic_coder``), just before the shuffle, and
  decoded right after the grouping. The engine groups by the encoded bytes, which is what
  a Beam runner must do: keys that are equal but encode differently are different keys,
  and keys with no value equality of their own (dicts, lists) group by their encoding.
- **Values of a GroupByKey** are encoded with the value coder on the same boundary, so the
  grouped values are Beam's copies of what was sent (types as Beam's coders give them),
  never objects shared with the upstream DoFn.
- Inside a stage values stay Python objects, and the inputs and accumulators of a lifted
  combine are not encoded: they are added to accumulators before the shuffle in batch,
  and Spark pickles what crosses its shuffles and checkpoints.
- **A plain ``str`` key is its own encoding** where the key coder is one of Beam's that
  encodes a ``str`` as its UTF-8 bytes behind a fixed prefix (``StrUtf8Coder``, the
  ``FastPrimitivesCoder`` family): two such keys encode alike exactly when they are equal,
  so grouping by the ``str`` is grouping by its bytes, and a ``str`` never equals the
  ``bytes`` every other key is encoded to. Encoding and decoding the most common key cost
  more than the rest of a lifted combine's work per element (the batch benchmark).

``KeyCodec`` holds the coders; its methods are the functions of the small ParDos the
translator puts around a grouping. ``BeamCombineFn`` gives a Beam ``CombineFn`` the
engine's CombineFn interface.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs
from apache_beam import coders
from apache_beam.typehints import typehints

from sparkbeam.combine import CombineFn
from sparkbeam.metrics.execution import current_container
from sparkbeam.runners.beam.metrics import _EngineTracker, beam_metrics, tracking_for_the_task
from sparkbeam.runners.beam.metrics import _get_tracker as _current_tracker
from sparkbeam.runners.core.elements.execution import BodyBuilder, register_kind
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import ParDoOp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value

__all__ = ["BeamCombineFn", "KeyCodec", "KeyCodingOp", "grouping_coders"]


def grouping_coders(pcoll: Any, label: str, deterministic: bool) -> tuple[Any, Any]:
    """(key coder, value coder) of a (key, value) PCollection that ``label`` groups; the
    key coder deterministic unless ``deterministic`` is off (Beam's
    ``--allow_non_deterministic_key_coders``)."""
    kv_type = typehints.coerce_to_kv_type(pcoll.element_type, label)
    key_type, value_type = kv_type.tuple_types
    key_coder = coders.registry.get_coder(key_type)
    if deterministic:
        key_coder = key_coder.as_deterministic_coder(label)
    return key_coder, coders.registry.get_coder(value_type)


def _not_a_pair(label: str, element: Any) -> TypeError:
    text = repr(element)
    if len(text) > 200:
        text = text[:197] + "..."
    msg = f"'{label}' groups (key, value) pairs, but got {text}; key the elements first, e.g. with beam.Map(lambda x: (key_of(x), x))"
    return TypeError(msg)


@attrs.frozen
class KeyCodec:
    """Encodes (key, value) pairs before a grouping and decodes its output after it.

    ``value_coder`` is None for a lifted combine, whose values are not encoded.
    """

    label: str
    key_coder: Any = attrs.field(eq=False)
    value_coder: Any = attrs.field(default=None, eq=False)

    @property
    def str_keys_pass(self) -> bool:
        """Whether a plain ``str`` key is its own encoding (see the module docs)."""
        return type(self.key_coder) in _ENCODES_STR_AS_UTF8

    @property
    def str_pairs_pass(self) -> bool:
        """Whether ``encoder`` leaves every ``(str, value)`` pair as it is: a plain ``str``
        key is its own encoding and the value is not encoded (a lifted combine)."""
        return self.value_coder is None and self.str_keys_pass

    def encode(self, element: Any) -> tuple[bytes, Any]:
        """Key and value by their coders, whatever the key (a stateful ParDo's keys)."""
        try:
            key, value = element
        except (TypeError, ValueError):
            raise _not_a_pair(self.label, element) from None
        if self.value_coder is not None:
            value = self.value_coder.encode(value)
        return self.key_coder.encode(key), value

    def encoder(self) -> Callable[[Any], Any]:
        """What a grouping's ``EncodeKey`` runs: ``encode`` with the coders' implementations
        looked up once (per bundle), as Beam's runners call them, not once per element, and
        a plain ``str`` key that is its own encoding kept (``decode_key`` and
        ``decode_grouped`` know it); an element left unchanged is returned as it is."""
        label = self.label
        encode_key = self.key_coder.get_impl().encode
        str_passes = self.str_keys_pass
        if self.value_coder is None:

            def encode_key_only(element: Any) -> Any:
                if type(element) is tuple and len(element) == 2 and str_passes and type(element[0]) is str:
                    return element
                try:
                    key, value = element
                except (TypeError, ValueError):
                    raise _not_a_pair(label, element) from None
                return encode_key(key), value

            return encode_key_only
        encode_value = self.value_coder.get_impl().encode

        def encode_both(element: Any) -> tuple[Any, Any]:
            try:
                key, value = element
            except (TypeError, ValueError):
                raise _not_a_pair(label, element) from None
            if str_passes and type(key) is str:
                return key, encode_value(value)
            return encode_key(key), encode_value(value)

        return encode_both

    def decode_grouped(self, element: tuple[Any, Iterable[bytes]]) -> tuple[Any, list]:
        key, values = element
        decode = self.value_coder.decode
        return self._decoded_key(key), [decode(value) for value in values]

    def decode_key(self, element: tuple[Any, Any]) -> tuple[Any, Any]:
        key, combined = element
        if type(key) is str:  # passed as itself (every encoded key is bytes)
            return element
        return self.key_coder.decode(key), combined

    def _decoded_key(self, key: Any) -> Any:
        return key if type(key) is str else self.key_coder.decode(key)


#: Beam's key coders that encode a plain ``str`` as a fixed prefix and its UTF-8 bytes
_ENCODES_STR_AS_UTF8 = frozenset({
    coders.StrUtf8Coder,
    coders.FastPrimitivesCoder,
    coders.coders.DeterministicFastPrimitivesCoder,
    coders.coders.DeterministicFastPrimitivesCoderV2,
})


@attrs.frozen
class KeyCodingOp(ParDoOp):
    """``EncodeKey`` or ``DecodeKey`` around a grouping: a ``Map`` of one of ``KeyCodec``'s
    methods. It is a ParDo to the planner, but joins a fused body as a plain function call
    on each element (``_join_key_coding``): the codec is not user code with DoFn features
    to honour, and this runs once per element on both sides of every grouping."""

    #: makes the function to run, once per bundle (``KeyCodec.encoder``); None: the Map's own
    bind: Callable[[], Callable[[Any], Any]] | None = attrs.field(default=None, eq=False)
    #: the function leaves a ``(str, value)`` pair as it is (``KeyCodec.str_pairs_pass``):
    #: such an element goes on with no call at all
    str_pairs_pass: bool = False


def _join_key_coding(op: KeyCodingOp, body: BodyBuilder) -> None:
    code = op.bind() if op.bind is not None else op.dofn.fn
    label, location = op.label, op.location
    str_pairs_pass = op.str_pairs_pass
    (source,) = op.inputs
    (target,) = op.outputs
    send = body.sender(target)

    def receive(wv: WindowedValue) -> None:
        value = wv[0]
        if str_pairs_pass and type(value) is tuple and len(value) == 2 and type(value[0]) is str:
            send(wv)  # its own encoding, as the function would have found
            return
        try:
            coded = code(value)
        except Exception as error:
            raise UserCodeError(label, location, error, value) from error
        if coded is value:  # its own encoding: the element as it is
            send(wv)
        else:
            send(WindowedValue(coded, wv[1], wv[2], wv[3]))

    body.receive(source, receive)
    if str_pairs_pass:
        # A (str, value) pair is its own encoding: into the pre-combine's table with no
        # element built and no call of ours (the table checks the key's type); any other
        # element built and received as above.
        unknown = PANE_INFO_UNKNOWN

        def receive_built(value: Any, micros: int, windows: tuple) -> None:
            receive(new_windowed_value((value, micros, windows, unknown)))

        send_stamped = body.keyed_stamped_sender(target, str, receive_built)
        if send_stamped is not None:
            body.receive_stamped(source, send_stamped)


register_kind(KeyCodingOp, like=ParDoOp, join_body=_join_key_coding, body_code="none")


class BeamCombineFn(CombineFn):
    """A Beam ``CombineFn`` behind the engine's CombineFn interface (the engine calls it as
    a lifted combine: accumulate before the shuffle, merge and extract after); its Beam
    metrics go to the engine's."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def default_label(self) -> str:
        return str(self.fn.default_label())

    def setup(self, *args: Any, **kwargs: Any) -> None:
        beam_metrics(self.fn.setup)

    def create_accumulator(self, *args: Any, **kwargs: Any) -> Any:
        # Once per key and window before the shuffle: as add_input.
        tracker = _current_tracker()
        if type(tracker) is _EngineTracker and tracker.container is current_container() and tracker.container is not None:
            return self.fn.create_accumulator()
        return beam_metrics(self.fn.create_accumulator)

    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        # Once per element: where the task's tracking is in place already (a stage whose
        # Beam functions the engine runs, plain.py), no tracker to set and reset per call.
        # (metrics.tracking_in_place, inlined.)
        tracker = _current_tracker()
        if type(tracker) is _EngineTracker and tracker.container is current_container() and tracker.container is not None:
            return self.fn.add_input(mutable_accumulator, element)
        return beam_metrics(self.fn.add_input, mutable_accumulator, element)

    def direct_calls(self) -> tuple[Any, Callable[[], None]]:
        """(Beam's CombineFn itself, a function that ends this): for a run of calls in this
        thread, as a batch grouping's map side makes (``MapSideTable``) and its panes'
        extraction, that call Beam's ``create_accumulator``, ``add_input`` and
        ``extract_output`` directly, with no check or tracker set per call: Beam's metric
        updates go to the running task's container until the function is called
        (``tracking_for_the_task``, set once)."""
        return self.fn, tracking_for_the_task()

    def add_inputs(self, mutable_accumulator: Any, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return beam_metrics(self.fn.add_inputs, mutable_accumulator, elements)

    def merge_accumulators(self, accumulators: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return beam_metrics(self.fn.merge_accumulators, accumulators)

    def compact(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return beam_metrics(self.fn.compact, accumulator)

    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return beam_metrics(self.fn.extract_output, accumulator)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        beam_metrics(self.fn.teardown)

    def __repr__(self) -> str:
        return f"BeamCombineFn({self.fn!r})"
