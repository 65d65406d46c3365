"""``DoFn``: the per-element function of a ``ParDo``, with Beam's lifecycle and parameters.

>>> class SplitWords(DoFn):
...     def process(self, line, timestamp=DoFn.TimestampParam):
...         for word in line.split():
...             yield TimestampedValue(word, timestamp)
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from sparkbeam._dofn_params import DoFnParam
from sparkbeam._state_specs import StateParamMarker, TimerParamMarker
from sparkbeam.ptransform import label_from_callable
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import IOTypeHints, WithTypeHints, get_type_hints

__all__ = ["BundleFinalizer", "DoFn", "DoFnParam", "StateParamMarker", "TimerParamMarker"]

_LOGGER = logging.getLogger(__name__)


class BundleFinalizer:
    """What ``DoFn.BundleFinalizerParam`` gives a DoFn: ``register(callback)`` runs the
    callback once the bundle's output has been handed to Spark.

    On Spark a bundle is one task's partition of a step: the callbacks of a bundle run in
    the executor process when the task has produced all of its output (after
    ``finish_bundle``), in the order they were registered. An exception in a callback is
    logged, not raised, and the other callbacks still run (as in Beam). If Spark runs the
    task again (a failure, or a partition recomputed), the DoFn runs again and so do the
    callbacks it registers then; a task that fails runs none. Use them for side effects
    that must follow the output (acknowledging a message), not to produce output.
    """

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], Any]] = []

    def register(self, callback: Callable[[], Any]) -> None:
        if not callable(callback):
            msg = f"BundleFinalizerParam.register takes a function of no arguments, not {callback!r}"
            raise TypeError(msg)
        self._callbacks.append(callback)

    def has_callbacks(self) -> bool:
        return bool(self._callbacks)

    def finalize_bundle(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception as error:
                _LOGGER.warning("a bundle finalization callback failed: %s", error, exc_info=True)

    def reset(self) -> None:
        self._callbacks = []


# Beam's name for the class a DoFn writes as the default: bundle_finalizer=DoFn.BundleFinalizerParam
_BundleFinalizerParam = BundleFinalizer


def is_bundle_finalizer_param(default: Any) -> bool:
    """Whether a parameter default asks for the bundle's finalizer (the class, or an instance)."""
    if isinstance(default, BundleFinalizer):
        return True
    # Compared by name too: a pickled function's defaults may carry an unpickled copy.
    return isinstance(default, type) and (issubclass(default, BundleFinalizer) or default.__name__ == "BundleFinalizer")


class _ContextParam(DoFnParam):
    """A context manager the runner enters for the DoFn and passes as this parameter."""

    scope = ""
    context_manager_constructor: Callable[..., Any]
    args: tuple
    kwargs: dict

    def __init__(
        self,
        context_manager_constructor: Callable[..., Any],
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        name: str | None = None,
    ) -> None:
        kind = type(self).__name__.strip("_")
        enter = getattr(context_manager_constructor, "__enter__", None)
        constructed = enter is not None and not isinstance(context_manager_constructor, type) and _takes_no_arguments(enter)
        if not callable(context_manager_constructor) or constructed:
            msg = (
                f"DoFn.{kind} takes a context manager constructor (not a constructed context "
                "manager, which could be entered only once and may not pickle): write "
                f"DoFn.{kind}(tempfile.TemporaryDirectory, args=(...)) rather than "
                f"DoFn.{kind}(tempfile.TemporaryDirectory(...))"
            )
            raise TypeError(msg)
        object.__setattr__(self, "name", f"{kind}_{name or id(self)}")
        object.__setattr__(self, "context_manager_constructor", context_manager_constructor)
        object.__setattr__(self, "args", tuple(args))
        object.__setattr__(self, "kwargs", dict(kwargs or {}))

    def create_and_enter(self) -> tuple[Any, Any]:
        """A new context manager and what entering it gives."""
        manager = self.context_manager_constructor(*self.args, **self.kwargs)
        return manager, manager.__enter__()

    # Each parameter is its own: compared by identity, not by name.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __reduce__(self) -> tuple:
        return (_rebuild_context_param, (type(self), self.name, self.context_manager_constructor, self.args, self.kwargs))


def _rebuild_context_param(kind: type[_ContextParam], name: str, constructor: Callable, args: tuple, kwargs: dict) -> _ContextParam:
    param = kind.__new__(kind)
    for field, value in (("name", name), ("context_manager_constructor", constructor), ("args", args), ("kwargs", kwargs)):
        object.__setattr__(param, field, value)
    return param


def _takes_no_arguments(method: Any) -> bool:
    try:
        return len(inspect.signature(method).parameters) == 0
    except (TypeError, ValueError):
        return False


class _SetupContextParam(_ContextParam):
    """Entered before ``setup``, exited after ``teardown``: a resource for the DoFn's
    lifetime (on Spark, a DoFn lives for one task of a step)."""

    scope = "setup"


class _BundleContextParam(_ContextParam):
    """Entered before ``start_bundle``, exited after ``finish_bundle``: one per bundle."""

    scope = "bundle"


class DoFn(WithTypeHints):
    """Processes elements one at a time.

    Lifecycle, as in Beam: ``setup`` once per instance, ``start_bundle`` and
    ``finish_bundle`` around each bundle (a Spark partition of one step), ``process`` per
    element, ``teardown`` at the end. ``process`` may return or yield values,
    ``TimestampedValue``, ``TaggedOutput`` or ``WindowedValue``; a value keeps the input's
    timestamp, windows and pane, a ``TimestampedValue`` is windowed again from its new
    timestamp by the input's window fn (as in Beam's Python SDK). It asks for the element's
    timestamp, window or pane with the defaults ``DoFn.TimestampParam``,
    ``DoFn.WindowParam`` and ``DoFn.PaneInfoParam``.
    """

    ElementParam = DoFnParam("ElementParam")
    TimestampParam = DoFnParam("TimestampParam")
    WindowParam = DoFnParam("WindowParam")
    PaneInfoParam = DoFnParam("PaneInfoParam")
    WindowedValueParam = DoFnParam("WindowedValueParam")
    BundleFinalizerParam = _BundleFinalizerParam
    SetupContextParam = _SetupContextParam
    BundleContextParam = _BundleContextParam
    # Stateful DoFns only (sparkbeam.transforms.userstate): the key, state cells, timers,
    # and in a timer callback the dynamic tag the timer was set with.
    KeyParam = DoFnParam("KeyParam")
    StateParam = StateParamMarker
    TimerParam = TimerParamMarker
    DynamicTimerTagParam = DoFnParam("DynamicTimerTagParam")
    # Recognised so that a DoFn using them gets a clear "not supported" error.
    SideInputParam = DoFnParam("SideInputParam")
    WatermarkEstimatorParam = DoFnParam("WatermarkEstimatorParam")

    @staticmethod
    def RestrictionParam(provider: Any = None) -> DoFnParam:
        return DoFnParam("RestrictionParam")

    @staticmethod
    def from_callable(fn: Callable) -> DoFn:
        """A DoFn whose ``process`` is ``fn`` (which returns an iterable of outputs)."""
        return _CallableDoFn(fn, "FlatMap")

    @staticmethod
    def unbounded_per_element() -> Callable:
        msg = "DoFn.unbounded_per_element (splittable DoFns) is not supported by sparkbeam"
        raise NotImplementedError(msg)

    @staticmethod
    def yields_elements(fn: Callable) -> Callable:
        msg = "DoFn.yields_elements (batched DoFns, process_batch) is not supported by sparkbeam"
        raise NotImplementedError(msg)

    @staticmethod
    def yields_batches(fn: Callable) -> Callable:
        msg = "DoFn.yields_batches (batched DoFns, process_batch) is not supported by sparkbeam"
        raise NotImplementedError(msg)

    def default_label(self) -> str:
        return type(self).__name__

    def default_type_hints(self) -> IOTypeHints | None:
        """The class's decorators first, then ``process``'s annotations (its return
        annotation is an iterable of the output type, as in Beam)."""
        from_process = IOTypeHints.from_callable(self.process)
        if from_process is not None:
            from_process = from_process.strip_iterable()
        return get_type_hints(type(self)).with_defaults(from_process)

    def setup(self) -> None:
        pass

    def start_bundle(self) -> None:
        pass

    def process(self, element: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement process()")

    def finish_bundle(self) -> Any:
        pass

    def teardown(self) -> None:
        pass


class _CallableDoFn(DoFn):
    """The DoFn behind Map, FlatMap, Filter, MapTuple and FlatMapTuple.

    ``shape`` says how the callable's result becomes outputs; the runner reads the
    callable's own signature for DoFn parameters such as ``DoFn.TimestampParam``.
    """

    def __init__(self, fn: Callable, shape: str) -> None:
        if not callable(fn):
            msg = f"{shape} takes a callable, not {fn!r}"
            raise TypeError(msg)
        self.fn = fn
        self.shape = shape

    def default_label(self) -> str:
        return label_from_callable(self.fn)

    def default_type_hints(self) -> IOTypeHints | None:
        """The function's declared or annotated types, read as the shape reads its results."""
        hints = get_type_hints(self.fn).with_defaults(IOTypeHints.from_callable(self.fn))
        if not hints:
            return None
        if self.shape in ("MapTuple", "FlatMapTuple"):
            # Its hints are for the unpacked parts of the element, not the element.
            hints = IOTypeHints(None, hints.output_types)
        if self.shape in ("FlatMap", "FlatMapTuple"):
            hints = hints.strip_iterable()
        if self.shape == "Filter":
            # A filter outputs what it is given: its input type, not its predicate's result.
            element = hints.element_input_type()
            known = element is not None and element != typehints.Any
            hints = IOTypeHints(hints.input_types, ((element,), {}) if known else None)
        return hints

    def process(self, element: Any, *args: Any, **kwargs: Any) -> Any:
        fn = self.fn
        if self.shape == "Map":
            return [fn(element, *args, **kwargs)]
        if self.shape == "FlatMap":
            return fn(element, *args, **kwargs)
        if self.shape == "Filter":
            return [element] if fn(element, *args, **kwargs) else []
        if self.shape == "MapTuple":
            return [fn(*element, *args, **kwargs)]
        return fn(*element, *args, **kwargs)  # FlatMapTuple


SUPPORTED_PARAMS = frozenset(
    {DoFn.ElementParam, DoFn.TimestampParam, DoFn.WindowParam, DoFn.PaneInfoParam, DoFn.WindowedValueParam}
)


#: Parameters the runner passes to stateful DoFns only (their process and timer callbacks).
STATEFUL_PARAMS = frozenset({DoFn.KeyParam, DoFn.DynamicTimerTagParam})


def is_supported_param(default: Any) -> bool:
    """Whether the runner passes something for a parameter with this default (in any DoFn)."""
    return default in SUPPORTED_PARAMS or isinstance(default, _ContextParam) or is_bundle_finalizer_param(default)


def is_stateful_param(default: Any) -> bool:
    """Whether the default asks for the key, a state cell or a timer: stateful DoFns only."""
    return default in STATEFUL_PARAMS or isinstance(default, (StateParamMarker, TimerParamMarker))
