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

Timers: ``set(t)`` keeps one pending timer per (timer, dynamic tag), replacing an earlier
setting; an event-time timer holds the output watermark at ``t``, a processing-time timer at
the timestamp of the element (or timer) that set it, as Beam's SDK harness sets the holds.
A callback's outputs are stamped with the timer's firing time, in its window.
"""

from __future__ import annotations

import bisect
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
from sparkbeam.runners.core.state.user_state import KeyStore, PendingTimer, WindowCells
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
        if not any(isinstance(spec, spec_type) for spec_type, _ in _CELLS):
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


class _Cell:
    """A state cell of the current (key, window): stored in its ``WindowCells`` under the
    spec's name, encoded with the spec's coder."""

    def __init__(self, spec: Any, cells: WindowCells) -> None:
        self._cells = cells.cells
        self._name = spec.name
        self._coder = spec.coder

    def clear(self) -> None:
        self._cells.pop(self._name, None)

    def commit(self) -> None:
        return None  # writes go to the store as they happen


class _Bag(_Cell, userstate.BagRuntimeState):
    def read(self) -> Iterable[Any]:
        decode = self._coder.decode
        return [decode(encoded) for encoded in self._cells.get(self._name, ())]

    def add(self, value: Any) -> None:
        self._cells.setdefault(self._name, []).append(self._coder.encode(value))


class _Set(_Cell, userstate.SetRuntimeState):
    def read(self) -> set:
        decode = self._coder.decode
        return {decode(encoded) for encoded in self._cells.get(self._name, ())}

    def add(self, value: Any) -> None:
        self._cells.setdefault(self._name, set()).add(self._coder.encode(value))


class _Value(_Cell, userstate.ReadModifyWriteRuntimeState):
    def read(self) -> Any:
        encoded = self._cells.get(self._name)
        return None if encoded is None else self._coder.decode(encoded)

    def write(self, value: Any) -> None:
        self._cells[self._name] = self._coder.encode(value)


class _Combining(_Cell, userstate.CombiningValueRuntimeState):
    def __init__(self, spec: Any, cells: WindowCells) -> None:
        super().__init__(spec, cells)
        self._combine_fn = spec.combine_fn

    def _accumulator(self) -> Any:
        encoded = self._cells.get(self._name)
        return self._combine_fn.create_accumulator() if encoded is None else self._coder.decode(encoded)

    def read(self) -> Any:
        return self._combine_fn.extract_output(self._accumulator())

    def add(self, value: Any) -> None:
        self._cells[self._name] = self._coder.encode(self._combine_fn.add_input(self._accumulator(), value))


def _entry_time(entry: tuple[int, bytes]) -> int:
    return entry[0]


class _OrderedList(_Cell, userstate.OrderedListRuntimeState):
    """(timestamp micros, encoded value) entries sorted by time, equal times in insertion order."""

    def _entries(self) -> list[tuple[int, bytes]]:
        return self._cells.get(self._name, [])

    def _decoded(self, entries: list[tuple[int, bytes]]) -> list[tuple[Any, Any]]:
        decode = self._coder.decode
        return [(BeamTimestamp(micros=micros), decode(encoded)) for micros, encoded in entries]

    def read(self) -> Iterable[tuple[Any, Any]]:
        return self._decoded(self._entries())

    def add(self, value: tuple[Any, Any]) -> None:
        try:
            timestamp, item = value
        except (TypeError, ValueError):
            msg = f"OrderedListState {self._name!r}: add takes a (timestamp, value) pair, not {value!r}"
            raise TypeError(msg) from None
        micros = BeamTimestamp.of(timestamp).micros
        entries = self._cells.setdefault(self._name, [])
        entries.insert(bisect.bisect_right(entries, micros, key=_entry_time), (micros, self._coder.encode(item)))

    def _bounds(self, min_timestamp: Any, limit_timestamp: Any) -> tuple[int, int]:
        """Indices of the entries in [min, limit)."""
        entries = self._entries()
        low = BeamTimestamp.of(min_timestamp).micros
        high = BeamTimestamp.of(limit_timestamp).micros
        return bisect.bisect_left(entries, low, key=_entry_time), bisect.bisect_left(entries, high, key=_entry_time)

    def read_range(self, min_time_stamp: Any, limit_time_stamp: Any) -> Iterable[tuple[Any, Any]]:
        low, high = self._bounds(min_time_stamp, limit_time_stamp)
        return self._decoded(self._entries()[low:high])

    def clear_range(self, min_time_stamp: Any, limit_time_stamp: Any) -> None:
        low, high = self._bounds(min_time_stamp, limit_time_stamp)
        entries = self._entries()
        del entries[low:high]
        if not entries:
            self.clear()


# Most specific first: Beam's spec classes do not subclass one another, but users' may.
_CELLS: tuple[tuple[type, type], ...] = (
    (userstate.BagStateSpec, _Bag),
    (userstate.SetStateSpec, _Set),
    (userstate.ReadModifyWriteStateSpec, _Value),
    (userstate.CombiningValueStateSpec, _Combining),
    (userstate.OrderedListStateSpec, _OrderedList),
)


def _cell(spec: Any, cells: WindowCells) -> Any:
    for spec_type, cell_type in _CELLS:
        if isinstance(spec, spec_type):
            return cell_type(spec, cells)
    msg = f"{spec!r}: {type(spec).__name__} is not supported by sparkbeam's Beam runner"
    raise NotImplementedError(msg)


class _Timer(userstate.BaseTimer):
    """One timer of the current (key, window): ``set`` replaces the pending setting of the
    same dynamic tag, ``clear`` removes it."""

    def __init__(self, spec: Any, cells: WindowCells, hold_for: Callable[[str, int], int]) -> None:
        self._spec = spec
        self._timers = cells.timers
        self._hold_for = hold_for

    def set(self, timestamp: Any, dynamic_timer_tag: str = "") -> None:
        micros = BeamTimestamp.of(timestamp).micros
        domain = self._spec.time_domain
        self._timers[(self._spec.name, dynamic_timer_tag)] = PendingTimer(domain, micros, self._hold_for(domain, micros))

    def clear(self, dynamic_timer_tag: str = "") -> None:
        self._timers.pop((self._spec.name, dynamic_timer_tag), None)


class _StateContext(userstate.UserStateContext):
    """What Beam's DoFnInvoker asks for state and timers: those of the (key, window) the
    runner is processing (the invoker's key and window are that key and window)."""

    def __init__(self, runner: BeamStatefulDoFnRunner) -> None:
        self._runner = runner

    def get_state(self, state_spec: Any, key: Any, window: Any) -> Any:
        return _cell(state_spec, self._runner.cells)

    def get_timer(self, timer_spec: Any, key: Any, window: Any, timestamp: Any, pane: Any) -> Any:
        return _Timer(timer_spec, self._runner.cells, self._runner.hold_for)

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
