"""Calling a user's DoFn: its parameters, its outputs, its lifecycle, and its errors.

``DoFnRunner`` is built once per bundle (a partition of one step) from a ``ParDoOp``. It
reads the process method's signature once, so each element costs one call plus the
parameters the DoFn asked for; outputs become ``WindowedValue``s that keep the input's
timestamp, windows and pane, unless the DoFn yields a ``WindowedValue`` (taken as it is)
or a ``TimestampedValue``, which is windowed again by the input PCollection's window fn
from its new timestamp, as in Beam's Python SDK (``TaggedOutput`` wraps either).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sparkbeam.core import _CallableDoFn
from sparkbeam.dofn import (
    BundleFinalizer,
    DoFn,
    DoFnParam,
    _ContextParam,
    is_bundle_finalizer_param,
)
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.runners.core.elements.fast_paths import (
    DirectCall,
    call_process,
    map_restamped_into,
    pass_on_all_but,
)
from sparkbeam.runners.core.elements.window_assignment import (
    cached_assignment,
    fixed_window_parts,
    restamp_assigner,
)
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import ParDoOp, SideInputSlot
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import GlobalWindow, GlobalWindows, TimestampedValue, WindowFn

__all__ = ["DirectCall", "DoFnRunner", "ElementRunner", "SideInputs", "side_window_for"]

Emit = Callable[[WindowedValue], None]
_MIN_MICROS = MIN_TIMESTAMP.micros
_MAX_MICROS = MAX_TIMESTAMP.micros


class ElementRunner(Protocol):
    """Runs one ParDo over a bundle (built by its kind's ``execution.pardo_joiner``): the fused body calls
    ``start``, then ``process`` per element, ``finish``, and ``teardown`` in any case;
    ``finalize_bundle`` once the bundle's output has been handed on."""

    def start(self) -> None: ...

    def process(self, wv: WindowedValue) -> None: ...

    def finish(self) -> None: ...

    def teardown(self) -> None: ...

    def finalize_bundle(self) -> None: ...


class SideInputs:
    """Side-input contents by PCollection id, as lists of WindowedValue, viewed per window."""

    def __init__(self, contents: dict[int, list[WindowedValue]]) -> None:
        self.contents = contents
        self._by_window: dict[int, dict[Any, list]] = {}
        for pcoll, values in contents.items():
            by_window: dict[Any, list] = {}
            for wv in values:
                for window in wv.windows:
                    by_window.setdefault(window, []).append(wv.value)
            self._by_window[pcoll] = by_window
        #: per slot (by identity: two slots of one PCollection may view it differently, as
        #: ``AsDict(p)`` beside ``AsList(p)``), its views by side window and by main window, so
        #: an element's main window is mapped onto the side input's once per bundle, not per element
        self._views: dict[int, tuple[SideInputSlot, dict[Any, Any], dict[Any, Any]]] = {}

    def elements(self, pcoll: int) -> list[WindowedValue]:
        """Every element of a side input, in all its windows."""
        return self.contents.get(pcoll, [])

    def values_by_window(self, pcoll: int) -> dict[Any, list]:
        """A side input's values by window (the engine's), each window's in the elements'
        order: a view reads its window's values without a pass over the others'."""
        return self._by_window.get(pcoll, {})

    def view(self, slot: SideInputSlot, main_window: Any) -> Any:
        """What ``slot`` reads in ``main_window``: its view of the side window that window maps to."""
        cached = self._views.get(id(slot))
        if cached is None:  # the entry keeps the slot, so its id cannot be reused meanwhile
            cached = self._views[id(slot)] = (slot, {}, {})
        _, by_main, by_side = cached
        if main_window in by_main:
            return by_main[main_window]
        side_window = side_window_for(slot.windowfn, main_window)
        if side_window not in by_side:
            values = self._by_window.get(slot.pcoll, {}).get(side_window, [])
            by_side[side_window] = slot.view.view(values)
        view = by_main[main_window] = by_side[side_window]
        return view


def side_window_for(windowfn: WindowFn, main_window: Any) -> Any:
    """The side input's window that a main-input window reads (Beam's default mapping)."""
    if isinstance(windowfn, GlobalWindows):
        return GlobalWindow()
    if windowfn.is_merging():
        # A session only exists once merged, so no main window can name one (Beam refuses too).
        msg = f"a side input windowed by {windowfn!r} is not supported: merging windows (Sessions) cannot be side inputs"
        raise ValueError(msg)
    windows = list(windowfn.assign(WindowFn.AssignContext(main_window.max_timestamp(), window=main_window)))
    if not windows:
        msg = f"a side input windowed by {windowfn!r} assigns no window to the end of main-input window {main_window!r}"
        raise ValueError(msg)
    # As Beam: the last window assigned to the main window's end, which for sliding windows
    # is the earliest-starting one that contains it.
    return windows[-1]


def _first_parameter(fn: Callable) -> str | None:
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    return parameters[0].name if parameters else None


def _param_names(fn: Callable) -> dict[str, Any]:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {
        p.name: p.default for p in parameters if isinstance(p.default, DoFnParam) or is_bundle_finalizer_param(p.default)
    }


class DoFnRunner:
    """Runs one ParDo's DoFn over a bundle, pushing outputs to ``emitters`` by tag."""

    #: Beam's output handler repeats a ``WindowedValue`` output's windows once per window of
    #: an input in several windows (as it does a re-stamped output's): a front end that
    #: follows it says so. sparkbeam's own SDK takes such an output as it is.
    repeat_windowed_output_windows = False

    def __init__(
        self, op: ParDoOp, emitters: dict[str | None, Emit], side_inputs: SideInputs | None, direct_call: DirectCall | None = None
    ) -> None:
        """``direct_call``: how a front end's function is called on the fast paths (see
        ``DirectCall``); None: the DoFn's own function as it is."""
        self.op = op
        self.label = op.label
        self.location = op.location
        self.emitters = emitters
        self.main_emit = emitters.get(None) or _discard
        self.side_inputs = side_inputs
        dofn = op.dofn
        if isinstance(dofn, _CallableDoFn):
            self.fn = dofn.fn
            self.shape = dofn.shape
        else:
            self.fn = dofn.process
            self.shape = "DoFn"
        params = _param_names(self.fn)
        # Parameters whose value is the same for the whole bundle: context managers the
        # runner enters (DoFn.SetupContextParam, BundleContextParam) and the finalizer.
        self.contexts = {name: p for name, p in params.items() if isinstance(p, _ContextParam)}
        self.finalizer: BundleFinalizer | None = None
        if any(is_bundle_finalizer_param(p) for p in params.values()):
            self.finalizer = BundleFinalizer()
        self.params = {name: p for name, p in params.items() if name not in self.contexts and not is_bundle_finalizer_param(p)}
        # ``def process(self, element=DoFn.ElementParam, ...)``: the element is passed first,
        # positionally, so that parameter must not be passed again by name.
        first = _first_parameter(self.fn)
        if first is not None and self.params.get(first) == DoFn.ElementParam:
            del self.params[first]
        self.bundle_values: dict[str, Any] = {
            name: self.finalizer for name, p in params.items() if is_bundle_finalizer_param(p)
        }
        self.open_contexts: dict[str, list[Any]] = {"setup": [], "bundle": []}
        self.explode_windows = DoFn.WindowParam in params.values() or bool(op.side_inputs)
        self.has_slots = bool(op.side_inputs)
        self.dofn = dofn
        # Built at the first TimestampedValue output: other DoFns never pay for it.
        self._assign_restamped: Callable[[Any, int], tuple] | None = None
        self._cached_restamp = cached_assignment(op.input_windowfn)
        #: (assignment, send) of the WindowInto that alone reads the main output, when the
        #: re-stamped outputs go straight to it (``window_restamped_into``)
        self._into: tuple[Callable[[int], tuple], Emit] | None = None
        #: the same for every output, when the fast paths window the main output at once
        #: (``output_function``)
        self._window_into: tuple[Callable[[int], tuple], Emit] | None = None
        #: Whether each element is one call with the element alone: no parameters to fill,
        #: no side inputs, no windows to explode, nothing of the bundle's. Most Maps are.
        self.plain = not self.params and not self.contexts and self.finalizer is None and not self.explode_windows
        #: how the fast paths call a front end's function itself; None: ``self.fn`` as it is
        self.direct_call = direct_call
        #: the metrics step a fast path names itself around each element (``process_in_step``);
        #: None: its caller names it
        self.own_step: str | None = None
        #: what builds the fast path ``process`` is, when it is one (``process_in_step``)
        self._fast_path: Callable[[], Callable[[WindowedValue], None]] | None = None
        #: one element through the DoFn (``ElementRunner.process``)
        self.process: Callable[[WindowedValue], None] = self._plain_process() if self.plain else self._process_general
        #: ``process`` of a value's element in the global window at the minimum timestamp
        #: with an unknown pane, given the value alone (``FusedBody.receive_global_values``),
        #: where that is cheaper than building the element; else None
        self.process_global_value: Callable[[Any], None] | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._enter_contexts("setup")
        self._guard(self.dofn.setup)
        self._enter_contexts("bundle")
        self._guard(self.dofn.start_bundle)

    def _enter_contexts(self, scope: str) -> None:
        for name, param in self.contexts.items():
            if param.scope == scope:
                manager, value = self._guard(param.create_and_enter)
                self.open_contexts[scope].append(manager)
                self.bundle_values[name] = value

    def _exit_contexts(self, scope: str) -> None:
        managers, self.open_contexts[scope] = self.open_contexts[scope], []
        for manager in reversed(managers):
            self._guard(functools.partial(manager.__exit__, None, None, None))

    def finalize_bundle(self) -> None:
        """Run the callbacks registered with DoFn.BundleFinalizerParam (the bundle's output
        has been handed on)."""
        if self.finalizer is not None:
            self.finalizer.finalize_bundle()

    def finish(self) -> None:
        results = self._guard(self.dofn.finish_bundle)
        if results is not None:
            for item in self._guard_iter(results, None):
                if isinstance(item, TaggedOutput):
                    tag, item = item.tag, item.value
                else:
                    tag = None
                if not isinstance(item, WindowedValue):
                    msg = (
                        f"'{self.label}' (applied at {self.location}): finish_bundle must output "
                        f"WindowedValue (it has no current element to take a window from), got {item!r}"
                    )
                    raise TypeError(msg)
                self._emitter(tag)(item)
        self._exit_contexts("bundle")

    def teardown(self) -> None:
        try:
            self._exit_contexts("bundle")  # still open if the bundle failed
            self._guard(self.dofn.teardown)
        finally:
            self._exit_contexts("setup")

    # -- elements --------------------------------------------------------------------
    def _process_general(self, wv: WindowedValue) -> None:
        if self.explode_windows and len(wv.windows) != 1:
            for window in wv.windows:
                self._process_one(WindowedValue(wv.value, wv.timestamp_micros, (window,), wv.pane_info))
        else:
            self._process_one(wv)

    def _plain_process(self) -> Callable[[WindowedValue], None]:
        """``process`` for a plain DoFn (``self.plain``): the same steps as ``_process_one``
        with what is fixed for the bundle looked up once, since this runs per element. A
        Map, FlatMap or Filter with no keyword arguments calls its function (the front
        end's own, ``direct_call``) and reads its outputs in one frame (``_call_process``); so
        does a DoFn's ``process`` (its lifecycle methods are called around the bundle alike)."""
        fn, shape, label, location = self.fn, self.shape, self.label, self.location
        args, kwargs = self.op.args, self.op.kwargs
        output, emit = self._output, self.main_emit
        unpack = shape == "MapTuple" or shape == "FlatMapTuple"
        guard_iter = self._guard_iter
        # A DoFn whose process is all it runs per element is called as a FlatMap of it.
        if not kwargs and shape in ("Map", "FlatMap", "Filter", "DoFn", "MapTuple", "FlatMapTuple"):
            routed = getattr(type(self.dofn), "_engine_routes_only", None) if shape == "DoFn" and self.direct_call is None else None
            if routed:  # the engine's own router: only the routed types reach its process
                self._fast_path = functools.partial(pass_on_all_but, self, tuple(routed))
            else:
                self._fast_path = functools.partial(call_process, self)
            return self._fast_path()

        def process(wv: WindowedValue) -> None:
            value = wv[0]
            try:
                result = fn(*value, *args, **kwargs) if unpack else fn(value, *args, **kwargs)
            except UserCodeError:
                raise
            except Exception as error:
                raise UserCodeError(label, location, error, value) from error
            if shape == "Map" or shape == "MapTuple":
                output(result, wv)
            elif shape == "Filter":
                if result:
                    emit(wv)
            elif result is not None:
                for item in guard_iter(result, value):
                    output(item, wv)

        return process

    def _process_one(self, wv: WindowedValue) -> None:
        args, kwargs = self._arguments(wv)
        value = wv.value
        shape = self.shape
        try:
            if shape == "MapTuple" or shape == "FlatMapTuple":
                result = self.fn(*value, *args, **kwargs)
            else:
                result = self.fn(value, *args, **kwargs)
        except UserCodeError:
            raise
        except Exception as error:
            raise UserCodeError(self.label, self.location, error, value) from error
        if shape == "Map" or shape == "MapTuple":
            self._output(result, wv)
        elif shape == "Filter":
            if result:
                self.main_emit(wv)
        elif result is not None:
            for item in self._guard_iter(result, value):
                self._output(item, wv)

    def _arguments(self, wv: WindowedValue) -> tuple[tuple, dict]:
        op = self.op
        args, kwargs = op.args, op.kwargs
        if self.has_slots:
            window = wv.windows[0]
            try:
                args = tuple(self.side_inputs.view(a, window) if isinstance(a, SideInputSlot) else a for a in args)  # type: ignore[union-attr]
                kwargs = {k: self.side_inputs.view(v, window) if isinstance(v, SideInputSlot) else v for k, v in kwargs.items()}  # type: ignore[union-attr]
            except ValueError as error:
                raise UserCodeError(self.label, self.location, error, wv.value) from error
        if self.bundle_values:
            kwargs = {**kwargs, **self.bundle_values}
        if self.params:
            kwargs = dict(kwargs)
            # Compared by value: a pickled function carries copies of the DoFn.*Param markers.
            for name, param in self.params.items():
                if param == DoFn.TimestampParam:
                    kwargs[name] = Timestamp.from_micros(wv.timestamp_micros)
                elif param == DoFn.WindowParam:
                    kwargs[name] = wv.windows[0]
                elif param == DoFn.PaneInfoParam:
                    kwargs[name] = wv.pane_info
                elif param == DoFn.ElementParam:
                    kwargs[name] = wv.value
                elif param == DoFn.WindowedValueParam:
                    kwargs[name] = wv
        return args, kwargs

    def _output(self, item: Any, wv: WindowedValue) -> None:
        kind = type(item)
        if kind is TaggedOutput:
            emit = self._emitter(item.tag)
            item = item.value
            kind = type(item)
        else:
            emit = self.main_emit
        if kind is TimestampedValue:
            self._emit_restamped(item.value, item.timestamp_micros, wv, emit)
        elif kind is WindowedValue:
            if self.repeat_windowed_output_windows and len(wv[2]) != 1:
                item = new_windowed_value((item[0], item[1], tuple(item[2]) * len(wv[2]), item[3]))
            emit(item)
        elif item is wv[0]:
            emit(wv)  # the input's own value: its timestamp, windows and pane too, no copy
        else:
            emit(new_windowed_value((item, wv[1], wv[2], wv[3])))

    def _emit_restamped(self, value: Any, micros: int, wv: WindowedValue, emit: Emit) -> None:
        """An output re-stamped at ``micros`` (a ``TimestampedValue``'s parts) handed to
        ``emit``: windowed again (``_restamped``), or by the WindowInto that alone reads the
        main output (``_restamped_into``)."""
        if self._into is not None and emit is self.main_emit:
            self._restamped_into(value, micros, wv)
        else:
            emit(self._restamped(value, micros, wv))

    def window_restamped_into(
        self, assign: Callable[[int], tuple], send: Emit, send_stamped: Callable[[Any, int, tuple], None] | None = None
    ) -> None:
        """Window the main output's re-stamped elements (``TimestampedValue``) at once by
        the WindowInto that alone reads it, whose built-in window fn's windows are
        ``assign(micros)`` and whose output ``send`` takes. The element the WindowInto would
        have received, windowed by the input's window fn, is never built. Only where that
        window fn is built in too: a user's may fail or read the value. ``send_stamped``:
        what reads the WindowInto's output takes an element's parts (``FusedBody.
        stamped_sender``), so a plain Map's outputs into fixed windows are not built either.
        The fast paths' other outputs are windowed at once too (``output_function``)."""
        # The outputs that keep their input's timestamp are windowed at once too (``_output_windowed``),
        # by the fast paths, which look their output function up when they are built: built again here.
        self._window_into = (assign, send)
        if self._cached_restamp is not None:
            self._into = (assign, send)
            if self.plain and self.shape == "Map" and not self.op.kwargs:
                self._fast_path = functools.partial(map_restamped_into, self, assign, send, send_stamped)
                self.process = self._fast_path()
                return
        if self._fast_path is not None and self.plain:
            self.process = self._fast_path()

    def output_function(self) -> Callable[[Any, WindowedValue], None]:
        """What the fast paths hand each output to, with its input element: ``_output``, or,
        when a WindowInto of a built-in window fn alone reads the main output
        (``window_restamped_into``), ``_output`` and that WindowInto in one call for an output
        that keeps its input's timestamp: the windows of that timestamp once per input window
        (such a window fn reads the timestamp alone) with an unknown pane, the element in
        between never built. A tagged, re-stamped or windowed output goes through ``_output``."""
        output = self._output
        if self._window_into is None:
            return output
        assign, send = self._window_into
        fixed = fixed_window_parts(assign)
        size, offset, cached_windows = fixed if fixed is not None else (0, 0, None)
        unknown, new = PANE_INFO_UNKNOWN, new_windowed_value
        by_type = frozenset((TaggedOutput, TimestampedValue, WindowedValue))

        def output_windowed(item: Any, wv: WindowedValue) -> None:
            if type(item) in by_type:
                output(item, wv)
                return
            before = wv[2]
            if not before:
                return  # in no window: the WindowInto has nothing to assign
            micros = wv[1]
            windows = cached_windows(micros - (micros - offset) % size) if cached_windows is not None else None
            if windows is None:
                windows = assign(micros)
            if item is wv[0] and windows is before and wv[3] is unknown:
                copy = wv  # what the WindowInto would have sent on as it is
            else:
                copy = new((item, micros, windows, unknown))
            send(copy)
            if len(before) > 1:  # rare: no loop built per element
                for _ in range(len(before) - 1):
                    send(copy)

        return output_windowed

    def process_in_step(self, step: str) -> Callable[[WindowedValue], None] | None:
        """``process`` naming the metrics ``step`` itself around each element, the caller's
        step put back after (``in_step_1``'s work with no call around it: one Python call
        less per ParDo and element), when ``process`` is a fast path (``fast_paths``);
        else None, and the caller names the step. Called as the ParDo joins its body, after
        ``window_restamped_into``."""
        fast_path = self._fast_path
        if fast_path is None or not self.plain:  # not a fast path, or replaced by a front end's
            return None
        self.own_step = step
        self.process = fast_path()
        return self.process

    def _restamped_into(self, value: Any, micros: int, wv: WindowedValue) -> None:
        """``_restamped`` then the WindowInto (``window_restamped_into``): the WindowInto's
        output once per window the re-stamped element would have been in."""
        if not _MIN_MICROS <= micros < _MAX_MICROS:
            self._restamped(value, micros, wv)  # raises, naming the transform and the timestamp
        into, cached = self._into, self._cached_restamp
        if into is None or cached is None:  # not set up (window_restamped_into): the plain way
            self.main_emit(self._restamped(value, micros, wv))
            return
        assign, send = into
        count = len(cached(micros)) * len(wv[2])
        if count:
            out = new_windowed_value((value, micros, assign(micros), PANE_INFO_UNKNOWN))
            for _ in range(count):
                send(out)

    def _restamped(self, value: Any, micros: int, wv: WindowedValue) -> WindowedValue:
        """Beam's Python SDK: an output with a new timestamp (``value`` re-stamped at
        ``micros``) is windowed again by the input PCollection's window fn (once per input
        window), and its pane is unknown."""
        if not _MIN_MICROS <= micros < _MAX_MICROS:
            msg = (
                f"'{self.label}' (applied at {self.location}) output {value!r} with timestamp "
                f"{Timestamp.from_micros(micros)!r}, outside [MIN_TIMESTAMP, MAX_TIMESTAMP)"
            )
            raise UserCodeError(self.label, self.location, ValueError(msg), wv.value)
        cached = self._cached_restamp
        if cached is not None:  # a built-in window fn: windows from the timestamp alone
            windows = cached(micros)
        else:
            if self._assign_restamped is None:
                self._assign_restamped = restamp_assigner(self.op.input_windowfn)
            try:
                windows = self._assign_restamped(value, micros)
            except Exception as error:  # the user's WindowFn
                raise UserCodeError(self.label, self.location, error, wv.value) from error
        if len(wv[2]) != 1:
            windows = windows * len(wv[2])
        return new_windowed_value((value, micros, windows, PANE_INFO_UNKNOWN))

    def _emitter(self, tag: str | None) -> Emit:
        emit = self.emitters.get(tag)
        if emit is None:
            declared = [t for t in self.emitters if t is not None]
            msg = (
                f"'{self.label}' (applied at {self.location}) output to tag {tag!r}, which was not "
                f"declared; declare it with .with_outputs({tag!r}) (declared: {declared})"
            )
            raise UserCodeError(self.label, self.location, ValueError(msg))
        return emit

    def _guard(self, method: Callable[[], Any]) -> Any:
        try:
            return method()
        except UserCodeError:
            raise
        except Exception as error:
            raise UserCodeError(self.label, self.location, error) from error

    def _not_iterable(self, results: Any, element: Any) -> UserCodeError:
        msg = (
            f"'{self.label}' (applied at {self.location}) returned {results!r}, which is not iterable; "
            "a DoFn's process (and a FlatMap's function) must return or yield an iterable"
        )
        return UserCodeError(self.label, self.location, TypeError(msg), element)

    def _guard_iter(self, results: Iterable[Any], element: Any) -> Iterable[Any]:
        try:
            iterator = iter(results)
        except TypeError:
            raise self._not_iterable(results, element) from None
        while True:
            try:
                item = next(iterator)
            except StopIteration:
                return
            except UserCodeError:
                raise
            except Exception as error:
                raise UserCodeError(self.label, self.location, error, element) from error
            yield item


def _discard(wv: WindowedValue) -> None:
    return None
