"""Beam's combiners: counts, means, tops, samples, collections and latest values.

Reachable as ``sparkbeam.combiners`` and ``sparkbeam.transforms.combiners``, with Beam's
names. Every transform here is a composite of ``CombineGlobally`` or ``CombinePerKey``
(themselves ``GroupByKey`` plus a ``ParDo``), so the Spark runner lifts the CombineFn into a
partial combine before the shuffle; the CombineFns are public so they can be used alone.

>>> import sparkbeam as beam
>>> with beam.Pipeline() as p:                                  # doctest: +SKIP
...     words = p | beam.Create(["a", "b", "a"])
...     counts = words | beam.combiners.Count.PerElement()     # ("a", 2), ("b", 1)
...     top = words | beam.combiners.Top.Of(2)                 # ["b", "a"]

Defaults follow Beam: a global combine of an empty input in the global window outputs the
CombineFn's value over nothing (0 for a count, ``nan`` for a mean, ``[]`` for a list)
unless ``.without_defaults()``; outside the global window a global combine needs
``.without_defaults()``. ``Top.Of`` over the default windowing always outputs a list,
empty for an empty input, stamped at the end of the global window, as Beam's does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.combine import CombineFn, CombineGlobally, CombinePerKey
from sparkbeam.core import Create, DoFn, FlatMap, Flatten, Map
from sparkbeam.ptransform import PTransform, ptransform_fn
from sparkbeam.transforms._combine_fns import (
    ConcatListCombineFn,
    CountCombineFn,
    Largest,
    LatestCombineFn,
    MeanCombineFn,
    SampleCombineFn,
    SingleInputTupleCombineFn,
    Smallest,
    ToDictCombineFn,
    ToListCombineFn,
    TopCombineFn,
    ToSetCombineFn,
    TupleCombineFn,
    _check_count,
    _FirstNCombineFn,
    _SkipUnseen,
    _Unseen,
)
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import with_input_types, with_output_types

__all__ = [
    "CombinerWithoutDefaults",
    "ConcatListCombineFn",
    "Count",
    "CountCombineFn",
    "Largest",
    "Latest",
    "LatestCombineFn",
    "LiftedCombinePerKey",
    "Mean",
    "MeanCombineFn",
    "Sample",
    "SampleCombineFn",
    "SingleInputTupleCombineFn",
    "Smallest",
    "ToDict",
    "ToDictCombineFn",
    "ToList",
    "ToListCombineFn",
    "ToSet",
    "ToSetCombineFn",
    "Top",
    "TopCombineFn",
    "TupleCombineFn",
]

# Element types as Beam's combiners declare them (checked when the pipeline is built).
_T = typehints.TypeVariable("T")
_K = typehints.TypeVariable("K")
_V = typehints.TypeVariable("V")


class CombinerWithoutDefaults(PTransform):
    """A global combiner that, like ``CombineGlobally``, can drop its empty-input default."""

    def __init__(self, has_defaults: bool = True) -> None:
        super().__init__()
        self.has_defaults = has_defaults

    def with_defaults(self, has_defaults: bool = True) -> CombinerWithoutDefaults:
        changed = copy.copy(self)
        changed.has_defaults = has_defaults
        return changed

    def without_defaults(self) -> CombinerWithoutDefaults:
        return self.with_defaults(False)

    def default_label(self) -> str:
        return type(self).__qualname__

    def _globally(self, combine_fn: CombineFn) -> CombineGlobally:
        combine = CombineGlobally(combine_fn)
        return combine if self.has_defaults else combine.without_defaults()


class _Keyed(PTransform):
    """A per-key or per-element combiner: labelled ``Count.PerKey`` rather than ``PerKey``."""

    def default_label(self) -> str:
        return type(self).__qualname__


# -- counting and averaging (the CombineFns live in _combine_fns) -----------------------------


def _pair_with_none(element: Any) -> tuple:
    return (element, None)


class Count:
    """Counting: ``Count.Globally()``, ``Count.PerKey()``, ``Count.PerElement()``.

    >>> p | beam.Create([("a", 1), ("a", 2)]) | Count.PerKey()   # doctest: +SKIP
    ("a", 2)
    """

    @with_input_types(_T)
    @with_output_types(int)
    class Globally(CombinerWithoutDefaults):
        """The number of elements (per window): ``[x, y, z] -> 3``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | self._globally(CountCombineFn())

    @with_input_types(typehints.Tuple[_K, _V])
    @with_output_types(typehints.Tuple[_K, int])
    class PerKey(_Keyed):
        """The number of values of each key: ``(k, v)... -> (k, n)``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | CombinePerKey(CountCombineFn())

    @with_input_types(_T)
    @with_output_types(typehints.Tuple[_T, int])
    class PerElement(_Keyed):
        """How often each distinct element occurs: ``x... -> (x, n)``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | "PairWithVoid" >> Map(_pair_with_none) | CombinePerKey(CountCombineFn())


class Mean:
    """Averages: ``Mean.Globally()`` and ``Mean.PerKey()``.

    >>> p | beam.Create([1, 2, 6]) | Mean.Globally()             # doctest: +SKIP
    3.0
    """

    class Globally(CombinerWithoutDefaults):
        """The mean of all elements (per window); ``nan`` for an empty input."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | self._globally(MeanCombineFn())

    class PerKey(_Keyed):
        """The mean of each key's values: ``(k, v)... -> (k, mean)``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | CombinePerKey(MeanCombineFn())


# -- the greatest elements ------------------------------------------------------------------


def _key_with_none(element: Any) -> tuple:
    return (None, element)


def _drop_key(pair: tuple) -> Any:
    return pair[1]


class Top:
    """The greatest (or least) elements, globally or per key.

    ``key`` and ``reverse`` mean what they mean for ``sorted``; results come greatest
    first (least first with ``reverse=True``).

    >>> p | beam.Create([3, 1, 4, 1, 5]) | Top.Of(2)                # doctest: +SKIP
    [5, 4]
    >>> p | beam.Create([("a", 3), ("a", 1)]) | Top.SmallestPerKey(1)   # doctest: +SKIP
    ("a", [1])
    """

    @with_input_types(_T)
    @with_output_types(typehints.List[_T])
    class Of(CombinerWithoutDefaults):
        """A list of the ``n`` greatest elements (per window)."""

        def __init__(self, n: int, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
            super().__init__()
            self._n = _check_count("Top.Of", n)
            self._key = key
            self._reverse = reverse

        def default_label(self) -> str:
            return f"Top({self._n})"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            combine_fn = TopCombineFn(self._n, self._key, self._reverse)
            if not pcoll.windowing.is_default():
                return pcoll | self._globally(combine_fn)
            # Beam's global Top always outputs (even without defaults), stamped at the end
            # of the global window: one keyed grouping fed an extra "unseen" seed does that.
            keyed = pcoll | "KeyWithNone" >> Map(_key_with_none)
            seed = pcoll.pipeline | "Seed" >> Create([(None, _Unseen())])
            return (
                (keyed, seed)
                | "WithSeed" >> Flatten()
                | "Combine" >> CombinePerKey(_SkipUnseen(combine_fn))
                | "UnKey" >> Map(_drop_key)
            )

    @with_input_types(typehints.Tuple[_K, _V])
    @with_output_types(typehints.Tuple[_K, typehints.List[_V]])
    class PerKey(_Keyed):
        """``(k, [the n greatest values of k])`` for each key."""

        def __init__(self, n: int, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
            super().__init__()
            self._n = _check_count("Top.PerKey", n)
            self._key = key
            self._reverse = reverse

        def default_label(self) -> str:
            return f"TopPerKey({self._n})"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | CombinePerKey(TopCombineFn(self._n, self._key, self._reverse))

    @staticmethod
    @ptransform_fn
    def Largest(pcoll: pvalue.PCollection, n: int, has_defaults: bool = True, key: Any = None) -> pvalue.PCollection:
        """The ``n`` greatest elements, greatest first."""
        return pcoll | Top.Of(n, key).with_defaults(has_defaults)

    @staticmethod
    @ptransform_fn
    def Smallest(pcoll: pvalue.PCollection, n: int, has_defaults: bool = True, key: Any = None) -> pvalue.PCollection:
        """The ``n`` least elements, least first."""
        return pcoll | Top.Of(n, key, reverse=True).with_defaults(has_defaults)

    @staticmethod
    @ptransform_fn
    def LargestPerKey(pcoll: pvalue.PCollection, n: int, key: Any = None) -> pvalue.PCollection:
        """``(k, [the n greatest values of k])``."""
        return pcoll | Top.PerKey(n, key)

    @staticmethod
    @ptransform_fn
    def SmallestPerKey(pcoll: pvalue.PCollection, n: int, *, key: Any = None) -> pvalue.PCollection:
        """``(k, [the n least values of k])``."""
        return pcoll | Top.PerKey(n, key, reverse=True)


# -- sampling ----------------------------------------------------------------------------------


def _each(elements: list) -> list:
    return elements


class Sample:
    """Samples: ``Sample.FixedSizeGlobally(n)``, ``Sample.FixedSizePerKey(n)``, ``Sample.Any(n)``.

    >>> p | beam.Create(range(100)) | Sample.FixedSizeGlobally(3)   # doctest: +SKIP
    [17, 82, 5]
    """

    class FixedSizeGlobally(CombinerWithoutDefaults):
        """A list of ``n`` elements drawn uniformly without replacement (per window)."""

        def __init__(self, n: int) -> None:
            super().__init__()
            self._n = _check_count("Sample.FixedSizeGlobally", n)

        def default_label(self) -> str:
            return f"FixedSizeGlobally({self._n})"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | self._globally(SampleCombineFn(self._n))

    class FixedSizePerKey(_Keyed):
        """``(k, [n of k's values drawn uniformly without replacement])``."""

        def __init__(self, n: int) -> None:
            super().__init__()
            self._n = _check_count("Sample.FixedSizePerKey", n)

        def default_label(self) -> str:
            return f"FixedSizePerKey({self._n})"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | CombinePerKey(SampleCombineFn(self._n))

    class Any(PTransform):
        """Up to ``n`` arbitrary elements (per window), as elements, not as one list."""

        def __init__(self, n: int) -> None:
            super().__init__()
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                msg = f"Sample.Any: n must be a non-negative int, got {n!r}"
                raise ValueError(msg)
            self._n = n

        def default_label(self) -> str:
            return f"Any({self._n})"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return (
                pcoll
                | CombineGlobally(_FirstNCombineFn(self._n)).without_defaults()
                | "Each" >> FlatMap(_each)
            )


@with_input_types(_T)
@with_output_types(typehints.List[_T])
class ToList(CombinerWithoutDefaults):
    """Every element (per window) in one list: ``[x, y] -> [[x, y]]``.

    >>> p | beam.Create([1, 2]) | ToList()                         # doctest: +SKIP
    [1, 2]
    """

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | self._globally(ToListCombineFn())


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(typehints.Dict[_K, _V])
class ToDict(CombinerWithoutDefaults):
    """(key, value) elements (per window) in one dict; one value survives per key.

    >>> p | beam.Create([("a", 1), ("b", 2)]) | ToDict()           # doctest: +SKIP
    {"a": 1, "b": 2}
    """

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | self._globally(ToDictCombineFn())


@with_input_types(_T)
@with_output_types(typehints.Set[_T])
class ToSet(CombinerWithoutDefaults):
    """The distinct elements (per window) in one set.

    >>> p | beam.Create([1, 1, 2]) | ToSet()                       # doctest: +SKIP
    {1, 2}
    """

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | self._globally(ToSetCombineFn())


# -- the latest element --------------------------------------------------------------------------


def _with_timestamp(element: Any, timestamp: Any = DoFn.TimestampParam) -> tuple:
    return (element, timestamp)


def _value_with_timestamp(element: tuple, timestamp: Any = DoFn.TimestampParam) -> tuple:
    key, value = element
    return (key, (value, timestamp))


class Latest:
    """The element with the latest event timestamp: ``Latest.Globally()``, ``Latest.PerKey()``.

    >>> stamped | Latest.PerKey()                                   # doctest: +SKIP
    ("a", "the value of a with the latest timestamp")
    """

    class Globally(CombinerWithoutDefaults):
        """The latest element (per window); ``None`` for an empty input."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | "AddTimestamp" >> Map(_with_timestamp) | self._globally(LatestCombineFn())

    class PerKey(_Keyed):
        """``(k, the value of k with the latest timestamp)``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | "AddTimestamp" >> Map(_value_with_timestamp) | CombinePerKey(LatestCombineFn())


class LiftedCombinePerKey(PTransform):
    """Beam's explicitly lifted ``CombinePerKey``; here the runner lifts ``CombinePerKey`` itself."""

    def __init__(self, combine_fn: CombineFn | Callable, args: tuple = (), kwargs: dict | None = None) -> None:
        super().__init__()
        self._combine_fn = combine_fn
        self._args = tuple(args)
        self._kwargs = dict(kwargs or {})

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | CombinePerKey(self._combine_fn, *self._args, **self._kwargs)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.combiners")
