"""The primitives and the element-wise transforms built on ``ParDo``.

Primitives (translated by a runner): ``Impulse``, ``Create``, ``ParDo``, ``GroupByKey``,
``Flatten``, ``WindowInto``. ``Map``, ``FlatMap``, ``Filter``, ``MapTuple`` and
``FlatMapTuple`` are ``ParDo`` over a wrapped callable.

>>> with Pipeline() as p:                                   # doctest: +SKIP
...     (p | Create(["a b", "c"]) | FlatMap(str.split) | Map(str.upper))
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

from sparkbeam import pvalue
from sparkbeam.coders import registry
from sparkbeam.dofn import DoFn, DoFnParam, _CallableDoFn, is_stateful_param, is_supported_param
from sparkbeam.errors import PipelineConstructionError, describe
from sparkbeam.ptransform import PTransform, label_from_callable
from sparkbeam.trigger import AccumulationMode, DefaultTrigger, TriggerFn, check_can_fire
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import (
    IOTypeHints,
    with_input_types,
    with_output_types,
)
from sparkbeam.userstate import is_stateful_dofn, validate_stateful_dofn
from sparkbeam.window import GlobalWindows, TimestampCombiner, WindowFn
from sparkbeam.windowing import Windowing

__all__ = [
    "Create",
    "DoFn",
    "Filter",
    "FlatMap",
    "FlatMapTuple",
    "Flatten",
    "FlattenWith",
    "GroupByKey",
    "Impulse",
    "Map",
    "MapTuple",
    "ParDo",
    "WindowInto",
]


def _here(pcoll: pvalue.PValue) -> str:
    """The label and user location of the transform being expanded, for error messages."""
    node = pcoll.pipeline.current_transform()
    return f"'{node.full_label}' (applied at {node.location})"


class Impulse(PTransform):
    """One empty-bytes element in the global window: the root of a pipeline branch."""

    is_primitive = True

    def infer_output_type(self, unused_input_type: Any) -> Any:
        return bytes

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        return pvalue.PCollection(pbegin.pipeline)


class Create(PTransform):
    """A PCollection of the given values, in the global window at the minimum timestamp."""

    is_primitive = True

    def __init__(self, values: Iterable[Any], reshuffle: bool = True) -> None:
        super().__init__()
        if isinstance(values, (str, bytes)):
            msg = f"Create takes an iterable of elements, not the string {values!r}; wrap it in a list"
            raise TypeError(msg)
        if isinstance(values, dict):
            values = values.items()
        try:
            self.values = list(values)
        except TypeError:
            msg = f"Create takes an iterable of elements, not {values!r}"
            raise TypeError(msg) from None

    def default_label(self) -> str:
        return "Create"

    def infer_output_type(self, unused_input_type: Any) -> Any:
        # As Beam: the union of the values' types, so that Create([1, 2]) | GroupByKey()
        # fails at construction.
        if not self.values:
            return typehints.Any
        return typehints.Union[tuple(typehints.instance_to_type(v) for v in self.values)]

    def expand(self, pbegin: pvalue.PBegin) -> pvalue.PCollection:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = f"Create is a root transform: apply it to the pipeline (p | Create(...)), not to {pbegin!r}"
            raise TypeError(msg)
        return pvalue.PCollection(pbegin.pipeline)


class ParDo(PTransform):
    """Apply a ``DoFn`` to every element; extra arguments (and side inputs) follow it.

    ``ParDo(fn).with_outputs('odd', main='even')`` declares additional outputs, which the
    DoFn fills by yielding ``TaggedOutput(tag, value)``.
    """

    is_primitive = True

    def __init__(self, fn: DoFn, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        if isinstance(fn, type) and issubclass(fn, DoFn):
            msg = f"ParDo takes a DoFn instance: write ParDo({fn.__name__}()), not ParDo({fn.__name__})"
            raise TypeError(msg)
        if not isinstance(fn, DoFn):
            if callable(fn):
                msg = f"ParDo takes a DoFn, not the function {label_from_callable(fn)}; use beam.Map or beam.FlatMap for functions"
            else:
                msg = f"ParDo takes a DoFn, not {fn!r}"
            raise TypeError(msg)
        if callable(getattr(fn, "process_batch", None)):
            msg = (
                f"ParDo({type(fn).__name__}): batched DoFns (process_batch) are not supported by "
                "sparkbeam; implement process, or batch with beam.BatchElements"
            )
            raise NotImplementedError(msg)
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.output_tags: tuple[str, ...] = ()
        self.main_tag: str | None = None
        self.side_inputs = tuple(
            a for a in (*args, *kwargs.values()) if isinstance(a, pvalue.AsSideInput)
        )

    def default_label(self) -> str:
        return f"ParDo({self.fn.default_label()})"

    def default_type_hints(self) -> IOTypeHints | None:
        return self.fn.get_type_hints()

    def with_outputs(self, *tags: str, main: str | None = None, allow_unknown_tags: bool | None = None) -> ParDo:
        for tag in tags:
            if not isinstance(tag, str):
                msg = f"{self.label}.with_outputs: tags must be strings, got {tag!r}"
                raise TypeError(msg)
        if main is not None and main in tags:
            msg = f"{self.label}.with_outputs: main tag {main!r} is also listed as an additional tag"
            raise ValueError(msg)
        self.output_tags = tuple(tags)
        self.main_tag = main
        self._with_outputs = True
        return self

    def process_callable(self) -> Callable:
        return self.fn.process

    def expand(self, pcoll: pvalue.PCollection) -> Any:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{self.label} is applied to a PCollection, not {pcoll!r}"
            raise TypeError(msg)
        stateful = _check_stateful(self, pcoll)
        _check_params(self.process_callable(), pcoll, stateful)
        pipeline = pcoll.pipeline
        pipeline.current_transform().side_inputs = self.side_inputs
        for side in self.side_inputs:
            if side.pvalue.pipeline is not pipeline:
                msg = f"{_here(pcoll)}: side input {side!r} belongs to another pipeline"
                raise PipelineConstructionError(msg)

        def output(tag: str | None) -> pvalue.PCollection:
            return pvalue.PCollection(
                pipeline, windowing=pcoll.windowing, is_bounded=pcoll.is_bounded, tag=tag
            )

        if not getattr(self, "_with_outputs", False):
            return output(None)
        outputs = {self.main_tag: output(self.main_tag)}
        outputs.update({tag: output(tag) for tag in self.output_tags})
        return pvalue.DoOutputsTuple(self.main_tag, self.output_tags, outputs)


def _check_stateful(transform: ParDo, pcoll: pvalue.PCollection) -> bool:
    """Whether the ParDo's DoFn is stateful, after Beam's checks of one (at construction)."""
    fn = transform.fn
    if isinstance(fn, _CallableDoFn) or not is_stateful_dofn(fn):
        return False
    try:
        validate_stateful_dofn(fn)
    except ValueError as error:
        msg = f"{_here(pcoll)}: {error}"
        raise ValueError(msg) from None
    element_type = pcoll.element_type
    if element_type is not None:
        try:
            typehints.coerce_to_kv_type(element_type, transform.label)
        except ValueError:
            msg = (
                f"{_here(pcoll)}: the input of a stateful DoFn must be (key, value) pairs, but its "
                f"declared element type is {element_type!r}; key the elements first, e.g. with "
                "beam.Map(lambda x: (key_of(x), x))"
            )
            raise TypeError(msg) from None
    windowfn = pcoll.windowing.windowfn
    if windowfn.is_merging():
        msg = (
            f"{_here(pcoll)}: state and timers in merging windows ({windowfn!r}) are not supported: "
            "Beam refuses value, set and ordered-list state and timers there, and sparkbeam does not "
            "merge bag or combining cells either; window with FixedWindows or SlidingWindows, or "
            "keep sessions yourself in the global window"
        )
        raise NotImplementedError(msg)
    if transform.side_inputs:
        msg = f"{_here(pcoll)}: side inputs of a stateful DoFn are not supported by sparkbeam"
        raise NotImplementedError(msg)
    return True


def _check_params(method: Callable, pcoll: pvalue.PValue, stateful: bool = False) -> None:
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return
    for param in signature.parameters.values():
        default = param.default
        if isinstance(default, DoFnParam) and is_stateful_param(default):
            if stateful:
                continue
            msg = (
                f"{_here(pcoll)}: parameter {param.name}={default!r} is for stateful DoFns only: "
                "a DoFn class that declares state or timers (DoFn.StateParam, DoFn.TimerParam)"
            )
            raise ValueError(msg)
        if isinstance(default, DoFnParam) and not is_supported_param(default):
            msg = (
                f"{_here(pcoll)}: parameter {param.name}={default!r} is not supported by sparkbeam "
                "(supported: DoFn.ElementParam, TimestampParam, WindowParam, PaneInfoParam, "
                "WindowedValueParam, BundleFinalizerParam, SetupContextParam, BundleContextParam, "
                "and in stateful DoFns KeyParam, StateParam, TimerParam, DynamicTimerTagParam)"
            )
            raise NotImplementedError(msg)


class _CallableParDo(ParDo):
    def __init__(self, shape: str, fn: Callable, *args: Any, **kwargs: Any) -> None:
        super().__init__(_CallableDoFn(fn, shape), *args, **kwargs)
        self._shape = shape

    def default_label(self) -> str:
        return f"{self._shape}({label_from_callable(self.fn.fn)})"

    def process_callable(self) -> Callable:
        return self.fn.fn

    def infer_output_type(self, input_type: Any) -> Any:
        if self._shape == "Filter":
            # Beam infers a filter's output from a Python function's code (its input),
            # and nothing from a builtin such as bool.
            return input_type if isinstance(self.fn.fn, types.FunctionType) else typehints.Any
        if self._shape == "Map" and self.fn.fn in _BUILTIN_CONVERSIONS:
            return typehints.normalize(self.fn.fn)  # Map(str) outputs str, as Beam infers
        return typehints.Any


_BUILTIN_CONVERSIONS = (str, int, float, bool, bytes, complex, tuple, list, dict, set, frozenset)


def Map(fn: Callable, *args: Any, **kwargs: Any) -> ParDo:
    """One output per element: ``fn(element, *args, **kwargs)``."""
    return _CallableParDo("Map", fn, *args, **kwargs)


def FlatMap(fn: Callable | None = None, *args: Any, **kwargs: Any) -> ParDo:
    """Every item of the iterable ``fn(element, *args, **kwargs)``; ``FlatMap()`` flattens."""
    return _CallableParDo("FlatMap", fn if fn is not None else _identity, *args, **kwargs)


def _identity(element: Any) -> Any:
    return element


def Filter(fn: Callable, *args: Any, **kwargs: Any) -> ParDo:
    """The elements for which ``fn(element, *args, **kwargs)`` is true."""
    return _CallableParDo("Filter", fn, *args, **kwargs)


def MapTuple(fn: Callable, *args: Any, **kwargs: Any) -> ParDo:
    """``fn(*element, *args, **kwargs)`` for tuple elements: ``MapTuple(lambda k, v: ...)``."""
    return _CallableParDo("MapTuple", fn, *args, **kwargs)


def FlatMapTuple(fn: Callable, *args: Any, **kwargs: Any) -> ParDo:
    """Every item of ``fn(*element, *args, **kwargs)``."""
    return _CallableParDo("FlatMapTuple", fn, *args, **kwargs)


_K = typehints.TypeVariable("K")
_V = typehints.TypeVariable("V")


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(typehints.Tuple[_K, typehints.Iterable[_V]])
class GroupByKey(PTransform):
    """Group (key, value) pairs into (key, [values]) per window, emitting panes as triggered."""

    is_primitive = True
    #: Whether anything downstream can see the pane info of the output. A composite that
    #: gives its elements their own metadata back after grouping (Reshuffle) says False, so
    #: the runner forgets a window as soon as its panes fired instead of keeping its pane
    #: indices until the window expires (the global window's never does).
    pane_indices_observed = True

    def infer_output_type(self, input_type: Any) -> Any:
        key_type, value_type = typehints.coerce_to_kv_type(input_type, self.label).tuple_types
        return typehints.KV[key_type, typehints.Iterable[value_type]]

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{self.label} is applied to a PCollection of (key, value) pairs, not {pcoll!r}"
            raise TypeError(msg)
        if pcoll.pipeline.options.pipeline_type_check:
            _refuse_keys_without_value_equality(pcoll)
        windowing = pcoll.windowing
        continued = Windowing(
            windowing.windowfn,
            windowing.triggerfn.get_continuation_trigger(),
            windowing.accumulation_mode,
            windowing.timestamp_combiner,
            windowing.allowed_lateness,
        )
        return pvalue.PCollection(pcoll.pipeline, windowing=continued, is_bounded=pcoll.is_bounded)


def _refuse_keys_without_value_equality(pcoll: pvalue.PCollection) -> None:
    """Fail at construction when the declared key type cannot be grouped by value.

    sparkbeam groups keys by ``==`` and ``hash`` (Beam groups by the bytes of the key's
    coder). Keys of a class that keeps ``object``'s identity hash would never meet their
    equals once pickled to another process, so the grouping would be silently wrong.
    """
    try:
        key_type = typehints.coerce_to_kv_type(pcoll.element_type).tuple_types[0]
    except ValueError:
        return  # not pairs: the input type check reports it
    if not isinstance(key_type, type) or key_type.__module__ == "builtins":
        return
    unhashable = key_type.__hash__ is None
    if not unhashable and key_type.__hash__ is not object.__hash__:
        return
    coder = registry.get_coder(key_type) if key_type in registry.custom_types else None
    how_beam = f"by the bytes of its registered {type(coder).__name__}" if coder is not None else "by the bytes of its coder"
    node = pcoll.pipeline.current_transform()
    problem = "are unhashable" if unhashable else "compare by identity (it defines no __eq__ and __hash__)"
    msg = (
        f"{describe(node.full_label, node.location)} groups keys of type {key_type.__qualname__}, whose "
        f"instances {problem}: sparkbeam groups keys by value (== and hash), Beam {how_beam}, which "
        f"sparkbeam does not support yet. Define __eq__ and __hash__ on {key_type.__qualname__} "
        "(by the values its coder writes), or key by a value that has them"
    )
    raise NotImplementedError(msg)


class Flatten(PTransform):
    """The union of several PCollections with the same windowing."""

    is_primitive = True

    def __init__(self, pipeline: Any = None, **kwargs: Any) -> None:
        super().__init__(kwargs.pop("label", None))
        if kwargs:
            msg = f"Flatten got unexpected arguments {sorted(kwargs)}"
            raise TypeError(msg)
        self.pipeline = pipeline

    def infer_output_type(self, input_type: Any) -> Any:
        return input_type if input_type is not None else typehints.Any  # the union of the inputs'

    def expand(self, pcolls: Any) -> pvalue.PCollection:
        if isinstance(pcolls, pvalue.PBegin):
            pcolls = ()
        if isinstance(pcolls, pvalue.PCollection):
            pcolls = (pcolls,)
        if isinstance(pcolls, dict):
            pcolls = tuple(pcolls.values())
        pcolls = tuple(pcolls)
        for pc in pcolls:
            if not isinstance(pc, pvalue.PCollection):
                msg = f"{self.label} takes PCollections, got {pc!r}"
                raise TypeError(msg)
        if not pcolls:
            if self.pipeline is None:
                msg = "Flatten of no PCollections needs the pipeline: Flatten(pipeline=p)"
                raise ValueError(msg)
            return pvalue.PCollection(self.pipeline)
        first = pcolls[0]
        for pc in pcolls[1:]:
            if pc.windowing.windowfn != first.windowing.windowfn:
                msg = (
                    f"{_here(first)}: inputs have different window fns "
                    f"({first.windowing.windowfn!r} for {first.label}, {pc.windowing.windowfn!r} "
                    f"for {pc.label}); apply the same WindowInto to each input first"
                )
                raise PipelineConstructionError(msg)
        return pvalue.PCollection(
            first.pipeline,
            windowing=first.windowing,
            is_bounded=all(pc.is_bounded for pc in pcolls),
        )


class FlattenWith(PTransform):
    """The input flattened with other PCollections, or with the outputs of root transforms:
    ``pcoll | FlattenWith(other, beam.Create([...]))``."""

    def __init__(self, *others: Any) -> None:
        super().__init__()
        for other in others:
            if not isinstance(other, (pvalue.PCollection, PTransform)):
                msg = f"FlattenWith takes PCollections and (root) PTransforms, not {other!r}"
                raise TypeError(msg)
        self._others = others

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        pcolls = [pcoll]
        for other in self._others:
            pcolls.append(other if isinstance(other, pvalue.PCollection) else pcoll.pipeline | other)
        return tuple(pcolls) | Flatten()


class WindowInto(PTransform):
    """Assign windows (and set the trigger, accumulation, timestamp combiner and lateness).

    >>> WindowInto(FixedWindows(60), trigger=AfterWatermark(early=AfterCount(100)),
    ...            accumulation_mode=AccumulationMode.ACCUMULATING,
    ...            allowed_lateness=300)                          # doctest: +SKIP
    """

    is_primitive = True

    def __init__(
        self,
        windowfn: WindowFn | Windowing,
        trigger: TriggerFn | None = None,
        accumulation_mode: AccumulationMode | None = None,
        timestamp_combiner: TimestampCombiner | None = None,
        allowed_lateness: Any = 0,
    ) -> None:
        super().__init__()
        if isinstance(windowfn, Windowing):
            # As Beam: the given settings overlay the Windowing's.
            windowing = windowfn
            windowfn = windowing.windowfn
            trigger = trigger or windowing.triggerfn
            accumulation_mode = accumulation_mode or windowing.accumulation_mode
            timestamp_combiner = timestamp_combiner or windowing.timestamp_combiner
            allowed_lateness = allowed_lateness or windowing.allowed_lateness
        if isinstance(windowfn, type) and issubclass(windowfn, WindowFn):
            windowfn = windowfn()
        if not isinstance(windowfn, WindowFn):
            msg = f"WindowInto takes a WindowFn such as FixedWindows(60), not {windowfn!r}"
            raise TypeError(msg)
        trigger = DefaultTrigger() if trigger is None else trigger
        if not isinstance(trigger, TriggerFn):
            msg = f"WindowInto: trigger must be a trigger such as AfterCount(10), not {trigger!r}"
            raise TypeError(msg)
        check_can_fire(trigger)
        if accumulation_mode is not None and not isinstance(accumulation_mode, AccumulationMode):
            msg = f"WindowInto: accumulation_mode must be an AccumulationMode, not {accumulation_mode!r}"
            raise TypeError(msg)
        if timestamp_combiner is not None and not isinstance(timestamp_combiner, TimestampCombiner):
            msg = f"WindowInto: timestamp_combiner must be a TimestampCombiner, not {timestamp_combiner!r}"
            raise TypeError(msg)
        try:
            self.windowing = Windowing(
                windowfn,
                trigger,
                accumulation_mode or AccumulationMode.DISCARDING,
                timestamp_combiner or TimestampCombiner.OUTPUT_AT_EOW,
                allowed_lateness,
            )
        except (TypeError, ValueError) as error:
            msg = f"WindowInto: {error}"
            raise type(error)(msg) from None

    def get_windowing(self, unused_inputs: Any = None) -> Windowing:
        return self.windowing

    def infer_output_type(self, input_type: Any) -> Any:
        return input_type if input_type is not None else typehints.Any

    def default_label(self) -> str:
        return f"WindowInto({type(self.windowing.windowfn).__name__})"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{self.label} is applied to a PCollection, not {pcoll!r}"
            raise TypeError(msg)
        return pvalue.PCollection(pcoll.pipeline, windowing=self.windowing, is_bounded=pcoll.is_bounded)


__all__ += ["GlobalWindows"]
