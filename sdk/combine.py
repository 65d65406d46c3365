"""``CombineFn`` and the combining transforms: ``CombinePerKey``, ``CombineGlobally``, ``CombineValues``.

``CombinePerKey`` is a composite (``GroupByKey`` then ``CombineValues``); the Spark runner
lifts it into a partial combine before the shuffle and a merge after, with the same results.
``CombinePerKey(...).with_hot_key_fanout(n)`` and ``CombineGlobally(...).with_fanout(n)``
combine in two levels, as Beam does: first per (key, nonce in [0, n)), then per key.

>>> class Average(CombineFn):
...     def create_accumulator(self): return (0, 0)
...     def add_input(self, acc, x): return (acc[0] + x, acc[1] + 1)
...     def merge_accumulators(self, accs):
...         sums, counts = zip(*accs)
...         return (sum(sums), sum(counts))
...     def extract_output(self, acc): return acc[0] / acc[1] if acc[1] else float("nan")
>>> Average().apply([1, 2, 3, 6])
3.0
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam._combine_fn import CallableWrapperCombineFn, CombineFn, accumulator_from
from sparkbeam.core import Create, DoFn, Flatten, GroupByKey, Map, ParDo
from sparkbeam.errors import PipelineConstructionError
from sparkbeam.ptransform import PTransform, label_from_callable
from sparkbeam.trigger import AccumulationMode
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import IOTypeHints
from sparkbeam.window import GlobalWindows

__all__ = [
    "CallableWrapperCombineFn",
    "CombineFn",
    "CombineGlobally",
    "CombinePerKey",
    "CombineValues",
    "accumulator_from",
]


def _has_side_inputs(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(a, pvalue.AsSideInput) for a in (*args, *kwargs.values()))


class _CombineValuesDoFn(DoFn):
    """Combines each (key, values); the CombineFn's extra arguments come with each element
    (side inputs read in the element's window), as Beam passes them to every method."""

    def __init__(self, combine_fn: CombineFn) -> None:
        self.combine_fn = combine_fn

    def default_label(self) -> str:
        return f"CombineValues({self.combine_fn.default_label()})"

    def setup(self) -> None:
        self.combine_fn.setup()

    def process(self, element: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            key, values = element
        except (TypeError, ValueError):
            msg = f"CombineValues expects (key, iterable of values) pairs, got {element!r}"
            raise TypeError(msg) from None
        fn = self.combine_fn
        accumulator = fn.add_inputs(fn.create_accumulator(*args, **kwargs), values, *args, **kwargs)
        return [(key, fn.extract_output(accumulator, *args, **kwargs))]

    def teardown(self) -> None:
        self.combine_fn.teardown()


class CombineValues(PTransform):
    """Combine the iterable of each (key, values) pair: ``(k, [1, 2]) -> (k, fn([1, 2]))``.

    Extra arguments, side inputs (``AsSingleton``, ``AsList``, ``AsDict``, ``AsIter``)
    included, are passed to each of the CombineFn's methods, read in the element's window.
    """

    def __init__(self, fn: CombineFn | Callable, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.combine_fn = CombineFn.maybe_from_callable(fn)
        self.args = args
        self.kwargs = kwargs

    def default_label(self) -> str:
        return f"CombineValues({self.combine_fn.default_label()})"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | ParDo(_CombineValuesDoFn(self.combine_fn), *self.args, **self.kwargs)


class CombinePerKey(PTransform):
    """Combine the values of each key per window: ``(k, v)... -> (k, fn(vs))``.

    Extra arguments go to each of the CombineFn's methods; side inputs among them
    (``CombinePerKey(fn, AsSingleton(limits))``) are read in each key's window. With extra
    arguments the values are grouped first and then combined (no combining before the
    shuffle), which gives each method the side input of the window it combines.
    """

    def __init__(self, fn: CombineFn | Callable, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.combine_fn = CombineFn.maybe_from_callable(fn)
        self.args = args
        self.kwargs = kwargs

    def default_label(self) -> str:
        return f"CombinePerKey({self.combine_fn.default_label()})"

    def default_type_hints(self) -> IOTypeHints | None:
        """(K, input) pairs to (K, output) pairs, from the CombineFn's hints (as Beam)."""
        hints = self.combine_fn.get_type_hints()
        key = typehints.TypeVariable("K")
        element = hints.element_input_type()
        output = hints.simple_output_type(self.label) if hints.has_simple_output_type() else None
        return IOTypeHints(
            ((typehints.Tuple[key, typehints.Any if element is None else element],), {}),
            ((typehints.Tuple[key, typehints.Any if output is None else output],), {}),
        )

    def with_hot_key_fanout(self, fanout: int | Callable[[Any], int] | None) -> PTransform:
        """The same combine in two levels, for keys too hot for one worker (Beam's semantics).

        ``fanout`` is an int, or a function of the key giving one; a key's values are first
        combined per (key, nonce) with the nonce in ``[0, fanout)`` (each bundle picks one
        nonce, so partial combining still happens before the shuffle), and the accumulators
        are then merged per key. A fanout of 1 or less sends the key straight to the final
        combine; ``None`` returns this transform unchanged.

        >>> CombinePerKey(sum).with_hot_key_fanout(8).label
        'CombinePerKey(sum, fanout=8)'
        """
        if fanout is None:
            return self
        if _has_side_inputs(self.args, self.kwargs):
            msg = (
                f"{self.default_label()}.with_hot_key_fanout: a CombineFn with side inputs cannot "
                "combine in two levels (Beam cannot either); drop the fanout"
            )
            raise NotImplementedError(msg)
        return _CombinePerKeyWithHotKeyFanout(self.combine_fn, fanout, self.args, self.kwargs)

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | "GroupByKey" >> GroupByKey() | "Combine" >> CombineValues(self.combine_fn, *self.args, **self.kwargs)


class _SplitHotCold(DoFn):
    """Cold keys go to the final combine as (key, (False, value)); hot ones to the
    intermediate combine as ((nonce, key), value), one nonce per bundle as in Beam."""

    def __init__(self, owner: str, fanout_fn: Callable[[Any], int]) -> None:
        self.owner = owner
        self.fanout_fn = fanout_fn
        self._nonce = 0

    def start_bundle(self) -> None:
        self._nonce = random.getrandbits(31)

    def process(self, element: Any) -> Iterator[Any]:
        try:
            key, value = element
        except (TypeError, ValueError):
            msg = f"{self.owner} expects (key, value) pairs, got {element!r}"
            raise TypeError(msg) from None
        fanout = self.fanout_fn(key)
        if isinstance(fanout, bool) or not isinstance(fanout, int):
            msg = f"{self.owner}: the fanout function must return an int for key {key!r}, got {fanout!r}"
            raise TypeError(msg)
        if fanout <= 1:
            yield (key, (False, value))
        else:
            yield pvalue.TaggedOutput("hot", ((self._nonce % fanout, key), value))


class _PreCombineFn(CombineFn):
    """The intermediate level: the user's CombineFn, whose output is its accumulator."""

    def __init__(self, combine_fn: CombineFn, args: tuple, kwargs: dict) -> None:
        self.combine_fn = combine_fn
        self.args = args
        self.kwargs = kwargs

    def default_label(self) -> str:
        return f"PreCombine({self.combine_fn.default_label()})"

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.combine_fn.setup(*self.args, **self.kwargs)

    def create_accumulator(self, *args: Any, **kwargs: Any) -> Any:
        return self.combine_fn.create_accumulator(*self.args, **self.kwargs)

    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        return self.combine_fn.add_input(mutable_accumulator, element, *self.args, **self.kwargs)

    def add_inputs(self, mutable_accumulator: Any, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return self.combine_fn.add_inputs(mutable_accumulator, elements, *self.args, **self.kwargs)

    def merge_accumulators(self, accumulators: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return self.combine_fn.merge_accumulators(accumulators, *self.args, **self.kwargs)

    def compact(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self.combine_fn.compact(accumulator, *self.args, **self.kwargs)

    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> tuple:
        return (True, accumulator)  # True: an accumulator, for the final combine to merge

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self.combine_fn.teardown(*self.args, **self.kwargs)


class _PostCombineFn(_PreCombineFn):
    """The final level: merges the intermediate accumulators and adds the cold values."""

    def default_label(self) -> str:
        return f"PostCombine({self.combine_fn.default_label()})"

    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        is_accumulator, value = element
        fn = self.combine_fn
        if is_accumulator:
            return fn.merge_accumulators([mutable_accumulator, value], *self.args, **self.kwargs)
        return fn.add_input(mutable_accumulator, value, *self.args, **self.kwargs)

    def add_inputs(self, mutable_accumulator: Any, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        for element in elements:
            mutable_accumulator = self.add_input(mutable_accumulator, element)
        return mutable_accumulator

    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self.combine_fn.extract_output(accumulator, *self.args, **self.kwargs)


def _strip_nonce(element: tuple) -> tuple:
    (_, key), accumulator = element
    return key, accumulator


class _ConstantFanout:
    def __init__(self, fanout: int) -> None:
        self.fanout = fanout

    def __call__(self, key: Any) -> int:
        return self.fanout


class _CombinePerKeyWithHotKeyFanout(PTransform):
    """``CombinePerKey(fn).with_hot_key_fanout(fanout)``: see ``CombinePerKey.with_hot_key_fanout``.

    The intermediate combine keeps each element's windows and trigger, in discarding mode
    (so that an accumulating pane is not counted twice by the final combine); its outputs
    stay in the windows they were combined in, and the final combine uses the input's
    windowing. This is Beam Java's construction (``setWindowingStrategyInternal``); Beam's
    Python SDK re-assigns the intermediate outputs with ``WindowInto``, which moves them to
    another window under ``Sessions`` (see the README's differences).
    """

    def __init__(self, combine_fn: CombineFn, fanout: int | Callable[[Any], int], args: tuple, kwargs: dict) -> None:
        super().__init__()
        if isinstance(fanout, bool) or not (isinstance(fanout, int) or callable(fanout)):
            msg = (
                f"CombinePerKey({combine_fn.default_label()}).with_hot_key_fanout: fanout must be an int "
                f"or a function of the key returning one, got {fanout!r}"
            )
            raise TypeError(msg)
        self.combine_fn = combine_fn
        self.fanout = fanout
        self.fanout_fn: Callable[[Any], int] = _ConstantFanout(fanout) if isinstance(fanout, int) else fanout
        self.args = args
        self.kwargs = kwargs

    def default_label(self) -> str:
        fanout = self.fanout if isinstance(self.fanout, int) else label_from_callable(self.fanout)
        return f"CombinePerKey({self.combine_fn.default_label()}, fanout={fanout})"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        windowing = pcoll.windowing
        owner = pcoll.pipeline.current_transform().full_label
        cold, hot = pcoll | "SplitHotCold" >> ParDo(_SplitHotCold(owner, self.fanout_fn)).with_outputs("hot", main="cold")
        hot.windowing = attrs.evolve(windowing, accumulation_mode=AccumulationMode.DISCARDING)
        precombined = (
            hot
            | "PreCombineHot" >> CombinePerKey(_PreCombineFn(self.combine_fn, self.args, self.kwargs))
            | "StripNonce" >> Map(_strip_nonce)
        )
        precombined.windowing = windowing
        return (
            (cold, precombined)
            | "FlattenHotCold" >> Flatten()
            | "PostCombine" >> CombinePerKey(_PostCombineFn(self.combine_fn, self.args, self.kwargs))
        )


def _void_key(value: Any) -> tuple:
    return (None, value)


def _drop_key(pair: tuple) -> Any:
    return pair[1]


class _InjectDefault(DoFn):
    """Emits the combined value, or the CombineFn's value over no input when there is none
    (given the CombineFn's extra arguments, side inputs read in the global window)."""

    def __init__(self, combine_fn: CombineFn) -> None:
        self.combine_fn = combine_fn

    def process(self, unused_element: Any, combined: list, *args: Any, **kwargs: Any) -> Any:
        if combined:
            return combined
        return [self.combine_fn.apply([], *args, **kwargs)]


class CombineGlobally(PTransform):
    """Combine every element of each window into one value.

    In the global window an empty input gives ``fn`` over no elements (``sum`` gives 0),
    unless ``.without_defaults()`` asks for no output instead, as in Beam.
    """

    def __init__(self, fn: CombineFn | Callable, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.combine_fn = CombineFn.maybe_from_callable(fn)
        self.args = args
        self.kwargs = kwargs
        self.has_defaults = True
        self.as_view = False
        self.fanout: int | None = None

    def default_label(self) -> str:
        return f"CombineGlobally({self.combine_fn.default_label()})"

    def default_type_hints(self) -> IOTypeHints | None:
        # The input as the CombineFn declares it; the output stays undeclared (Beam's is Any).
        return IOTypeHints(self.combine_fn.get_type_hints().input_types, None)

    def without_defaults(self) -> CombineGlobally:
        self.has_defaults = False
        return self

    def with_defaults(self, has_defaults: bool = True) -> CombineGlobally:
        self.has_defaults = has_defaults
        return self

    def with_fanout(self, fanout: int | None) -> CombineGlobally:
        """Combine in two levels: first in ``fanout`` parts, then those partial results
        (``CombinePerKey.with_hot_key_fanout`` on the single key), as Beam does.
        A CombineFn with side inputs refuses a fanout (see ``with_hot_key_fanout``)."""
        if fanout is not None and (isinstance(fanout, bool) or not isinstance(fanout, int)):
            msg = f"{self.default_label()}.with_fanout: fanout must be an int, got {fanout!r}"
            raise TypeError(msg)
        self.fanout = fanout
        return self

    def as_singleton_view(self) -> CombineGlobally:
        """Applied, gives the combined value as a side input (``AsSingleton``) instead of a
        PCollection: ``total = pcoll | CombineGlobally(sum).as_singleton_view()``. With
        defaults (the default), a window with no input reads the CombineFn's empty value."""
        self.as_view = True
        return self

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        combined = (
            pcoll
            | "KeyWithVoid" >> Map(_void_key)
            | "CombinePerKey" >> CombinePerKey(self.combine_fn, *self.args, **self.kwargs).with_hot_key_fanout(self.fanout)
            | "UnKey" >> Map(_drop_key)
        )
        if self.as_view:
            if not self.has_defaults:
                return pvalue.AsSingleton(combined)
            if _has_side_inputs(self.args, self.kwargs):
                msg = (
                    f"{pcoll.pipeline.current_transform().full_label}: as_singleton_view() computes the "
                    "view's value for an empty window when the pipeline is built, before any side "
                    "input of the CombineFn exists; add .without_defaults()"
                )
                raise PipelineConstructionError(msg)
            # Evaluated here, as Beam does: the view's value for a window with no input.
            self.combine_fn.setup(*self.args, **self.kwargs)
            try:
                empty = self.combine_fn.apply([], *self.args, **self.kwargs)
            finally:
                self.combine_fn.teardown(*self.args, **self.kwargs)
            return pvalue.AsSingleton(combined, default_value=empty)
        if not self.has_defaults:
            return combined
        if not isinstance(pcoll.windowing.windowfn, GlobalWindows):
            msg = (
                f"{pcoll.pipeline.current_transform().full_label}: CombineGlobally outside the global "
                "window has no default value for an empty window; use "
                "CombineGlobally(...).without_defaults()"
            )
            raise PipelineConstructionError(msg)
        return (
            pcoll.pipeline
            | "DoOnce" >> Create([None])
            | "InjectDefault" >> ParDo(_InjectDefault(self.combine_fn), pvalue.AsList(combined), *self.args, **self.kwargs)
        )
