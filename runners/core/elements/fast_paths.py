"""The engine's fast paths for a plain Map, FlatMap, Filter, MapTuple or FlatMapTuple, for both front ends.

A ``DoFnRunner`` whose DoFn is plain (no parameters to fill, no side inputs, nothing of the
bundle's) runs each element as one call of its function, its outputs read in the same
frame (``call_process``); a Map whose re-stamped outputs only a WindowInto of a built-in
window fn reads windows them at once (``map_restamped_into``), and so do these paths with
their other outputs (``DoFnRunner.output_function``); the engine's own dead-letter router
hands every element but a bad record on with no call of its DoFn (``pass_on_all_but``). A front end whose functions
output values of its own types (Beam's ``TimestampedValue``, ``TaggedOutput``,
``WindowedValue``) and whose failures it names its own way says how with a ``DirectCall``:
the same paths then call its user's function with no wrapper call around it (README, "How
it works": one implementation, and what it saves per element).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from sparkbeam.metrics.execution import thread_steps
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS, fixed_window_parts
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import FixedWindows, GlobalWindows, TimestampedValue

if TYPE_CHECKING:  # a type only: the runner builds these paths for itself
    from sparkbeam.runners.core.elements.dofn_invoker import DoFnRunner

__all__ = ["DirectCall", "call_process", "map_restamped_into", "one_extra_arg", "pass_on_all_but"]

Emit = Callable[[WindowedValue], None]
_MIN_MICROS = MIN_TIMESTAMP.micros
_MAX_MICROS = MAX_TIMESTAMP.micros


class _NoOutput:
    """A type no output is of."""


#: a conversion not looked up yet (``DirectCall.conversions``)
_UNSEEN: Any = object()


@attrs.frozen
class DirectCall:
    """How the runner's fast paths for a plain Map, FlatMap or Filter (``DoFnRunner.
    plain``, no keyword arguments) call a front end's function, with no wrapper call of
    the front end's around each call: ``fn`` is called as the transform's function (the
    element's value, then its arguments); ``failure(error)`` is what its exception (or its
    outputs' iteration's) becomes before the engine names the transform; an output of
    ``stamped_type`` (the front end's re-stamped value) is read by ``stamped_parts(output)
    -> (value, timestamp_micros)`` and re-stamped as the engine's ``TimestampedValue``
    would be; any other output becomes the engine's through ``conversions`` (output type ->
    its conversion, None for a value passed on as it is) or, for a type not in it,
    ``as_engine`` (which may add it). One implementation of those paths serves both front
    ends: the engine's own functions are called the same way with no conversion."""

    fn: Callable[..., Any]
    failure: Callable[[Exception], BaseException]
    stamped_type: type
    stamped_parts: Callable[[Any], tuple[Any, int]]
    as_engine: Callable[[Any], Any]
    conversions: Mapping[type, Callable[[Any], Any] | None] = attrs.field(factory=dict, eq=False)



def call_process(runner: DoFnRunner) -> Callable[[WindowedValue], None]:
    """``process`` of a plain Map, FlatMap or Filter with no keyword arguments: one call
    of its function per element with the element's value (and the transform's
    arguments), its outputs read in the same frame. The function is the engine's DoFn's,
    or a front end's called as ``direct_call`` says (no wrapper call around it: its
    failures renamed by ``failure``, its outputs made the engine's by ``conversions``,
    its re-stamped outputs read as parts)."""
    shape, label, location, args = runner.shape, runner.label, runner.location, runner.op.args
    direct = runner.direct_call
    fn = runner.fn if direct is None else direct.fn
    failure = None if direct is None else direct.failure
    conversions = None if direct is None else direct.conversions
    as_engine = None if direct is None else direct.as_engine
    foreign = _NoOutput if direct is None else direct.stamped_type
    foreign_parts = None if direct is None else direct.stamped_parts
    output, emit, main = runner.output_function(), runner.main_emit, runner.main_emit
    restamp = runner._emit_restamped
    unseen = _UNSEEN
    no_args = not args
    one_arg, arg = one_extra_arg(args)
    # MapTuple and FlatMapTuple: the function takes the element's parts (``fn(*value)``).
    unpack = shape == "MapTuple" or shape == "FlatMapTuple"
    # The metrics step this path names itself around what it runs per element (``own_step``),
    # put back after as ``in_step_1`` does, with no wrapper call; None: named by its caller.
    own, steps, unnamed = runner.own_step, thread_steps(), ""

    def renamed(error: Exception) -> BaseException:
        return error if failure is None else failure(error)

    if shape == "Map" or shape == "MapTuple":

        def process_map(wv: WindowedValue) -> None:
            value = wv[0]
            if own is not None:
                names = steps.__dict__
                outer = names.get("step", unnamed)
                names["step"] = own
            try:
                if unpack:
                    result = fn(*value, *args)
                else:
                    result = fn(value) if no_args else fn(value, arg) if one_arg else fn(value, *args)
            except UserCodeError:
                raise
            except Exception as error:
                named = renamed(error)
                raise UserCodeError(label, location, named, value) from named
            if conversions is not None:  # a front end's output made the engine's
                kind = type(result)
                convert = conversions.get(kind, unseen)
                if convert is not None:
                    if kind is foreign:  # re-stamped: read as parts, no engine copy built
                        try:
                            out, micros = foreign_parts(result)  # type: ignore[misc]
                        except Exception as error:
                            raise UserCodeError(label, location, error, value) from error
                        restamp(out, micros, wv, main)
                        if own is not None:
                            names["step"] = outer
                        return
                    result = as_engine(result) if convert is unseen else convert(result)  # type: ignore[misc]
            output(result, wv)
            if own is not None:
                names["step"] = outer

        return process_map

    if shape == "Filter":

        def process_filter(wv: WindowedValue) -> None:
            value = wv[0]
            if own is not None:
                names = steps.__dict__
                outer = names.get("step", unnamed)
                names["step"] = own
            try:
                keep = fn(value) if no_args else fn(value, arg) if one_arg else fn(value, *args)
            except UserCodeError:
                raise
            except Exception as error:
                named = renamed(error)
                raise UserCodeError(label, location, named, value) from named
            if keep:
                emit(wv)
            if own is not None:
                names["step"] = outer

        return process_filter

    not_iterable = runner._not_iterable

    def process_flat(wv: WindowedValue) -> None:
        value = wv[0]
        if own is not None:
            names = steps.__dict__
            outer = names.get("step", unnamed)
            names["step"] = own
        try:
            if unpack:
                found = fn(*value, *args)
            else:
                found = fn(value) if no_args else fn(value, arg) if one_arg else fn(value, *args)
        except UserCodeError:
            raise
        except Exception as error:
            named = renamed(error)
            raise UserCodeError(label, location, named, value) from named
        if found is None:  # no outputs (as Beam's output handler reads it)
            if own is not None:
                names["step"] = outer
            return
        try:
            iterator = iter(found)
        except Exception as error:
            if failure is None:  # the engine's own words for what is not iterable
                if isinstance(error, TypeError):
                    raise not_iterable(found, value) from None
                raise
            named = failure(error)
            raise UserCodeError(label, location, named, value) from named
        while True:
            try:
                item = next(iterator)
            except StopIteration:
                if own is not None:
                    names["step"] = outer
                return
            except UserCodeError:
                raise  # from a DoFn downstream, already named
            except Exception as error:
                named = renamed(error)
                raise UserCodeError(label, location, named, value) from named
            if conversions is None:
                output(item, wv)
            else:
                convert = conversions.get(type(item), unseen)
                output(item if convert is None else as_engine(item) if convert is unseen else convert(item), wv)  # type: ignore[misc]

    return process_flat


def pass_on_all_but(runner: DoFnRunner, routed: tuple[type, ...]) -> Callable[[WindowedValue], None]:
    """``process`` of a DoFn whose class promises (``_engine_routes_only``) that it outputs every
    element whose value is not of a ``routed`` type unchanged to its main output, as a
    stream read's dead-letter router does: such an element is handed on as it is, with no
    call of the DoFn, which sees only the others (through ``call_process``). A value the
    runner's ``_output`` reads by its type (a tagged, re-stamped or windowed output) goes
    through the DoFn too, so what the DoFn's ``yield element`` would do is kept exactly."""
    process_routed = call_process(runner)
    through_process = frozenset((*routed, TaggedOutput, TimestampedValue, WindowedValue))
    emit = runner.main_emit

    def process_pass_on(wv: WindowedValue) -> None:
        if type(wv[0]) in through_process:
            process_routed(wv)
        else:
            emit(wv)

    return process_pass_on


def map_restamped_into(
    runner: DoFnRunner, assign: Callable[[int], tuple], send: Emit, send_stamped: Callable[[Any, int, tuple], None] | None
) -> Callable[[WindowedValue], None]:
    """``process`` for a plain Map whose re-stamped outputs go straight to the WindowInto
    (``window_restamped_into``): ``_plain_process``, ``_output`` and ``_restamped_into``
    in one call per element, which is what the idiom ``Map(... TimestampedValue ...) |
    WindowInto(...)`` costs. Any other output takes ``_output``. A front end's function
    is called as ``direct_call`` says, with no wrapper call around it."""
    label, location, args = runner.label, runner.location, runner.op.args
    direct = runner.direct_call
    fn = runner.fn if direct is None else direct.fn
    # The front end's re-stamped type and the rest of its hooks (a type no output is of,
    # for the engine's own function: its outputs are the engine's already).
    foreign, foreign_parts = (_NoOutput, None) if direct is None else (direct.stamped_type, direct.stamped_parts)
    failure = None if direct is None else direct.failure
    as_engine = None if direct is None else direct.as_engine
    one_arg, arg = one_extra_arg(args)
    output = runner.output_function()
    restamped_into = runner._restamped_into
    stamped, unknown, new = TimestampedValue, PANE_INFO_UNKNOWN, new_windowed_value
    low, high = _MIN_MICROS, _MAX_MICROS
    # The input's window fn windows a re-stamped output once per input window; global
    # and fixed windows give one window whatever the timestamp, so one copy per input window.
    one_window = type(runner.op.input_windowfn) in (GlobalWindows, FixedWindows)
    # Into fixed windows: the cached windows looked up here, with no call per element.
    fixed = fixed_window_parts(assign)
    size, offset, cached_windows = fixed if fixed is not None else (0, 0, None)
    own, steps, unnamed = runner.own_step, thread_steps(), ""

    def in_own_step(wv: WindowedValue) -> None:
        # Named as ``call_process``'s paths name it (``own_step``), put back after.
        names = steps.__dict__
        outer = names.get("step", unnamed)
        names["step"] = own
        process_map_restamped_into(wv)
        names["step"] = outer

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
            restamped_into(out, micros, wv)

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
        restamped_into(out, micros, new((value, low, global_windows, unknown)))

    runner.process_global_value = process_global_value if own is None else None
    return process_map_restamped_into if own is None else in_own_step


def one_extra_arg(args: tuple) -> tuple[bool, Any]:
    """(True, the argument) when a Map passes its function one argument after the element:
    ``fn(value, arg)`` is then called as such, about 60 ns cheaper per element in CPython
    3.11 than ``fn(value, *args)``, which builds the call's arguments anew each time."""
    if len(args) == 1:
        return True, args[0]
    return False, None
