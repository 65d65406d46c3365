"""Beam's Map, FlatMap, Filter, MapTuple and FlatMapTuple, and DoFns that are a ``process``
alone, run by the engine's own DoFnRunner.

Most ParDos of a Beam pipeline are one of these: a ``CallableWrapperDoFn`` around the
user's function, with no side inputs and no DoFn parameters; or a DoFn class of the
user's with a ``process`` method and none of Beam's lifecycle methods (``setup``,
``start_bundle``, ``finish_bundle``, ``teardown``) overridden, which Beam's runner runs
exactly as ``FlatMap(dofn.process)`` (``_process_alone``): it is lowered as that. Beam's ``DoFnRunner`` would
call such a DoFn with a Beam ``WindowedValue`` built for each element and convert every
output back; the engine's own ``DoFnRunner`` calls the function with the element's value
and keeps its fast paths (one call per element, the input's timestamp, windows and pane
kept by identity, a re-stamped output windowed at once by the ``WindowInto`` that alone
reads it). So such a ParDo is lowered to ``BeamFnParDoOp`` (``plain_par_do``): the
engine's ParDo with the user's function, unwrapped from Beam's Map/Filter wrappers. The
engine's fast paths for a Map, FlatMap or Filter call it themselves, told by a
``DirectCall`` (``BeamFnRunner``) what Beam's runner does differently; the other shapes
(MapTuple, FlatMapTuple, keyword arguments, DoFn parameters) go through a thin wrapper
call (``BeamCallable``) that does the same:

- outputs of Beam's types (``TimestampedValue``, ``TaggedOutput``, ``WindowedValue``)
  become the engine's, which the engine then handles as Beam's output handler does
  (re-windowed by the input's window fn, once per input window, with an unknown pane);
- outputs to a tag the transform did not declare are dropped (``BeamFnRunner``), as Beam's
  runners drop them;
- an exception from the function gets Beam's "[while running 'label']" suffix, as Beam's
  ``DoFnRunner`` adds it;
- Beam's ``Metrics`` in the function reach the task's metrics: the tracker Beam's metrics
  update is made current for the bundle, not per element;
- a function that takes Beam's ``DoFn.WindowParam``, ``TimestampParam`` or
  ``PaneInfoParam`` after the element (and nothing else) gets Beam's objects for them,
  by position, once per window when it takes its window (``_process_with_params``).

Inputs in ``SlidingWindows`` (an element in several windows) take the same paths: Beam's
output handler repeats a re-stamped or ``WindowedValue`` output's windows once per input
window, and so does the engine's runner for the front end (``repeat_windowed_output_windows``).
Anything else (a DoFn class with a lifecycle method, side inputs, other DoFn parameters, runtime type checks,
inputs in a window fn of the user's) keeps Beam's ``DoFnRunner`` (``pardo.py``).
``ReadBundle`` (``reads.py``), which reads a bounded source's bundle, is run the same way.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam import pvalue as beam_pvalue
from apache_beam.transforms import core as beam_core
from apache_beam.transforms import window as beam_window
from apache_beam.utils import timestamp as beam_timestamp
from apache_beam.utils import windowed_value as beam_wv

from sparkbeam.core import _CallableDoFn
from sparkbeam.pvalue import TaggedOutput
from sparkbeam.runners.beam.elements import to_beam_pane, to_beam_windows, to_engine
from sparkbeam.runners.beam.metrics import tracking_for_the_task
from sparkbeam.runners.core.elements.dofn_invoker import DirectCall, DoFnRunner, SideInputs
from sparkbeam.runners.core.elements.execution import pardo_joiner, register_kind
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import ParDoOp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import FixedWindows, GlobalWindows, Sessions, SlidingWindows, TimestampedValue
from sparkbeam.windowing import Windowing

__all__ = ["BeamFnParDoOp", "BeamFnRunner", "beam_callable_shape", "plain_par_do"]

Emit = Callable[[Any], None]

# -- Beam's wrappers, recognised by their code -------------------------------------------


def _one(x: Any) -> Any:
    return x


def _two(x: Any, y: Any = None) -> Any:
    return x


def _code_key(code: Any) -> tuple:
    # By content, not identity: Beam's runner-API round trip (TestPipeline's) pickles the
    # wrappers by value, which makes new code objects of the same code.
    return (code.co_filename, code.co_firstlineno, code.co_code)


def _wrapper_shapes() -> dict[tuple, str]:
    probes = {
        "Map": (beam.Map(_one), beam.Map(_two, None)),
        "MapTuple": (beam.MapTuple(_one), beam.MapTuple(_two, None)),
        "FlatMapTuple": (beam.FlatMapTuple(_one), beam.FlatMapTuple(_two, None)),
        "Filter": (beam.Filter(_one),),
    }
    return {_code_key(p.fn.process.__code__): shape for shape, made in probes.items() for p in made}


#: Beam's Map/MapTuple/FlatMapTuple/Filter wrapper lambdas (by code) -> the engine's shape
_WRAPPER_SHAPES = _wrapper_shapes()
_DOFN_PARAM = type(beam.DoFn.ElementParam)


def beam_callable_shape(dofn: Any) -> tuple[Callable, str]:
    """(the user's function, the engine's shape) of a ``CallableWrapperDoFn``: what Beam's
    Map, MapTuple, FlatMapTuple and Filter wrap, or the DoFn's ``process`` as a FlatMap."""
    process = dofn.process
    code = getattr(process, "__code__", None)
    if code is None or process.__closure__ is None or "fn" not in code.co_freevars:
        return process, "FlatMap"
    shape = _WRAPPER_SHAPES.get(_code_key(code))
    if shape is None:
        return process, "FlatMap"
    return process.__closure__[code.co_freevars.index("fn")].cell_contents, shape


def _takes_dofn_params(signature: Any) -> bool:
    for default in signature.process_method.defaults:
        if isinstance(default, _DOFN_PARAM) or (isinstance(default, type) and issubclass(default, _DOFN_PARAM)):
            return True
    return False


#: Beam's DoFn parameters a plain function may take, whose values the engine's runner
#: passes as Beam's (``BeamFnRunner``): the element's window, timestamp and pane
_PARAM_KINDS = {beam.DoFn.WindowParam: "window", beam.DoFn.TimestampParam: "timestamp", beam.DoFn.PaneInfoParam: "pane"}


def _param_kinds(fn: Callable, shape: str, transform: Any) -> tuple[str, ...] | None:
    """What each parameter of the user's function after the element asks for, in order
    (``_PARAM_KINDS``), when every one of them is one of those Beam parameters, the
    function is a Map's, FlatMap's or Filter's, and nothing else is passed to it; else
    None (Beam's DoFnRunner runs it). Beam passes them by position, as the engine does."""
    if shape not in ("Map", "FlatMap", "Filter") or transform.args or transform.kwargs:
        return None
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if not parameters or parameters[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        return None
    if isinstance(parameters[0].default, _DOFN_PARAM):
        return None
    kinds = []
    for parameter in parameters[1:]:
        default = parameter.default
        kind = _PARAM_KINDS.get(default) if type(default) is _DOFN_PARAM else None
        if kind is None or parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            return None
        kinds.append(kind)
    return tuple(kinds)


#: the DoFn methods Beam's DoFnRunner calls besides ``process`` (``_process_alone``)
_LIFECYCLE = ("setup", "start_bundle", "finish_bundle", "teardown")


def _process_alone(dofn: Any) -> bool:
    """Whether ``dofn`` is a DoFn of the user's whose ``process`` is all Beam's DoFnRunner
    would call: every lifecycle method Beam's own no-op (a ``finish_bundle`` may output,
    ``setup`` may take context managers), ``process`` a method of the instance. (Stateful,
    splittable and batched DoFns never get here; DoFn parameters are read as for a Map's.)"""
    if not isinstance(dofn, beam_core.DoFn) or isinstance(dofn, beam_core.CallableWrapperDoFn):
        return False
    if type(dofn).__getattribute__ is not object.__getattribute__:
        return False  # a wrapper that hands on other methods (with_exception_handling's)
    for name in _LIFECYCLE:  # looked up as Beam's runner calls them: on the instance
        method = getattr(dofn, name, None)
        if getattr(method, "__func__", None) is not getattr(beam_core.DoFn, name):
            return False
    process = getattr(dofn, "process", None)
    return inspect.ismethod(process) and process.__self__ is dofn and inspect.isfunction(process.__func__)


#: the built-in window fns, whose windows the engine assigns itself: an element in several
#: (sliding) windows has its ``WindowedValue`` outputs' windows repeated as Beam's output
#: handler repeats them (``BeamFnRunner.repeat_windowed_output_windows``)
_BUILT_IN_WINDOW_FNS = (GlobalWindows, FixedWindows, SlidingWindows, Sessions)


def plain_par_do(node: Any, signature: Any, base: dict[str, Any], windowing: Windowing, type_checked: bool) -> BeamFnParDoOp | None:
    """The engine's ParDo for a Beam ParDo of a plain ``CallableWrapperDoFn`` (see the
    module docs), or None where Beam's DoFnRunner must run it."""
    transform = node.transform
    if node.side_inputs or type_checked or type(windowing.windowfn) not in _BUILT_IN_WINDOW_FNS:
        return None
    if type(transform.fn) is beam_core.CallableWrapperDoFn:
        fn, shape = beam_callable_shape(transform.fn)
    elif _process_alone(transform.fn):
        # What Beam's runner does with such a DoFn is what it does with FlatMap(its process).
        fn, shape = transform.fn.process, "FlatMap"
    else:
        return None
    params: tuple[str, ...] = ()
    if _takes_dofn_params(signature):
        found = _param_kinds(fn, shape, transform)
        if found is None:
            return None
        params = found
    tags = tuple(None if tag in (None, "None") else tag for tag, pc in node.outputs.items() if isinstance(pc, beam_pvalue.PCollection))
    args, kwargs = tuple(transform.args), dict(transform.kwargs)
    arguments = "positional" if params else _arguments(shape, args, kwargs)
    return BeamFnParDoOp(
        **base,
        dofn=BeamCallable(fn, shape, base["label"], arguments, params),
        args=args,
        kwargs=kwargs,
        output_tags=tags,
        input_windowfn=windowing.windowfn,
    )


# -- outputs of Beam's types as the engine's ---------------------------------------------

_new_stamped = TimestampedValue.__new__
_set_stamped_value = TimestampedValue.__dict__["value"].__set__
_set_stamped_micros = TimestampedValue.__dict__["timestamp_micros"].__set__


_BeamTimestamp = beam_timestamp.Timestamp


def _micros_in_fields() -> bool:
    """Whether Beam's ``Timestamp`` keeps whole seconds and the rest in fields at a precision
    (Beam 2.7x): then a microsecond one's ``micros`` is read off them, with none of its
    property's calls (this is once per re-stamped element)."""
    probe = _BeamTimestamp(micros=-1_234_567)
    fields = (getattr(probe, "_precision", None), getattr(probe, "_seconds", None), getattr(probe, "_subseconds", None))
    return fields == (6, -2, 765_433)


_MICROS_IN_FIELDS = _micros_in_fields()


def _stamped_parts(item: Any) -> tuple[Any, int]:
    """(value, timestamp in µs) of Beam's ``TimestampedValue``."""
    timestamp = item.timestamp
    if _MICROS_IN_FIELDS and type(timestamp) is _BeamTimestamp and timestamp._precision == 6:
        return item.value, timestamp._seconds * 1_000_000 + timestamp._subseconds
    return item.value, timestamp.micros


def _stamped(item: Any) -> TimestampedValue:
    value, micros = _stamped_parts(item)
    stamped = _new_stamped(TimestampedValue)
    _set_stamped_value(stamped, value)
    _set_stamped_micros(stamped, micros)
    return stamped


def _tagged(item: Any) -> TaggedOutput:
    return TaggedOutput(item.tag, engine_output(item.value))


_CONVERSIONS: list[tuple[type, Callable[[Any], Any]]] = [
    (beam_window.TimestampedValue, _stamped),
    (beam_pvalue.TaggedOutput, _tagged),
    (beam_wv.WindowedValue, to_engine),
]
#: output type -> its conversion (None: a value, passed on as it is); filled as types are seen
_CONVERTERS: dict[type, Callable[[Any], Any] | None] = {kind: convert for kind, convert in _CONVERSIONS}


_UNSEEN: Any = object()


def _converter(kind: type) -> Callable[[Any], Any] | None:
    found = next((convert for base, convert in _CONVERSIONS if issubclass(kind, base)), None)
    if len(_CONVERTERS) < 10_000:
        _CONVERTERS[kind] = found
    return found


def engine_output(item: Any) -> Any:
    """What the engine's DoFnRunner must see for one output of a Beam function."""
    kind = type(item)
    convert = _CONVERTERS[kind] if kind in _CONVERTERS else _converter(kind)
    return item if convert is None else convert(item)


def augmented(error: BaseException, label: str) -> BaseException:
    """``error`` as Beam's DoFnRunner re-raises it: the same type, its message followed by
    "[while running 'label']" (a RuntimeError saying both where the type cannot be built)."""
    if getattr(error, "_tagged_with_step", False):
        return error
    annotation = f" [while running '{label}']"
    try:
        renamed = type(error)(error.args[0] + annotation, *error.args[1:])
        renamed._tagged_with_step = True  # type: ignore[attr-defined]
    except Exception:
        renamed = RuntimeError(traceback.format_exception_only(type(error), error)[-1].strip() + annotation)
        renamed._tagged_with_step = True  # type: ignore[attr-defined]
    return renamed.with_traceback(error.__traceback__)


def _single_call(fn: Callable, label: str, arguments: str) -> Callable:
    """A Map's or Filter's call where the engine calls the DoFn's own function (a
    MapTuple, keyword arguments, Beam's DoFn parameters): one result per element, made
    the engine's. ``arguments``: what the engine passes (``_arguments``). A Map or Filter
    called with the element and positional arguments alone never gets here: the engine's
    fast paths call the user's function themselves (``BeamFnRunner``'s ``DirectCall``)."""
    converters = _CONVERTERS
    unseen = _UNSEEN

    if arguments == "positional":

        def call_positional(value: Any, *args: Any) -> Any:
            try:
                result = fn(value, *args)
            except Exception as error:
                raise augmented(error, label) from error
            convert = converters.get(type(result), unseen)
            if convert is None:  # a value
                return result
            return engine_output(result) if convert is unseen else convert(result)

        return call_positional

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except Exception as error:
            raise augmented(error, label) from error
        convert = converters.get(type(result), unseen)
        if convert is None:  # a value
            return result
        return engine_output(result) if convert is unseen else convert(result)

    # (MapTuple: the engine passes the element's parts, which go on as they are.)
    return call


def _flat_call(fn: Callable, label: str) -> Callable:
    """A FlatMap's call: its results as the engine's outputs, read lazily as Beam reads them."""
    converters = _CONVERTERS
    unseen = _UNSEEN

    def results(found: Any) -> Iterator[Any]:
        try:
            if found is None:  # Beam's output handler: no outputs
                return
            for item in found:
                convert = converters.get(type(item), unseen)
                yield item if convert is None else engine_output(item) if convert is unseen else convert(item)
        except Exception as error:
            raise augmented(error, label) from error

    def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
        try:
            found = fn(*args, **kwargs)
        except Exception as error:
            raise augmented(error, label) from error
        return results(found)

    # (FlatMapTuple: the engine passes the element's parts, which go on as they are.)

    return call


def _arguments(shape: str, args: tuple, kwargs: dict) -> str:
    """What the engine's DoFnRunner passes a callable of ``shape``: the element alone, the
    element and one argument, the element and positional arguments, or anything (parts of
    the element, keywords)."""
    if shape in ("MapTuple", "FlatMapTuple") or kwargs:
        return "any"
    return ("one" if len(args) == 1 else "positional") if args else "element"


class BeamCallable(_CallableDoFn):
    """A Beam function as the engine's callable DoFn of one shape (see the module docs).
    ``params``: the Beam DoFn parameters it takes after the element (``_param_kinds``),
    whose values ``BeamFnRunner`` passes after the element, by position.

    The call that wraps the user's function is made again where the DoFn is unpickled."""

    def __init__(self, beam_fn: Callable, shape: str, label: str, arguments: str = "any", params: tuple[str, ...] = ()) -> None:
        self.beam_fn = beam_fn
        self.label = label
        self.arguments = arguments
        self.params = params
        if shape in ("FlatMap", "FlatMapTuple"):
            call = _flat_call(beam_fn, label)
        else:
            call = _single_call(beam_fn, label, arguments)
        super().__init__(call, shape)

    def default_label(self) -> str:
        return self.label

    def __getstate__(self) -> dict[str, Any]:
        return {"beam_fn": self.beam_fn, "shape": self.shape, "label": self.label, "arguments": self.arguments, "params": self.params}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["beam_fn"], state["shape"], state["label"], state["arguments"], state.get("params", ()))  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"BeamCallable({self.beam_fn!r}, {self.shape!r})"


class BeamFnParDoOp(ParDoOp):
    """A Beam ParDo whose function the engine's own ``DoFnRunner`` runs (``BeamFnRunner``):
    a ``ParDoOp`` with no field of its own, a type of its own for its kind."""


class BeamFnRunner(DoFnRunner):
    """The engine's DoFnRunner, with Beam's handling of undeclared output tags (dropped)
    and of a ``WindowedValue`` output of an input in several windows (its windows repeated
    once per input window), and Beam's metric updates going to the task's metrics for the
    whole bundle."""

    repeat_windowed_output_windows = True

    def __init__(self, op: ParDoOp, emitters: dict[str | None, Emit], side_inputs: SideInputs | None) -> None:
        dofn = op.dofn
        direct = None
        if isinstance(dofn, BeamCallable) and not dofn.params and dofn.arguments != "any":
            # A Map's, FlatMap's or Filter's function called by the engine's own fast paths
            # (one implementation for both front ends): no wrapper call of ours per element,
            # Beam's TimestampedValue read as it is, other outputs of Beam's types converted.
            direct = DirectCall(
                dofn.beam_fn, _failure_in(dofn.label), beam_window.TimestampedValue, _stamped_parts, engine_output, _CONVERTERS
            )
        super().__init__(op, emitters, side_inputs, direct)
        self._stop_tracking: Callable[[], None] | None = None
        if isinstance(dofn, BeamCallable) and dofn.params:
            # Called with Beam's values of its parameters (not one call per element as the
            # engine's plain DoFns are: never the fused re-stamping Map's call).
            self.plain = False
            self.process = _process_with_params(self, dofn.params)

    def start(self) -> None:
        self._stop_tracking = tracking_for_the_task()
        super().start()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            stop, self._stop_tracking = self._stop_tracking, None
            if stop is not None:
                stop()

    def _emitter(self, tag: str | None) -> Emit:
        return self.emitters.get(tag) or _dropped


def _dropped(wv: Any) -> None:
    return None


def _process_with_params(runner: BeamFnRunner, kinds: tuple[str, ...]) -> Callable[[WindowedValue], None]:
    """``process`` of a function that takes Beam's DoFn parameters (``_param_kinds``): each
    element's window, timestamp and pane as Beam's objects, after the element, by
    position, as Beam's DoFnRunner passes them; one call per window when it takes its
    window, as Beam makes it. Consecutive elements' windows and panes are converted once.
    Beam's DoFnRunner would build Beam's element for each and convert every output back."""
    call, shape, label, location = runner.fn, runner.shape, runner.label, runner.location
    output, emit, guard_iter = runner._output, runner.main_emit, runner._guard_iter
    per_window = "window" in kinds
    engine_windows: Any = None
    beam_windows: Any = None
    engine_pane: Any = None
    beam_pane: Any = None

    def process(wv: WindowedValue) -> None:
        nonlocal engine_windows, beam_windows, engine_pane, beam_pane
        windows = wv[2]
        if per_window and len(windows) != 1:
            for window in windows:  # as Beam's DoFnRunner makes them: the pane unknown
                process(new_windowed_value((wv[0], wv[1], (window,), PANE_INFO_UNKNOWN)))
            return
        params = []
        for kind in kinds:
            if kind == "window":
                if windows is not engine_windows:
                    engine_windows, beam_windows = windows, to_beam_windows(windows)
                params.append(beam_windows[0])
            elif kind == "timestamp":
                params.append(_BeamTimestamp(micros=wv[1]))
            else:
                pane = wv[3]
                if pane is not engine_pane:
                    engine_pane, beam_pane = pane, to_beam_pane(pane)
                params.append(beam_pane)
        value = wv[0]
        try:
            result = call(value, *params)  # Beam's outputs made the engine's, failures named
        except UserCodeError:
            raise
        except Exception as error:
            raise UserCodeError(label, location, error, value) from error
        if shape == "Map":
            output(result, wv)
        elif shape == "Filter":
            if result:
                emit(wv)
        elif result is not None:
            for item in guard_iter(result, value):
                output(item, wv)

    return process


def _failure_in(label: str) -> Callable[[Exception], BaseException]:
    """What a failure of the function becomes, as the wrapper call would raise it (``augmented``)."""

    def failure(error: Exception) -> BaseException:
        renamed = augmented(error, label)
        if renamed is not error:
            renamed.__cause__ = error  # as ``raise augmented(...) from error``
        return renamed

    return failure


# A ParDo in every way but for its DoFn's runner (the engine's, with Beam's tag rule).
# Its runner reads the metrics step at each update: a fused body may name it per chunk.
register_kind(BeamFnParDoOp, like=ParDoOp, join_body=pardo_joiner(BeamFnRunner), body_code="pardo")
