"""Approximate statistics with Beam's names: ``ApproximateQuantiles`` and ``ApproximateUnique``.

Both are ``CombineFn``s, so they combine partially before the shuffle like any combiner.

>>> p | beam.Create(range(101)) | ApproximateQuantiles.Globally(5)     # doctest: +SKIP
[0, 25, 50, 75, 100]
>>> p | beam.Create("abcab") | ApproximateUnique.Globally(size=16)      # doctest: +SKIP
3

``ApproximateQuantiles`` implements Manku, Rajagopalan and Lindsay's one-pass algorithm
("Approximate Medians and other Quantiles in One Pass and with Limited Memory", SIGMOD
1998) with Beam's parameters: for N elements the rank of each quantile returned is within
``epsilon * N`` of the exact one (``epsilon`` is ``1 / num_quantiles``, and for weighted
input ``min(0.01, 1 / num_quantiles)``), as long as N is below a billion. While the input
fits in its buffers (fewer than ``buffer_size * (num_buffers + 1)`` elements per key and
window: 810 for 2 quantiles, 1,560 for 5, 3,000 for 10, 20,988 for 100 or weighted) no
buffer is collapsed, and the result is exact and equal to Beam's; beyond that, which
elements are kept depends on how the input was split into bundles, in Beam as here. ``ApproximateUnique`` keeps the ``size`` largest 64-bit hashes of the elements'
deterministic encodings (``FastPrimitivesCoder``) and extrapolates; its result depends only
on the set of elements, and is Beam's (both hash with MurmurHash3 if ``mmh3`` is installed,
else with MD5). Its estimation error is about ``2 / sqrt(size)``.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.coders.coders import Coder, FastPrimitivesCoder
from sparkbeam.combine import CombineFn, CombineGlobally, CombinePerKey
from sparkbeam.ptransform import PTransform
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import with_input_types, with_output_types

__all__ = ["ApproximateQuantiles", "ApproximateUnique"]

_T = typehints.TypeVariable("T")
_K = typehints.TypeVariable("K")
_V = typehints.TypeVariable("V")


# -- ApproximateUnique ---------------------------------------------------------------------------


def _hash_function() -> Callable[[bytes], int]:
    """A 64-bit fingerprint of bytes: MurmurHash3 when mmh3 is installed, else MD5 (as Beam)."""
    try:
        import mmh3
    except ImportError:
        return _md5_fingerprint
    return lambda data: mmh3.hash64(data, seed=0, signed=False)[0]


def _md5_fingerprint(data: bytes) -> int:
    return int(hashlib.md5(data).hexdigest()[:16], 16)


class _LargestHashes:
    """The ``sample_size`` largest distinct hashes seen (a min-heap and a set of them)."""

    _HASH_SPACE = 2.0**64

    def __init__(self, sample_size: int) -> None:
        self.sample_size = sample_size
        self.heap: list[int] = []
        self.members: set[int] = set()

    def add(self, value: int) -> None:
        if value in self.members:
            return
        if len(self.heap) < self.sample_size:
            heapq.heappush(self.heap, value)
            self.members.add(value)
        elif value > self.heap[0]:
            self.members.discard(heapq.heappushpop(self.heap, value))
            self.members.add(value)

    def estimate(self) -> int:
        """Exact below ``sample_size`` hashes; else extrapolated from how densely the kept
        hashes fill the top of the hash space (with the collision correction)."""
        if len(self.heap) < self.sample_size:
            return len(self.heap)
        sample_space = self._HASH_SPACE - float(self.heap[0])
        estimate = (
            math.log1p(-self.sample_size / sample_space) / math.log1p(-1 / sample_space)
            * self._HASH_SPACE / sample_space
        )
        return round(estimate)


class ApproximateUniqueCombineFn(CombineFn):
    """Estimates how many distinct elements were combined, from a sample of their hashes."""

    def __init__(self, sample_size: int, coder: Coder | None = None) -> None:
        self._sample_size = sample_size
        coder = coder if coder is not None else FastPrimitivesCoder()
        self._coder = coder.as_deterministic_coder(
            "ApproximateUniqueCombineFn",
            f"ApproximateUnique hashes each element's encoding, so its coder must be deterministic; {coder!r} is not",
        )
        self._hash = _hash_function()

    def __getstate__(self) -> dict:
        return {"sample_size": self._sample_size, "coder": self._coder}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["sample_size"], state["coder"])  # type: ignore[misc]

    def create_accumulator(self, *args: Any, **kwargs: Any) -> _LargestHashes:
        return _LargestHashes(self._sample_size)

    def add_input(self, accumulator: _LargestHashes, element: Any, *args: Any, **kwargs: Any) -> _LargestHashes:
        accumulator.add(self._hash(self._coder.encode(element)))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[_LargestHashes], *args: Any, **kwargs: Any) -> _LargestHashes:
        merged = self.create_accumulator()
        for accumulator in accumulators:
            for value in accumulator.heap:
                merged.add(value)
        return merged

    def extract_output(self, accumulator: _LargestHashes, *args: Any, **kwargs: Any) -> int:
        return accumulator.estimate()


class ApproximateUnique:
    """The approximate number of distinct elements: ``Globally`` or ``PerKey``, given either
    a sample ``size`` (at least 16) or a target ``error`` (0.01 to 0.5)."""

    @staticmethod
    def parse_input_params(size: int | None = None, error: float | None = None) -> int:
        """The sample size: ``size`` itself, or ``ceil(4 / error**2)``."""
        if size is not None and error is not None:
            msg = f"ApproximateUnique: give either size or error, not both (got size={size}, error={error})"
            raise ValueError(msg)
        if size is None and error is None:
            msg = "ApproximateUnique: give either size (the sample size, at least 16) or error (0.01 to 0.5)"
            raise ValueError(msg)
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 16:
                msg = (
                    "ApproximateUnique needs a size >= 16 for an error <= 0.50. In general, the "
                    f"estimation error is about 2 / sqrt(sample_size). Received size={size!r}."
                )
                raise ValueError(msg)
            return size
        if not isinstance(error, (int, float)) or not 0.01 <= error <= 0.5:
            msg = f"ApproximateUnique needs an estimation error between 0.01 and 0.50. Received error={error!r}."
            raise ValueError(msg)
        return math.ceil(4.0 / error**2)

    @with_input_types(_T)
    @with_output_types(int)
    class Globally(PTransform):
        """The approximate number of distinct elements (per window)."""

        def __init__(self, size: int | None = None, error: float | None = None) -> None:
            super().__init__()
            self._sample_size = ApproximateUnique.parse_input_params(size, error)

        def default_label(self) -> str:
            return "ApproximateUnique.Globally"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | "CountGlobalUniqueValues" >> CombineGlobally(ApproximateUniqueCombineFn(self._sample_size))

    @with_input_types(typehints.Tuple[_K, _V])
    @with_output_types(typehints.Tuple[_K, int])
    class PerKey(PTransform):
        """The approximate number of distinct values of each key (per window)."""

        def __init__(self, size: int | None = None, error: float | None = None) -> None:
            super().__init__()
            self._sample_size = ApproximateUnique.parse_input_params(size, error)

        def default_label(self) -> str:
            return "ApproximateUnique.PerKey"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | "CountPerKeyUniqueValues" >> CombinePerKey(ApproximateUniqueCombineFn(self._sample_size))


# -- ApproximateQuantiles ------------------------------------------------------------------------


@attrs.frozen
class _QuantileSpec:
    """What every buffer shares: its size (k), how many may exist (b), and the order."""

    buffer_size: int
    num_buffers: int
    weighted: bool
    key: Callable[[Any], Any] | None
    reverse: bool

    def before(self, a: Any, b: Any) -> bool:
        """Whether ``a`` comes before ``b`` in the order quantiles are taken in."""
        if self.key is not None:
            a, b = self.key(a), self.key(b)
        return a > b if self.reverse else a < b

    def sorted_pairs(self, pairs: Iterable[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """(element, weight) pairs in order (by the key of the element when there is one)."""
        key = self.key
        return sorted(pairs, key=None if key is None else lambda pair: key(pair[0]), reverse=self.reverse)

    def sorted_positions(self, elements: Sequence[Any], positions: Iterable[int]) -> list[int]:
        key = self.key
        by = elements.__getitem__ if key is None else (lambda index: key(elements[index]))
        return sorted(positions, key=by, reverse=self.reverse)


@attrs.define
class _Buffer:
    """A sorted buffer: each element stands for ``weight`` input elements (MRL98's buffer).

    Unweighted buffers share one weight (``weights == [w]``); weighted ones have a weight
    per element. ``level`` counts how many collapses made it.
    """

    elements: list
    weights: list
    weighted: bool
    level: int = 0
    min_val: Any = None
    max_val: Any = None

    def __attrs_post_init__(self) -> None:
        if self.min_val is None or self.max_val is None:
            self.min_val, self.max_val = self.elements[0], self.elements[-1]

    def pairs(self) -> Iterable[tuple[Any, Any]]:
        return zip(self.elements, self.weights if self.weighted else itertools.repeat(self.weights[0]))

    def total_weight(self) -> float:
        return sum(self.weights) if self.weighted else len(self.elements) * self.weights[0]

    def __lt__(self, other: _Buffer) -> bool:  # the heap of buffers is by level
        return self.level < other.level


class _QuantileState:
    """The accumulator: elements not yet in a buffer, and the buffers (a heap by level)."""

    def __init__(self, spec: _QuantileSpec) -> None:
        self.spec = spec
        self.unbuffered: list = []
        self.unbuffered_weights: list = []
        self.buffers: list[_Buffer] = []

    def is_empty(self) -> bool:
        return not self.unbuffered and not self.buffers

    def add(self, elements: Sequence[Any], weights: Sequence[Any] | None, offset: Callable[[float], float]) -> None:
        """Append elements (with their weights when weighted); every full ``buffer_size``
        becomes a sorted level-0 buffer, then buffers collapse while there are too many."""
        spec = self.spec
        self.unbuffered.extend(elements)
        if spec.weighted:
            self.unbuffered_weights.extend(weights or ())
        size = spec.buffer_size
        full = len(self.unbuffered) // size
        for index in range(full):
            positions = range(index * size, (index + 1) * size)
            if spec.weighted:
                order = spec.sorted_positions(self.unbuffered, positions)
                buffer = _Buffer([self.unbuffered[i] for i in order], [self.unbuffered_weights[i] for i in order], True)
            else:
                chunk = self.unbuffered[positions.start : positions.stop]
                buffer = _Buffer(sorted(chunk, key=spec.key, reverse=spec.reverse), [1], False)
            heapq.heappush(self.buffers, buffer)
        if full:
            self.unbuffered = self.unbuffered[full * size :]
            if spec.weighted:
                self.unbuffered_weights = self.unbuffered_weights[full * size :]
        self.collapse_if_needed(offset)

    def collapse_if_needed(self, offset: Callable[[float], float]) -> None:
        """MRL98's COLLAPSE: while there are more than ``num_buffers`` buffers, merge the two
        of lowest level (and any others at that level) into one of the next level."""
        while len(self.buffers) > self.spec.num_buffers:
            merging = [heapq.heappop(self.buffers), heapq.heappop(self.buffers)]
            level = merging[1].level
            while self.buffers and self.buffers[0].level <= level:
                merging.append(heapq.heappop(self.buffers))
            heapq.heappush(self.buffers, _collapse(merging, offset, self.spec))

    def with_remainder(self) -> list[_Buffer]:
        """The buffers plus one of the elements not yet buffered (the state is not changed)."""
        spec = self.spec
        if not self.unbuffered:
            return list(self.buffers)
        if spec.weighted:
            order = spec.sorted_positions(self.unbuffered, range(len(self.unbuffered)))
            rest = _Buffer([self.unbuffered[i] for i in order], [self.unbuffered_weights[i] for i in order], True)
        else:
            rest = _Buffer(sorted(self.unbuffered, key=spec.key, reverse=spec.reverse), [1], False)
        return [*self.buffers, rest]


def _collapse(buffers: list[_Buffer], offset: Callable[[float], float], spec: _QuantileSpec) -> _Buffer:
    level = max(buffer.level for buffer in buffers) + 1
    weight = sum(sum(buffer.weights) for buffer in buffers)
    if spec.weighted:
        step = weight / (spec.buffer_size - 1)
        start = weight / (2 * spec.buffer_size)
    else:
        step = weight
        start = offset(weight)
    elements, weights, min_val, max_val = _pick(buffers, spec.buffer_size, step, start, spec)
    return _Buffer(elements, weights if spec.weighted else [weight], spec.weighted, level, min_val, max_val)


def _pick(buffers: list[_Buffer], count: int, step: float, start: float, spec: _QuantileSpec) -> tuple[list, list, Any, Any]:
    """The elements at weighted positions ``start + j * step`` (``0 <= j < count``) of the
    ordered union of ``buffers``, each element repeated as often as its weight; with their
    weights (the weight each one now stands for) and the smallest and largest element."""
    min_val, max_val = buffers[0].min_val, buffers[0].max_val
    for buffer in buffers:
        if spec.before(buffer.min_val, min_val):
            min_val = buffer.min_val
        if spec.before(max_val, buffer.max_val):
            max_val = buffer.max_val
    ordered = spec.sorted_pairs(itertools.chain.from_iterable(buffer.pairs() for buffer in buffers))
    if not spec.weighted:
        weight = buffers[0].weights[0]
        if all(buffer.weights[0] == weight for buffer in buffers):
            # Every element stands for the same weight: positions are plain indices.
            index_step, first_index = step / weight, start / weight
            last = len(ordered) - 1
            return [ordered[min(int(j * index_step + first_index), last)][0] for j in range(count)], [], min_val, max_val
    picked: list = []
    picked_weights: list = []
    position = 0
    element, cumulative = ordered[0]
    cumulative_before = 0
    for j in range(count):
        target = j * step + start
        while cumulative <= target and position + 1 < len(ordered):
            position += 1
            element = ordered[position][0]
            cumulative += ordered[position][1]
        picked.append(element)
        if spec.weighted:
            picked_weights.append(cumulative - cumulative_before)
            cumulative_before = cumulative
    return picked, picked_weights, min_val, max_val


class ApproximateQuantilesCombineFn(CombineFn):
    """``num_quantiles`` elements: the smallest, ``num_quantiles - 2`` evenly spaced ones, and
    the largest, in the order of ``key`` (reversed with ``reverse``).

    With ``weighted`` each input is ``(element, weight)``; with ``input_batched`` each input
    is a list of elements (or, weighted, a pair of lists: elements and weights). Build it
    with ``create(num_quantiles, epsilon=, max_num_elements=)``, which sizes the buffers as
    Beam does (see the module's note on accuracy).
    """

    _MAX_NUM_ELEMENTS = 1e9

    def __init__(
        self,
        num_quantiles: int,
        buffer_size: int,
        num_buffers: int,
        key: Callable[[Any], Any] | None = None,
        reverse: bool = False,
        weighted: bool = False,
        input_batched: bool = False,
    ) -> None:
        if isinstance(num_quantiles, bool) or not isinstance(num_quantiles, int) or num_quantiles < 2:
            msg = f"ApproximateQuantiles: num_quantiles must be an int of at least 2 (the smallest and the largest), got {num_quantiles!r}"
            raise ValueError(msg)
        if key is not None and not callable(key):
            msg = f"ApproximateQuantiles: key must be a function of an element, got {key!r}"
            raise TypeError(msg)
        self._num_quantiles = num_quantiles
        self._spec = _QuantileSpec(buffer_size, num_buffers, bool(weighted), key, bool(reverse))
        self._input_batched = bool(input_batched)
        # Rounding of even weights alternates between up and down, so that no side is favoured.
        self._round_up_next = True

    @classmethod
    def create(
        cls,
        num_quantiles: int,
        epsilon: float | None = None,
        max_num_elements: float | None = None,
        key: Callable[[Any], Any] | None = None,
        reverse: bool = False,
        weighted: bool = False,
        input_batched: bool = False,
    ) -> ApproximateQuantilesCombineFn:
        """Buffers sized so that each quantile's rank is off by less than ``epsilon * N`` for
        up to ``max_num_elements`` (default 1e9) elements: the fewest buffers b with
        ``(b - 2) * 2**(b - 2) >= epsilon * max_num_elements``, less one, each holding
        ``max_num_elements / 2**(b - 1)`` elements (MRL98's parameters, as Beam)."""
        if isinstance(num_quantiles, bool) or not isinstance(num_quantiles, int) or num_quantiles < 2:
            msg = f"ApproximateQuantiles: num_quantiles must be an int of at least 2 (the smallest and the largest), got {num_quantiles!r}"
            raise ValueError(msg)
        max_elements = max_num_elements or cls._MAX_NUM_ELEMENTS
        if not epsilon:
            epsilon = min(1e-2, 1.0 / num_quantiles) if weighted else 1.0 / num_quantiles
        buffers = 2
        while (buffers - 2) * (1 << (buffers - 2)) < epsilon * max_elements:
            buffers += 1
        buffers -= 1
        size = max(2, math.ceil(max_elements / float(1 << (buffers - 1))))
        return cls(num_quantiles, size, buffers, key=key, reverse=reverse, weighted=weighted, input_batched=input_batched)

    def _offset(self, weight: float) -> float:
        if weight % 2 == 1:
            return (weight + 1) / 2
        self._round_up_next = not self._round_up_next
        return (weight + (0 if self._round_up_next else 2)) / 2

    def create_accumulator(self, *args: Any, **kwargs: Any) -> _QuantileState:
        return _QuantileState(self._spec)

    def add_input(self, accumulator: _QuantileState, element: Any, *args: Any, **kwargs: Any) -> _QuantileState:
        weighted = self._spec.weighted
        if self._input_batched:
            if weighted:
                elements, weights = element
                if len(elements) != len(weights):
                    msg = f"ApproximateQuantiles: a weighted batch needs one weight per element, got {len(elements)} elements and {len(weights)} weights"
                    raise ValueError(msg)
                if elements:
                    accumulator.add(list(elements), list(weights), self._offset)
            elif len(element):
                accumulator.add(list(element), None, self._offset)
            return accumulator
        if weighted:
            value, weight = element
            accumulator.add([value], [weight], self._offset)
        else:
            accumulator.add([element], None, self._offset)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[_QuantileState], *args: Any, **kwargs: Any) -> _QuantileState:
        merged = self.create_accumulator()
        for accumulator in accumulators:
            if accumulator.is_empty():
                continue
            merged.add(accumulator.unbuffered, accumulator.unbuffered_weights, self._offset)
            merged.buffers.extend(accumulator.buffers)
        heapq.heapify(merged.buffers)
        merged.collapse_if_needed(self._offset)
        return merged

    def extract_output(self, accumulator: _QuantileState, *args: Any, **kwargs: Any) -> list:
        if accumulator.is_empty():
            return []
        buffers = accumulator.with_remainder()
        total = sum(buffer.total_weight() for buffer in buffers)
        step = total / (self._num_quantiles - 1)
        start = (total - 1) / (self._num_quantiles - 1)
        middle, _, min_val, max_val = _pick(buffers, self._num_quantiles - 2, step, start, self._spec)
        return [min_val, *middle, max_val]


class ApproximateQuantiles:
    """Approximate N-tiles (``Globally`` or ``PerKey``): ``num_quantiles`` values from the
    smallest to the largest, with Beam's ``key``, ``reverse``, ``weighted`` and
    ``input_batched``.

    >>> p | beam.Create(range(101)) | ApproximateQuantiles.Globally(5)   # doctest: +SKIP
    [0, 25, 50, 75, 100]
    """

    @with_input_types(typehints.Union[_T, typehints.Sequence[_T], typehints.Tuple[_T, float]])
    @with_output_types(typehints.List[_T])
    class Globally(PTransform):
        """One list of quantiles of all elements (per window)."""

        def __init__(self, num_quantiles: int, key: Callable[[Any], Any] | None = None, reverse: bool = False, weighted: bool = False, input_batched: bool = False) -> None:
            super().__init__()
            self._combine_fn = ApproximateQuantilesCombineFn.create(
                num_quantiles=num_quantiles, key=key, reverse=reverse, weighted=weighted, input_batched=input_batched
            )

        def default_label(self) -> str:
            return "ApproximateQuantiles.Globally"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | CombineGlobally(self._combine_fn)

    @with_input_types(typehints.Union[typehints.Tuple[_K, _V], typehints.Tuple[_K, typehints.Tuple[_V, float]]])
    @with_output_types(typehints.Tuple[_K, typehints.List[_V]])
    class PerKey(PTransform):
        """(key, quantiles of its values) for each key (per window)."""

        def __init__(self, num_quantiles: int, key: Callable[[Any], Any] | None = None, reverse: bool = False, weighted: bool = False, input_batched: bool = False) -> None:
            super().__init__()
            self._combine_fn = ApproximateQuantilesCombineFn.create(
                num_quantiles=num_quantiles, key=key, reverse=reverse, weighted=weighted, input_batched=input_batched
            )

        def default_label(self) -> str:
            return "ApproximateQuantiles.PerKey"

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | CombinePerKey(self._combine_fn)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.stats")
