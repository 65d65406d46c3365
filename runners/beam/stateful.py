"""A Beam stateful or timely ParDo in the engine: Beam's DoFnRunner over the engine's keyed state.

A ParDo whose DoFn declares state (``DoFn.StateParam``) or timers (``DoFn.TimerParam``,
``on_timer``) heads a keyed stage, as sparkbeam's own stateful DoFns do (DESIGN §3b): its
state and timers live per key and window in the stage's keyed-state RDD on Spark,
checkpointed with it, its pending event-time timers hold the stage's output watermark, and
due timers fire as the input watermark or the step's clock passes them
(``runners/core/state/stateful_step.py`` runs the step). What differs is who calls the DoFn:
``BeamStatefulDoFnRunner`` hands each element and each firing timer to Beam's own
``apache_beam.runners.common.DoFnRunner``, with a ``UserStateContext`` whose cells and timers
read and write the engine's store, so every parameter of Beam's stateful DoFns
(``KeyParam``, ``TimestampParam``, ``WindowParam`` and ``DynamicTimerTagParam`` in timer
callbacks, dynamic timer tags) behaves as in Beam.

Beam's coders decide what is stored and what crosses the shuffle, as in a Beam runner:

- the translator puts a small ParDo before the stage that encodes each (key, value) with
  the input's key coder (made deterministic, as Beam's runners require for keys) and value
  coder; the stage is keyed by the encoded key, and the runner decodes both before the
  DoFn sees the element;
- each state cell stores what its spec's coder encodes: a bag and an ordered list their
  encoded elements, a set its distinct encodings, a read-modify-write cell its encoded
  value, a combining cell its encoded accumulator (``CombiningValueStateSpec.coder`` is
  the accumulator's coder). A value read back is Beam's decoded copy, never the object the
  DoFn added.

The cells and timers are the engine's (``runners/core/state/user_state.py``), the same code
sparkbeam's own stateful DoFns use, in the engine's ``CellForm`` for Beam: values encoded as
above, times read and given as Beam's ``Timestamp``; Beam's spec classes are registered as
cells of the engine's kinds. Timers: ``set(t)`` keeps one pending timer per (timer, dynamic
tag), replacing an earlier setting; an event-time timer holds the output watermark at ``t``,
a processing-time timer at the timestamp of the element (or timer) that set it, as Beam's
SDK harness sets the holds. A callback's outputs are stamped with the timer's firing time,
in its window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs
from apache_beam import pvalue as beam_pvalue
from apache_beam.runners import common
from apache_beam.runners.worker import statesampler
from apache_beam.transforms import userstate
from apache_beam.utils import windowed_value as beam_wv
from apache_beam.utils.timestamp import Timestamp as BeamTimestamp

from sparkbeam.core import _CallableDoFn
from sparkbeam.runners.beam.elements import to_beam_pane
from sparkbeam.runners.beam.grouping import KeyCodec, grouping_coders
from sparkbeam.runners.beam.metrics import beam_metrics, task_tracker
from sparkbeam.runners.beam.pardo import engine_receivers
from sparkbeam.runners.beam.windowing import to_beam_window
from sparkbeam.runners.core.elements import execution
from sparkbeam.runners.core.grouping.drops import DropReason, GroupingStats
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.lowering.errors import UnsupportedError, UserCodeError
from sparkbeam.runners.core.lowering.ops import Op, ParDoOp, StatefulParDoOp
from sparkbeam.runners.core.state.stateful_step import (
    checked_timer_hold,
    expire_windows,
    register_stateful_runner,
    take_due_timer,
)
from sparkbeam.runners.core.state.user_state import (
    CellForm,
    KeyStore,
    RuntimeTimer,
    WindowCells,
    register_state_spec,
    runtime_state,
)
from sparkbeam.userstate import (
    BagStateSpec,
    CombiningValueStateSpec,
    OrderedListStateSpec,
    ReadModifyWriteStateSpec,
    SetStateSpec,
)
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["BeamStatefulDoFnRunner", "BeamStatefulParDoOp", "stateful_par_do"]

Emit = Callable[[WindowedValue], None]


@attrs.frozen
class BeamStatefulParDoOp(StatefulParDoOp):
    """A stateful ParDo of an apache_beam pipeline; its input is (encoded key, encoded value)."""

    #: the main input's Beam windowing: Beam's output handler windows ``TimestampedValue`` outputs with it
    beam_windowing: Any = attrs.field(default=None, eq=False)
    #: decodes the (key, value) the stage receives
    codec: KeyCodec | None = attrs.field(default=None, eq=False)


# -------------------------------------------------------------------------------- translation


def stateful_par_do(t: Any, node: Any, where: str) -> list[Op]:
    """The ops of a Beam ParDo with a stateful DoFn: EncodeKey (fused upstream), then the
    keyed stage. ``t`` is the translator's ``_Translation``."""
    transform = node.transform
    signature = common.DoFnSignature(transform.fn)
    if signature.is_splittable_dofn():
        msg = f"{where}: a DoFn both splittable and stateful is not supported by sparkbeam's Beam runner"
        raise UnsupportedError(msg)
    if node.side_inputs:
        msg = f"{where}: a stateful DoFn with side inputs is not supported by sparkbeam's Beam runner yet"
        raise UnsupportedError(msg)
    if signature.timer_methods and any(
        spec.time_domain not in (userstate.TimeDomain.WATERMARK, userstate.TimeDomain.REAL_TIME)
        for spec in signature.timer_methods
    ):
        msg = f"{where}: timers in the {userstate.TimeDomain.DEPENDENT_REAL_TIME} domain are not supported by sparkbeam"
        raise UnsupportedError(msg)
    (main,) = [pc for pc in node.inputs if isinstance(pc, beam_pvalue.PCollection)]
    if main.windowing.windowfn.is_merging():
        msg = (
            f"{where}: a stateful DoFn in merging windows ({type(main.windowing.windowfn).__name__}) is not "
            "supported by sparkbeam: state and timers are per window, and merging them is not defined; "
            "group first (GroupByKey), or window the input with a non-merging WindowFn"
        )
        raise UnsupportedError(msg)
    state_specs, _ = userstate.get_dofn_specs(transform.fn)
    for spec in state_specs:
        if not isinstance(spec, _SUPPORTED_SPECS):
            msg = f"{where}: the state spec {spec!r} ({type(spec).__name__}) is not supported by sparkbeam's Beam runner"
            raise UnsupportedError(msg)
    base = t.base(node)
    (source_id,) = base["inputs"]
    info = t.infos[source_id]
    key_coder, value_coder = grouping_coders(main, node.full_label, t.deterministic_keys)
    codec = KeyCodec(node.full_label, key_coder, value_coder)
    encoded = t.new_pcoll(f"{node.full_label}/EncodeKey.out", info.windowing, info.is_bounded)
    tags = tuple(
        None if tag in (None, "None") else tag
        for tag, pc in node.outputs.items()
        if isinstance(pc, beam_pvalue.PCollection)
    )
    # Built as a dict, as the translator builds its ops: mypy does not see the fields of
    # attrs classes inherited across the package's import path.
    stage_fields: dict[str, Any] = {
        **base,
        "inputs": (encoded,),
        "dofn": transform.fn,
        "args": tuple(transform.args),
        "kwargs": dict(transform.kwargs),
        "output_tags": tags,
        "input_windowfn": info.windowing.windowfn,
        "windowing": info.windowing,
        "beam_windowing": main.windowing,
        "codec": codec,
    }
    return [
        ParDoOp(
            label=f"{node.full_label}/EncodeKey",
            location=base["location"],
            inputs=(source_id,),
            outputs=(encoded,),
            dofn=_CallableDoFn(codec.encode, "Map"),
            args=(),
            kwargs={},
            output_tags=(None,),
            input_windowfn=info.windowing.windowfn,
        ),
        BeamStatefulParDoOp(**stage_fields),
    ]


# -------------------------------------------------------------------------------- state cells


def _beam_micros(timestamp: Any, what: str) -> int:
    """A time a Beam DoFn gives (seconds, Beam's Timestamp, a datetime) in micros, read as
    Beam reads it (and refused with Beam's error)."""
    return BeamTimestamp.of(timestamp).micros


def _beam_timestamp(micros: int) -> Any:
    return BeamTimestamp(micros=micros)


#: The engine's cells and timers, as a Beam runner keeps them: each value stored as its
#: spec's coder encodes it (a read gives Beam's decoded copy), times in Beam's Timestamp.
_BEAM_FORM = CellForm(encoded=True, micros_of=_beam_micros, timestamp_of=_beam_timestamp)

# Beam's spec classes are cells of the engine's kinds; they are also Beam's runtime-state
# classes, as the cells Beam's own runners hand a DoFn are.
for _beam_spec, _engine_spec, _beam_runtime in (
    (userstate.BagStateSpec, BagStateSpec, userstate.BagRuntimeState),
    (userstate.SetStateSpec, SetStateSpec, userstate.SetRuntimeState),
    (userstate.ReadModifyWriteStateSpec, ReadModifyWriteStateSpec, userstate.ReadModifyWriteRuntimeState),
    (userstate.CombiningValueStateSpec, CombiningValueStateSpec, userstate.CombiningValueRuntimeState),
    (userstate.OrderedListStateSpec, OrderedListStateSpec, userstate.OrderedListRuntimeState),
):
    register_state_spec(_beam_spec, like=_engine_spec, runtime_bases=(_beam_runtime,))
_SUPPORTED_SPECS = (
    userstate.BagStateSpec,
    userstate.SetStateSpec,
    userstate.ReadModifyWriteStateSpec,
    userstate.CombiningValueStateSpec,
    userstate.OrderedListStateSpec,
)


class _Timer(RuntimeTimer, userstate.BaseTimer):
    """The engine's timer, also Beam's ``BaseTimer`` (as Beam's runners' timers are)."""

    __slots__ = ()


class _StateContext(userstate.UserStateContext):
    """What Beam's DoFnInvoker asks for state and timers: those of the (key, window) the
    runner is processing (the invoker's key and window are that key and window)."""

    def __init__(self, runner: BeamStatefulDoFnRunner) -> None:
        self._runner = runner

    def get_state(self, state_spec: Any, key: Any, window: Any) -> Any:
        return runtime_state(state_spec, self._runner.cells, _BEAM_FORM)

    def get_timer(self, timer_spec: Any, key: Any, window: Any, timestamp: Any, pane: Any) -> Any:
        return _Timer(timer_spec, self._runner.cells, self._runner.hold_for, _BEAM_FORM)

    def commit(self) -> None:
        return None


# -------------------------------------------------------------------------------- the runner


_UNKNOWN_PANE = beam_wv.PANE_INFO_UNKNOWN


class BeamStatefulDoFnRunner:
    """Runs a Beam stateful DoFn over one bundle (the keys of a partition, one step) with
    Beam's DoFnRunner; has the bundle methods ``stateful_partition`` calls."""

    def __init__(self, op: BeamStatefulParDoOp, emitters: dict[str | None, Emit]) -> None:
        self.label = op.label
        self.location = op.location
        assert op.codec is not None  # the translator sets it
        self.codec = op.codec
        self.holds = HoldPolicy(op.windowing)
        state_specs, timer_specs = userstate.get_dofn_specs(op.dofn)
        self.timer_specs = {spec.name: spec for spec in timer_specs}
        #: set up with the DoFn, torn down with it (Beam's harness sets one up per cell it opens)
        self.combine_fns = [spec.combine_fn for spec in state_specs if isinstance(spec, userstate.CombiningValueStateSpec)]
        #: the (key, window) being processed: its cells, and the timestamp a processing-time timer set now holds at
        self.window: Any = None
        self.cells = WindowCells()
        self.setter_micros = 0
        receivers = engine_receivers(emitters)
        try:
            self.runner = common.DoFnRunner(
                op.dofn,
                op.args,
                op.kwargs,
                [],
                op.beam_windowing,
                tagged_receivers=receivers,
                step_name=op.label,
                user_state_context=_StateContext(self),
            )
        except Exception as error:
            raise UserCodeError(self.label, self.location, error) from error

    def hold_for(self, domain: str, fire_micros: int) -> int:
        return checked_timer_hold(self.holds, self.window, domain, fire_micros, self.setter_micros)

    # -- bundle ---------------------------------------------------------------------
    def start(self) -> None:
        self.tracker = task_tracker()  # Beam's metric updates go to the task's container
        self._guard(self.runner.setup)
        for combine_fn in self.combine_fns:
            self._guard(combine_fn.setup)
        self._guard(self.runner.start)

    def finish(self) -> None:
        self._guard(self.runner.finish)

    def finalize_bundle(self) -> None:
        self._guard(self.runner.finalize)

    def teardown(self) -> None:
        for combine_fn in self.combine_fns:
            self._guard(combine_fn.teardown)
        self._guard(self.runner.teardown)

    def _guard(self, method: Callable[[], Any]) -> None:
        try:
            beam_metrics(method)
        except UserCodeError:
            raise
        except Exception as error:
            raise UserCodeError(self.label, self.location, error) from error

    def _call(self, method: Callable[..., Any], *args: Any, where: Any = None) -> None:
        previous = statesampler.get_current_tracker()
        statesampler.set_current_tracker(self.tracker)
        try:
            method(*args)
        except UserCodeError:
            raise  # from a DoFn downstream in the same stage, already named
        except Exception as error:
            raise UserCodeError(self.label, self.location, error, where) from error
        finally:
            statesampler.set_current_tracker(previous)

    # -- elements and timers ------------------------------------------------------------
    def process_key(
        self, store: KeyStore, key: bytes, elements: Iterable[WindowedValue], input_watermark: int, stats: GroupingStats
    ) -> None:
        """Process a key's new elements, once per window; those of expired windows are dropped."""
        gc_time = self.holds.gc_time
        beam_key = self.codec.key_coder.decode(key)
        assert self.codec.value_coder is not None  # a stateful ParDo's codec encodes values
        decode_value = self.codec.value_coder.decode
        create = beam_wv.create
        for wv in elements:
            value = (beam_key, decode_value(wv.value[1]))
            for window in wv.windows:
                if gc_time(window) < input_watermark:
                    stats.discard(DropReason.LATE, 1)
                    continue
                self.window, self.cells, self.setter_micros = window, store.cells_for(window), wv.timestamp_micros
                element = create(value, wv.timestamp_micros, (to_beam_window(window),), to_beam_pane(wv.pane_info))
                self._call(self.runner.process, element, where=value)

    def fire_due(self, store: KeyStore, key: bytes, input_watermark: int, now: int) -> int:
        """Fire the key's due timers one by one, earliest first, including those the
        callbacks set; how many fired."""
        fired = 0
        beam_key = None
        while (due := take_due_timer(store, input_watermark, now)) is not None:
            window, (timer_name, tag), timer = due
            if beam_key is None:
                beam_key = self.codec.key_coder.decode(key)
            self.window, self.cells, self.setter_micros = window, store.windows[window], timer.fire_micros
            spec = self.timer_specs[timer_name]
            where = f"timer {timer_name[len(userstate.TimerSpec.prefix):]!r} of key {beam_key!r}"
            fire_time = BeamTimestamp(micros=timer.fire_micros)
            self._call(
                self.runner.process_user_timer, spec, beam_key, to_beam_window(window), fire_time, _UNKNOWN_PANE, tag, where=where
            )
            fired += 1
        return fired

    def collect_garbage(self, store: KeyStore, input_watermark: int) -> None:
        expire_windows(store, self.holds, input_watermark)


# A stateful ParDo in every way (planning, keyed state, checkpoints) but for its DoFn's runner.
execution.register_kind(BeamStatefulParDoOp, like=StatefulParDoOp)
register_stateful_runner(BeamStatefulParDoOp, BeamStatefulDoFnRunner)
