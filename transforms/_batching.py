"""Batching within a bundle: ``BatchElements`` and ``SortAndBatchElements``.

Both are one ``ParDo`` that buffers the elements of a bundle (on Spark, a partition of a
step) per window and emits lists, each stamped at the end of its window as Beam does.
They never group across bundles, so batch boundaries depend on how the input is split;
``GroupIntoBatches`` is the keyed, deterministic alternative. Public through
``sparkbeam.transforms.util`` and ``sparkbeam``.
"""

from __future__ import annotations

import collections
import contextlib
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sparkbeam import pvalue
from sparkbeam.core import DoFn, Map, ParDo
from sparkbeam.ptransform import PTransform
from sparkbeam.transforms._stateful_batching import StatefulBatchElementsDoFn
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import with_input_types, with_output_types
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["BatchElements", "SortAndBatchElements"]

_T = typehints.TypeVariable("T")  # element types as Beam declares them

# A bundle buffers at most this many windows before flushing the fullest one (as Beam).
_MAX_LIVE_WINDOWS = 10


def _size_one(element: Any) -> int:
    return 1


class _BatchSizer:
    """Picks each next batch size from the timings of the batches so far.

    Processing a batch of ``x`` elements is modelled as ``fixed + per_element * x``, fitted
    by least squares over recent batches. The next size is the largest that meets every
    target given, grows at most twofold per batch, and stays in [min, max].
    """

    _MAX_TIMINGS = 50
    _MAX_GROWTH = 2

    def __init__(
        self,
        min_batch_size: int,
        max_batch_size: int,
        target_batch_overhead: float | None,
        target_batch_duration_secs: float | None,
        target_batch_duration_secs_including_fixed_cost: float | None,
        variance: float,
        clock: Callable[[], float],
    ) -> None:
        if min_batch_size > max_batch_size:
            msg = f"BatchElements: min_batch_size ({min_batch_size}) must not be greater than max_batch_size ({max_batch_size})"
            raise ValueError(msg)
        if target_batch_overhead and not 0 < target_batch_overhead <= 1:
            msg = f"BatchElements: target_batch_overhead ({target_batch_overhead}) must be in (0, 1]"
            raise ValueError(msg)
        for name, value in (
            ("target_batch_duration_secs", target_batch_duration_secs),
            ("target_batch_duration_secs_including_fixed_cost", target_batch_duration_secs_including_fixed_cost),
        ):
            if value is not None and value <= 0:
                msg = f"BatchElements: {name} ({value}) must be positive"
                raise ValueError(msg)
        if not (target_batch_overhead or target_batch_duration_secs or target_batch_duration_secs_including_fixed_cost):
            msg = (
                "BatchElements: give at least one of target_batch_overhead, target_batch_duration_secs "
                "or target_batch_duration_secs_including_fixed_cost"
            )
            raise ValueError(msg)
        self.min_batch_size = min_batch_size
        self.max_batch_size = max_batch_size
        self.target_overhead = target_batch_overhead
        self.target_duration = target_batch_duration_secs
        self.target_duration_with_fixed = target_batch_duration_secs_including_fixed_cost
        self.variance = variance
        self.clock = clock
        self.timings: collections.deque = collections.deque(maxlen=self._MAX_TIMINGS)

    @contextlib.contextmanager
    def timing(self, size: int) -> Iterator[None]:
        """Times what runs inside (the downstream processing of one batch)."""
        started = self.clock()
        yield
        self.timings.append((size, float(self.clock() - started)))

    def next_size(self) -> int:
        low, high = self.min_batch_size, self.max_batch_size
        if low == high or not self.timings:
            return low
        last = self.timings[-1][0]
        cap = min(high, last * self._MAX_GROWTH)
        sizes = {size for size, _ in self.timings}
        if len(sizes) < 2:
            # One size tells nothing about the per-element cost: try a larger one.
            return max(low, min(cap, max(last + 1, low * self._MAX_GROWTH)))
        fixed, per_element = self._fit()
        target = float(high)
        if self.target_duration:
            target = min(target, self.target_duration / per_element)
        if self.target_duration_with_fixed:
            target = min(target, (self.target_duration_with_fixed - fixed) / per_element)
        if self.target_overhead:
            target = min(target, fixed / per_element * (1 / self.target_overhead - 1))
        if len(self.timings) > 10 and self.variance:
            # Spread the sizes so that the fit keeps seeing more than one point.
            target *= 1 + self.variance * (2 * random.random() - 1)
        return int(max(low, min(cap, target)))

    def _fit(self) -> tuple[float, float]:
        sizes = [float(size) for size, _ in self.timings]
        seconds = [elapsed for _, elapsed in self.timings]
        mean_size = sum(sizes) / len(sizes)
        mean_seconds = sum(seconds) / len(seconds)
        spread = sum((size - mean_size) ** 2 for size in sizes)
        slope = sum((size - mean_size) * (s - mean_seconds) for size, s in zip(sizes, seconds)) / spread
        intercept = mean_seconds - slope * mean_size
        # Noise can make either negative; clamp so the targets stay finite and positive.
        return max(intercept, 1e-10), max(slope, 1e-20)


class _Buffer:
    __slots__ = ("elements", "size")

    def __init__(self) -> None:
        self.elements: list = []
        self.size = 0


def _at_end_of(window: Any, batch: list) -> WindowedValue:
    return WindowedValue(batch, window.max_timestamp().micros, (window,))


class _BatchElementsDoFn(DoFn):
    """Fills a batch per window until adding an element would pass the target size."""

    def __init__(self, sizer: _BatchSizer, element_size_fn: Callable[[Any], int]) -> None:
        self.sizer = sizer
        self.element_size_fn = element_size_fn

    def start_bundle(self) -> None:
        self.buffers: dict[Any, _Buffer] = {}
        self.target = self.sizer.next_size()

    def process(self, element: Any, window: Any = DoFn.WindowParam) -> Iterable[WindowedValue]:
        size = self.element_size_fn(element)
        buffer = self.buffers.get(window)
        if buffer is not None and buffer.elements and buffer.size + size > self.target:
            yield from self._flush(window)
            buffer = None
        if buffer is None:
            buffer = self.buffers[window] = _Buffer()
        buffer.elements.append(element)
        buffer.size += size
        if len(self.buffers) > _MAX_LIVE_WINDOWS:
            fullest = max(self.buffers, key=lambda w: self.buffers[w].size)
            yield from self._flush(fullest)

    def _flush(self, window: Any) -> Iterator[WindowedValue]:
        buffer = self.buffers.pop(window)
        with self.sizer.timing(len(buffer.elements)):
            yield _at_end_of(window, buffer.elements)
        self.target = self.sizer.next_size()

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for window in list(self.buffers):
            yield from self._flush(window)


@with_input_types(_T)
@with_output_types(typehints.List[_T])
class BatchElements(PTransform):
    """Lists of consecutive elements, for operations with a high fixed cost per call.

    Batches hold between ``min_batch_size`` and ``max_batch_size`` elements (counted by
    ``element_size_fn``, 1 each by default; a bundle's last batch may be smaller). Between
    the two, the size adapts to how long downstream processing of a batch takes, aiming
    at ``target_batch_duration_secs`` and a fixed-cost share of ``target_batch_overhead``;
    set both sizes equal for a fixed size. Batching is per window and per bundle, and each
    batch is stamped at the end of its window.

    With ``max_batch_duration_secs`` (Beam's stateful variant), batches span bundles: the
    elements are keyed by worker process and buffered in state per window until the batch
    reaches its target size (stamped with the element that filled it), the window ends, or
    its first element has waited that long by ``clock``.

    >>> p | beam.Create(range(100)) | beam.BatchElements(10, 10) | beam.Map(predict)  # doctest: +SKIP
    """

    def __init__(
        self,
        min_batch_size: int = 1,
        max_batch_size: int = 10000,
        target_batch_overhead: float | None = 0.05,
        target_batch_duration_secs: float | None = 10,
        target_batch_duration_secs_including_fixed_cost: float | None = None,
        max_batch_duration_secs: float | None = None,
        *,
        element_size_fn: Callable[[Any], int] = _size_one,
        variance: float = 0.25,
        clock: Callable[[], float] = time.time,
        record_metrics: bool = True,
        length_fn: Callable[[Any], int] | None = None,
        bucket_boundaries: list | None = None,
    ) -> None:
        super().__init__()
        if bucket_boundaries is not None and length_fn is None:
            msg = "BatchElements: bucket_boundaries requires length_fn"
            raise ValueError(msg)
        if max_batch_duration_secs is not None and (
            isinstance(max_batch_duration_secs, bool)
            or not isinstance(max_batch_duration_secs, (int, float))
            or max_batch_duration_secs < 0
        ):
            msg = f"BatchElements: max_batch_duration_secs must be a non-negative number of seconds, got {max_batch_duration_secs!r}"
            raise ValueError(msg)
        self._max_batch_duration_secs = max_batch_duration_secs
        self._clock = clock
        self._sizer = _BatchSizer(
            min_batch_size,
            max_batch_size,
            target_batch_overhead,
            target_batch_duration_secs,
            target_batch_duration_secs_including_fixed_cost,
            variance,
            clock,
        )
        if not callable(element_size_fn):
            msg = f"BatchElements: element_size_fn must be callable, got {element_size_fn!r}"
            raise TypeError(msg)
        self._element_size_fn = element_size_fn

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        if self._max_batch_duration_secs is not None:
            # As Beam: keyed per worker process, then batched across bundles with state
            # (element_size_fn is not used there, as in Beam).
            return (
                pcoll
                | "KeyByProcess" >> Map(_with_process_key)
                | "BatchElements" >> ParDo(StatefulBatchElementsDoFn(self._sizer, self._max_batch_duration_secs, self._clock))
            )
        return pcoll | "BatchElements" >> ParDo(_BatchElementsDoFn(self._sizer, self._element_size_fn))


# One key per worker process, drawn when the module is imported there (Beam's SharedKey).
_PROCESS_KEY = uuid.uuid4().hex


def _with_process_key(element: Any) -> tuple[str, Any]:
    return _PROCESS_KEY, element


def _length_or_one(element: Any) -> int:
    try:
        return len(element)
    except TypeError:
        return 1


class _SortAndBatchDoFn(DoFn):
    """Buffers a bundle per window, then emits it sorted by size in batches."""

    def __init__(self, max_batch_size: int, max_batch_weight: int, element_size_fn: Callable[[Any], int]) -> None:
        self.max_batch_size = max_batch_size
        self.max_batch_weight = max_batch_weight
        self.element_size_fn = element_size_fn

    def start_bundle(self) -> None:
        self.buffers: dict[Any, list] = collections.defaultdict(list)

    def process(self, element: Any, window: Any = DoFn.WindowParam) -> Iterable[WindowedValue]:
        self.buffers[window].append(element)
        if len(self.buffers) > _MAX_LIVE_WINDOWS:
            yield from self._flush(max(self.buffers, key=lambda w: len(self.buffers[w])))

    def _flush(self, window: Any) -> Iterator[WindowedValue]:
        sized = sorted(((self.element_size_fn(e), e) for e in self.buffers.pop(window)), key=lambda pair: pair[0])
        batch: list = []
        weight = 0
        for size, element in sized:
            # As Beam: a batch closes when the next element would bring it to the maximum weight.
            if batch and (len(batch) >= self.max_batch_size or weight + size >= self.max_batch_weight):
                yield _at_end_of(window, batch)
                batch, weight = [], 0
            batch.append(element)
            weight += size
        if batch:
            yield _at_end_of(window, batch)

    def finish_bundle(self) -> Iterable[WindowedValue]:
        for window in list(self.buffers):
            yield from self._flush(window)


@with_input_types(_T)
@with_output_types(typehints.List[_T])
class SortAndBatchElements(PTransform):
    """Batches of elements of similar size: each bundle is sorted by ``element_size_fn``
    (``len``, or 1 for elements without one) and cut into batches of at most
    ``max_batch_size`` elements and below ``max_batch_weight`` in total size.

    >>> p | beam.Create(texts) | beam.SortAndBatchElements(1, 32, 4096)   # doctest: +SKIP
    """

    def __init__(
        self,
        min_batch_size: int,
        max_batch_size: int,
        max_batch_weight: int,
        element_size_fn: Callable[[Any], int] | None = None,
    ) -> None:
        super().__init__()
        if min_batch_size < 1:
            msg = f"SortAndBatchElements: min_batch_size must be >= 1, got {min_batch_size}"
            raise ValueError(msg)
        if max_batch_size < min_batch_size:
            msg = f"SortAndBatchElements: max_batch_size ({max_batch_size}) must be >= min_batch_size ({min_batch_size})"
            raise ValueError(msg)
        if max_batch_weight < 1:
            msg = f"SortAndBatchElements: max_batch_weight must be >= 1, got {max_batch_weight}"
            raise ValueError(msg)
        if element_size_fn is not None and not callable(element_size_fn):
            msg = f"SortAndBatchElements: element_size_fn must be callable, got {element_size_fn!r}"
            raise TypeError(msg)
        self._fn = _SortAndBatchDoFn(max_batch_size, max_batch_weight, element_size_fn or _length_or_one)

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | "SortAndBatch" >> ParDo(self._fn)
