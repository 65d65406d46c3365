"""The CombineFns behind Beam's combiners, usable alone (``CombineFn.apply``) or in any combine.

Public through ``sparkbeam.combiners``. Accumulators are plain lists, tuples, dicts and
sets, so they pickle cheaply between a partial combine and its merge.

>>> TopCombineFn(2).apply([3, 1, 4, 1, 5])
[5, 4]
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable
from typing import Any

from sparkbeam.combine import CombineFn
from sparkbeam.utils.timestamp import MIN_TIMESTAMP

__all__ = [
    "ConcatListCombineFn",
    "CountCombineFn",
    "Largest",
    "LatestCombineFn",
    "MeanCombineFn",
    "SampleCombineFn",
    "SingleInputTupleCombineFn",
    "Smallest",
    "ToDictCombineFn",
    "ToListCombineFn",
    "ToSetCombineFn",
    "TopCombineFn",
    "TupleCombineFn",
]


class CountCombineFn(CombineFn):
    """The number of inputs. ``CountCombineFn().apply('abc') == 3``."""

    sql_aggregate = "count"

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, accumulator: int, element: Any) -> int:
        return accumulator + 1

    def add_inputs(self, accumulator: int, elements: Iterable[Any]) -> int:
        return accumulator + sum(1 for _ in elements)

    def merge_accumulators(self, accumulators: Iterable[int]) -> int:
        return sum(accumulators)

    def extract_output(self, accumulator: int) -> int:
        return accumulator



class MeanCombineFn(CombineFn):
    """The arithmetic mean of numbers, ``nan`` for none. ``MeanCombineFn().apply([1, 2]) == 1.5``."""

    sql_aggregate = "mean"

    def create_accumulator(self) -> tuple:
        return (0, 0)

    def add_input(self, sum_count: tuple, element: Any) -> tuple:
        total, count = sum_count
        return (total + element, count + 1)

    def merge_accumulators(self, accumulators: Iterable[tuple]) -> tuple:
        total, count = 0, 0
        for part_total, part_count in accumulators:
            total += part_total
            count += part_count
        return (total, count)

    def extract_output(self, sum_count: tuple) -> float:
        total, count = sum_count
        return total / float(count) if count else float("nan")



def _check_count(owner: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        msg = f"{owner}: n must be a non-negative int, got {n!r}"
        raise ValueError(msg)
    return n


class TopCombineFn(CombineFn):
    """The ``n`` greatest inputs, greatest first; with ``reverse=True`` the ``n`` least, least first.

    ``key`` ranks elements as in ``sorted``. The accumulator is a plain list of elements,
    trimmed to the best ``n`` whenever it doubles, so it pickles cheaply between stages.

    >>> TopCombineFn(2).apply([3, 1, 4, 1, 5])
    [5, 4]
    >>> TopCombineFn(2, key=len, reverse=True).apply(["ccc", "a", "bb"])
    ['a', 'bb']
    """

    def __init__(self, n: int, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
        self._n = _check_count("TopCombineFn", n)
        self._key = key
        self._reverse = reverse
        # Trimming costs a partial sort; doing it only when the buffer doubles keeps
        # add_input amortised O(log n).
        self._trim_at = max(2 * self._n, 16)

    def default_label(self) -> str:
        return f"Top({self._n})"

    def _best(self, elements: Iterable[Any]) -> list:
        select = heapq.nsmallest if self._reverse else heapq.nlargest
        return select(self._n, elements, key=self._key)

    def create_accumulator(self, *args: Any, **kwargs: Any) -> list:
        return []

    def add_input(self, accumulator: list, element: Any, *args: Any, **kwargs: Any) -> list:
        accumulator.append(element)
        if len(accumulator) > self._trim_at:
            accumulator = self._best(accumulator)
        return accumulator

    def add_inputs(self, accumulator: list, elements: Iterable[Any], *args: Any, **kwargs: Any) -> list:
        return self._best(itertools.chain(accumulator, elements))

    def merge_accumulators(self, accumulators: Iterable[list], *args: Any, **kwargs: Any) -> list:
        return self._best(itertools.chain.from_iterable(accumulators))

    def compact(self, accumulator: list, *args: Any, **kwargs: Any) -> list:
        return self._best(accumulator)

    def extract_output(self, accumulator: list, *args: Any, **kwargs: Any) -> list:
        return self._best(accumulator)


class Largest(TopCombineFn):
    """``TopCombineFn(n)``: the ``n`` greatest inputs, greatest first."""

    def default_label(self) -> str:
        return f"Largest({self._n})"


class Smallest(TopCombineFn):
    """``TopCombineFn(n, reverse=True)``: the ``n`` least inputs, least first."""

    def __init__(self, n: int) -> None:
        super().__init__(n, reverse=True)

    def default_label(self) -> str:
        return f"Smallest({self._n})"


class _Unseen:
    """Stands for "no element" in the seed that makes ``Top.Of`` output on empty input."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Unseen)

    def __hash__(self) -> int:
        return 0x70F


class _SkipUnseen(CombineFn):
    """Wraps a CombineFn so that ``_Unseen`` seeds count as no input at all."""

    def __init__(self, inner: CombineFn) -> None:
        self.inner = inner

    def default_label(self) -> str:
        return self.inner.default_label()

    def create_accumulator(self) -> Any:
        return self.inner.create_accumulator()

    def add_input(self, accumulator: Any, element: Any) -> Any:
        if isinstance(element, _Unseen):
            return accumulator
        return self.inner.add_input(accumulator, element)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return self.inner.merge_accumulators(accumulators)

    def compact(self, accumulator: Any) -> Any:
        return self.inner.compact(accumulator)

    def extract_output(self, accumulator: Any) -> Any:
        return self.inner.extract_output(accumulator)



def _sample_rank(weighted: tuple) -> float:
    return weighted[0]


class SampleCombineFn(CombineFn):
    """A uniform random sample of ``n`` inputs, without replacement (all of them if fewer).

    Each input gets a random rank; the ``n`` highest ranks win, which is a uniform sample
    whatever way the inputs are split between partial combines.
    """

    def __init__(self, n: int) -> None:
        self._top = TopCombineFn(_check_count("SampleCombineFn", n), key=_sample_rank)

    def create_accumulator(self) -> list:
        return self._top.create_accumulator()

    def add_input(self, accumulator: list, element: Any) -> list:
        return self._top.add_input(accumulator, (random.random(), element))

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return self._top.merge_accumulators(accumulators)

    def compact(self, accumulator: list) -> list:
        return self._top.compact(accumulator)

    def extract_output(self, accumulator: list) -> list:
        return [element for _, element in self._top.extract_output(accumulator)]


class _FirstNCombineFn(CombineFn):
    """Any ``n`` inputs (the first ones seen): cheap, and not a uniform sample."""

    def __init__(self, n: int) -> None:
        self._n = n

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, element: Any) -> list:
        if len(accumulator) < self._n:
            accumulator.append(element)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return list(itertools.islice(itertools.chain.from_iterable(accumulators), self._n))

    def extract_output(self, accumulator: list) -> list:
        return accumulator



class _TupleCombineFnBase(CombineFn):
    def __init__(self, *combiners: CombineFn | Callable, merge_accumulators_batch_size: int | None = None) -> None:
        self._combiners = [CombineFn.maybe_from_callable(c) for c in combiners]
        # Merging in batches bounds how many accumulators are held at once.
        self._batch = merge_accumulators_batch_size or max(10, 1000 // max(1, len(combiners)))

    def setup(self, *args: Any, **kwargs: Any) -> None:
        for combiner in self._combiners:
            combiner.setup(*args, **kwargs)

    def create_accumulator(self, *args: Any, **kwargs: Any) -> list:
        return [c.create_accumulator(*args, **kwargs) for c in self._combiners]

    def merge_accumulators(self, accumulators: Iterable[list], *args: Any, **kwargs: Any) -> list:
        pending = iter(accumulators)
        merged = next(pending, None)
        if merged is None:
            return self.create_accumulator(*args, **kwargs)
        while True:
            batch = [merged, *itertools.islice(pending, self._batch)]
            if len(batch) == 1:
                return merged
            merged = [
                c.merge_accumulators(parts, *args, **kwargs) for c, parts in zip(self._combiners, zip(*batch))
            ]

    def compact(self, accumulator: list, *args: Any, **kwargs: Any) -> list:
        return [c.compact(a, *args, **kwargs) for c, a in zip(self._combiners, accumulator)]

    def extract_output(self, accumulator: list, *args: Any, **kwargs: Any) -> tuple:
        return tuple(c.extract_output(a, *args, **kwargs) for c, a in zip(self._combiners, accumulator))

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        for combiner in reversed(self._combiners):
            combiner.teardown(*args, **kwargs)


class TupleCombineFn(_TupleCombineFnBase):
    """Combines N-tuples position by position with N CombineFns.

    >>> TupleCombineFn(max, sum).apply([(1, 10), (3, 20)])
    (3, 30)
    """

    def add_input(self, accumulator: list, element: tuple, *args: Any, **kwargs: Any) -> list:
        return [c.add_input(a, e, *args, **kwargs) for c, a, e in zip(self._combiners, accumulator, element)]

    def with_common_input(self) -> SingleInputTupleCombineFn:
        return SingleInputTupleCombineFn(*self._combiners)


class SingleInputTupleCombineFn(_TupleCombineFnBase):
    """Feeds every input to each of N CombineFns and outputs the N results as a tuple.

    >>> SingleInputTupleCombineFn(min, max).apply([3, 1, 2])
    (1, 3)
    """

    def add_input(self, accumulator: list, element: Any, *args: Any, **kwargs: Any) -> list:
        return [c.add_input(a, element, *args, **kwargs) for c, a in zip(self._combiners, accumulator)]


class ToListCombineFn(CombineFn):
    """All inputs as one list (in no particular order)."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, element: Any) -> list:
        accumulator.append(element)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return list(itertools.chain.from_iterable(accumulators))

    def extract_output(self, accumulator: list) -> list:
        return accumulator


class ConcatListCombineFn(CombineFn):
    """Concatenates list inputs into one list: ``[[1], [2, 3]] -> [1, 2, 3]``."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, element: list) -> list:
        return accumulator + element

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return list(itertools.chain.from_iterable(accumulators))

    def extract_output(self, accumulator: list) -> list:
        return accumulator


class ToDictCombineFn(CombineFn):
    """(key, value) inputs as one dict; of several values for a key, one is kept."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, element: tuple) -> dict:
        key, value = element
        accumulator[key] = value
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            merged.update(accumulator)
        return merged

    def extract_output(self, accumulator: dict) -> dict:
        return accumulator


class ToSetCombineFn(CombineFn):
    """The distinct inputs as one set."""

    def create_accumulator(self) -> set:
        return set()

    def add_input(self, accumulator: set, element: Any) -> set:
        accumulator.add(element)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[set]) -> set:
        merged: set = set()
        for accumulator in accumulators:
            merged |= accumulator
        return merged

    def extract_output(self, accumulator: set) -> set:
        return accumulator



class LatestCombineFn(CombineFn):
    """Of ``(value, timestamp)`` inputs, the value with the latest timestamp (``None`` for none)."""

    def create_accumulator(self) -> tuple:
        return (None, MIN_TIMESTAMP)

    def add_input(self, accumulator: tuple, element: tuple) -> tuple:
        return accumulator if accumulator[1] > element[1] else element

    def merge_accumulators(self, accumulators: Iterable[tuple]) -> tuple:
        latest = self.create_accumulator()
        for accumulator in accumulators:
            latest = self.add_input(latest, accumulator)
        return latest

    def extract_output(self, accumulator: tuple) -> Any:
        return accumulator[0]
