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

import attrs

from sparkbeam.core import _CallableDoFn
from sparkbeam.dofn import (
    BundleFinalizer,
    DoFn,
    DoFnParam,
    _ContextParam,
    is_bundle_finalizer_param,
)
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.runners.core.elements.window_assignment import (
    GLOBAL_WINDOWS,
    cached_assignment,
    fixed_window_parts,
    restamp_assigner,
)
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import ParDoOp, SideInputSlot
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import FixedWindows, GlobalWindow, GlobalWindows, TimestampedValue, WindowFn

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
        self._views: dict[tuple[int, Any], Any] = {}

    def elements(self, pcoll: int) -> list[WindowedValue]:
        """Every element of a side input, in all its windows."""
        return self.contents.get(pcoll, [])

    def view(self, slot: SideInputSlot, main_window: Any) -> Any:
        side_window = side_window_for(slot.windowfn, main_window)
        key = (slot.pcoll, side_window)
        if key not in self._views:
            values = self._by_window.get(slot.pcoll, {}).get(side_window, [])
            self._views[key] = slot.view.view(values)
        return self._views[key]


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


class _NoOutput:
    """A type no output is of."""


@attrs.frozen
class DirectCall:
    """How the fused re-stamping Map (``DoFnRunner._map_restamped_into``) calls a front
    end's function with no wrapper call of the front end's around each call: ``fn`` is
    called as the Map's function (the element's value, then the Map's arguments);
    ``failure(error)`` is what its exception becomes before the engine names the
    transform; an output of ``stamped_type`` (the front end's re-stamped value) is read by
    ``stamped_parts(output) -> (value, timestamp_micros)``; any other output becomes the
    engine's through ``as_engine`` (a value stays as it is)."""

    fn: Callable[..., Any]
    failure: Callable[[Exception], BaseException]
    stamped_type: type
    stamped_parts: Callable[[Any], tuple[Any, int]]
    as_engine: Callable[[Any], Any]


class DoFnRunner:
    """Runs one ParDo's DoFn over a bundle, pushing outputs to ``emitters`` by tag."""

    def __init__(self, op: ParDoOp, emitters: dict[str | None, Emit], side_inputs: SideInputs | None) -> None:
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
        #: Whether each element is one call with the element alone: no parameters to fill,
        #: no side inputs, no windows to explode, nothing of the bundle's. Most Maps are.
        self.plain = not self.params and not self.contexts and self.finalizer is None and not self.explode_windows
        #: one element through the DoFn (``ElementRunner.process``)
        self.process: Callable[[WindowedValue], None] = self._plain_process() if self.plain else self._process_general
        #: ``process`` of a value's element in the global window at the minimum timestamp
        #: with an unknown pane, given the value alone (``FusedBody.receive_global_values``),
        #: where that is cheaper than building the element; else None
        self.process_global_value: Callable[[Any], None] | None = None
        #: how the fused re-stamping Map calls a front end's function itself (set by the
        #: front end's runner before the body joins); None: ``self.fn`` as it is
        self.direct_call: DirectCall | None = None

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
        with what is fixed for the bundle looked up once, since this runs per element."""
        fn, shape, label, location = self.fn, self.shape, self.label, self.location
        args, kwargs = self.op.args, self.op.kwargs
        output, emit = self._output, self.main_emit
        unpack = shape == "MapTuple" or shape == "FlatMapTuple"
        guard_iter = self._guard_iter
        if shape == "Map" and not kwargs:
            one_arg, arg = _one_extra_arg(args)

            def process_map(wv: WindowedValue) -> None:
                value = wv[0]
                try:
                    result = fn(value, arg) if one_arg else fn(value, *args)
                except UserCodeError:
                    raise
                except Exception as error:
                    raise UserCodeError(label, location, error, value) from error
                output(result, wv)

            return process_map

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
            if self._into is not None and emit is self.main_emit:
                self._restamped_into(item, wv)
            else:
                emit(self._restamped(item, wv))
        elif kind is WindowedValue:
            emit(item)
        elif item is wv[0]:
            emit(wv)  # the input's own value: its timestamp, windows and pane too, no copy
        else:
            emit(new_windowed_value((item, wv[1], wv[2], wv[3])))

    def window_restamped_into(
        self, assign: Callable[[int], tuple], send: Emit, send_stamped: Callable[[Any, int, tuple], None] | None = None
    ) -> None:
        """Window the main output's re-stamped elements (``TimestampedValue``) at once by
        the WindowInto that alone reads it, whose built-in window fn's windows are
        ``assign(micros)`` and whose output ``send`` takes. The element the WindowInto would
        have received, windowed by the input's window fn, is never built. Only where that
        window fn is built in too: a user's may fail or read the value. ``send_stamped``:
        what reads the WindowInto's output takes an element's parts (``FusedBody.
        stamped_sender``), so a plain Map's outputs into fixed windows are not built either."""
        if self._cached_restamp is not None:
            self._into = (assign, send)
            if self.plain and self.shape == "Map" and not self.op.kwargs:
                self.process = self._map_restamped_into(assign, send, send_stamped)

    def _map_restamped_into(
        self, assign: Callable[[int], tuple], send: Emit, send_stamped: Callable[[Any, int, tuple], None] | None
    ) -> Callable[[WindowedValue], None]:
        """``process`` for a plain Map whose re-stamped outputs go straight to the WindowInto
        (``window_restamped_into``): ``_plain_process``, ``_output`` and ``_restamped_into``
        in one call per element, which is what the idiom ``Map(... TimestampedValue ...) |
        WindowInto(...)`` costs. Any other output takes ``_output``. A front end's function
        is called as ``direct_call`` says, with no wrapper call around it."""
        label, location, args = self.label, self.location, self.op.args
        direct = self.direct_call
        fn = self.fn if direct is None else direct.fn
        # The front end's re-stamped type and the rest of its hooks (a type no output is of,
        # for the engine's own function: its outputs are the engine's already).
        foreign, foreign_parts = (_NoOutput, None) if direct is None else (direct.stamped_type, direct.stamped_parts)
        failure = None if direct is None else direct.failure
        as_engine = None if direct is None else direct.as_engine
        one_arg, arg = _one_extra_arg(args)
        output = self._output
        restamped_into = self._restamped_into
        stamped, unknown, new = TimestampedValue, PANE_INFO_UNKNOWN, new_windowed_value
        low, high = _MIN_MICROS, _MAX_MICROS
        # The input's window fn windows a re-stamped output once per input window; global
        # and fixed windows give one window whatever the timestamp, so one copy per input window.
        one_window = type(self.op.input_windowfn) in (GlobalWindows, FixedWindows)
        # Into fixed windows: the cached windows looked up here, with no call per element.
        fixed = fixed_window_parts(assign)
        size, offset, cached_windows = fixed if fixed is not None else (0, 0, None)

        def process_map_restamped_into(wv: WindowedValue) -> None:
            value = wv[0]
            try:
                result = fn(value, arg) if one_arg else fn(value, *args)
            except UserCodeError:
                raise
            except Exception as error:
                raise UserCodeError(label, location, error if failure is None else failure(error), value) from error
            kind = type(result)
            if kind is stamped:
                out, micros = result.value, result.timestamp_micros
            elif kind is foreign:
                try:
                    out, micros = foreign_parts(result)  # type: ignore[misc]
                except Exception as error:
                    raise UserCodeError(label, location, error, value) from error
            else:
                output(result if as_engine is None else as_engine(result), wv)
                return
            if one_window and low <= micros < high:
                windows = cached_windows(micros - (micros - offset) % size) if cached_windows is not None else None
                if windows is None:
                    windows = assign(micros)
                copies = len(wv[2])
                if send_stamped is not None:
                    if copies == 1:
                        send_stamped(out, micros, windows)
                    else:
                        for _ in range(copies):
                            send_stamped(out, micros, windows)
                    return
                element = new((out, micros, windows, unknown))
                if copies == 1:
                    send(element)
                else:
                    for _ in range(copies):
                        send(element)
            else:
                restamped_into(result if kind is stamped else as_engine(result), wv)  # type: ignore[misc]

        global_windows = GLOBAL_WINDOWS

        def process_global_value(value: Any) -> None:
            # process_map_restamped_into of the value's element in the global window at the
            # minimum timestamp (one input window), built only where an output needs it.
            try:
                result = fn(value, arg) if one_arg else fn(value, *args)
            except UserCodeError:
                raise
            except Exception as error:
                raise UserCodeError(label, location, error if failure is None else failure(error), value) from error
            kind = type(result)
            if kind is stamped:
                out, micros = result.value, result.timestamp_micros
            elif kind is foreign:
                try:
                    out, micros = foreign_parts(result)  # type: ignore[misc]
                except Exception as error:
                    raise UserCodeError(label, location, error, value) from error
            else:
                output(result if as_engine is None else as_engine(result), new((value, low, global_windows, unknown)))
                return
            if one_window and low <= micros < high:
                windows = cached_windows(micros - (micros - offset) % size) if cached_windows is not None else None
                if windows is None:
                    windows = assign(micros)
                if send_stamped is not None:
                    send_stamped(out, micros, windows)
                else:
                    send(new((out, micros, windows, unknown)))
                return
            engine_stamped = result if kind is stamped else as_engine(result)  # type: ignore[misc]
            restamped_into(engine_stamped, new((value, low, global_windows, unknown)))

        self.process_global_value = process_global_value
        return process_map_restamped_into

    def _restamped_into(self, item: TimestampedValue, wv: WindowedValue) -> None:
        """``_restamped`` then the WindowInto (``window_restamped_into``): the WindowInto's
        output once per window the re-stamped element would have been in."""
        micros = item.timestamp_micros
        if not _MIN_MICROS <= micros < _MAX_MICROS:
            self._restamped(item, wv)  # raises, naming the transform and the timestamp
        into, cached = self._into, self._cached_restamp
        if into is None or cached is None:  # not set up (window_restamped_into): the plain way
            self.main_emit(self._restamped(item, wv))
            return
        assign, send = into
        count = len(cached(micros)) * len(wv[2])
        if count:
            out = new_windowed_value((item.value, micros, assign(micros), PANE_INFO_UNKNOWN))
            for _ in range(count):
                send(out)

    def _restamped(self, item: TimestampedValue, wv: WindowedValue) -> WindowedValue:
        """Beam's Python SDK: an output with a new timestamp is windowed again by the input
        PCollection's window fn (once per input window), and its pane is unknown."""
        micros = item.timestamp_micros
        if not _MIN_MICROS <= micros < _MAX_MICROS:
            msg = (
                f"'{self.label}' (applied at {self.location}) output {item.value!r} with timestamp "
                f"{item.timestamp!r}, outside [MIN_TIMESTAMP, MAX_TIMESTAMP)"
            )
            raise UserCodeError(self.label, self.location, ValueError(msg), wv.value)
        cached = self._cached_restamp
        if cached is not None:  # a built-in window fn: windows from the timestamp alone
            windows = cached(micros)
        else:
            if self._assign_restamped is None:
                self._assign_restamped = restamp_assigner(self.op.input_windowfn)
            try:
                windows = self._assign_restamped(item.value, micros)
            except Exception as error:  # the user's WindowFn
                raise UserCodeError(self.label, self.location, error, wv.value) from error
        if len(wv[2]) != 1:
            windows = windows * len(wv[2])
        return new_windowed_value((item.value, micros, windows, PANE_INFO_UNKNOWN))

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

    def _guard_iter(self, results: Iterable[Any], element: Any) -> Iterable[Any]:
        try:
            iterator = iter(results)
        except TypeError:
            msg = (
                f"'{self.label}' (applied at {self.location}) returned {results!r}, which is not iterable; "
                "a DoFn's process (and a FlatMap's function) must return or yield an iterable"
            )
            raise UserCodeError(self.label, self.location, TypeError(msg), element) from None
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


def _one_extra_arg(args: tuple) -> tuple[bool, Any]:
    """(True, the argument) when a Map passes its function one argument after the element:
    ``fn(value, arg)`` is then called as such, about 60 ns cheaper per element in CPython
    3.11 than ``fn(value, *args)``, which builds the call's arguments anew each time."""
    if len(args) == 1:
        return True, args[0]
    return False, None
