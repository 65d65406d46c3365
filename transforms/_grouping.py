"""Utilities built on ``GroupByKey``: joins, de-duplication, reshuffles and keyed batches.

``CoGroupByKey``, ``Distinct`` (and Beam's older name ``RemoveDuplicates``), ``Reshuffle``
and ``ReshufflePerKey`` and ``WaitOn`` (``GroupIntoBatches``, stateful, is in ``_stateful_batching``). Each is a composite of the
primitives, so the runner needs nothing special for them. Public through
``sparkbeam.transforms.util`` and ``sparkbeam``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from sparkbeam import pvalue
from sparkbeam.combine import CombineFn, CombinePerKey
from sparkbeam.core import Create, DoFn, FlatMap, Flatten, GroupByKey, Map, ParDo, WindowInto
from sparkbeam.ptransform import PTransform, ptransform_fn
from sparkbeam.transforms._element_wise import Keys
from sparkbeam.trigger import AccumulationMode, Always
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import with_input_types, with_output_types
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import GlobalWindows, TimestampCombiner

__all__ = [
    "CoGroupByKey",
    "Distinct",
    "RemoveDuplicates",
    "Reshuffle",
    "ReshufflePerKey",
    "WaitOn",
]

# Element types as Beam's transforms declare them (checked when the pipeline is built).
_T = typehints.TypeVariable("T")
_K = typehints.TypeVariable("K")
_V = typehints.TypeVariable("V")


def _has_pvalues(value: Any) -> bool:
    if isinstance(value, pvalue.PValue):
        return True
    if isinstance(value, dict):
        return any(_has_pvalues(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_pvalues(v) for v in value)
    return False


class _TagValue(DoFn):
    """``(k, v) -> (k, (index, v))``: marks which input a value came from."""

    def __init__(self, index: int, tag: Any) -> None:
        self.index = index
        self.tag = tag

    def process(self, element: Any) -> Iterable[Any]:
        try:
            key, value = element
        except (TypeError, ValueError):
            msg = f"CoGroupByKey expects (key, value) pairs, but input {self.tag!r} has {element!r}"
            raise TypeError(msg) from None
        yield (key, (self.index, value))


class _CollectByTag(DoFn):
    """``(k, [(index, v), ...]) -> (k, {tag: [v, ...]})`` (or a tuple of lists, by position)."""

    def __init__(self, tags: list, as_dict: bool) -> None:
        self.tags = tags
        self.as_dict = as_dict

    def process(self, element: Any) -> Iterable[Any]:
        key, tagged_values = element
        per_input: list[list] = [[] for _ in self.tags]
        for index, value in tagged_values:
            per_input[index].append(value)
        if self.as_dict:
            yield (key, dict(zip(self.tags, per_input)))
        else:
            yield (key, tuple(per_input))


class CoGroupByKey(PTransform):
    """Groups several PCollections of (key, value) pairs by key, per window.

    From a dict ``{tag: pcoll}`` each output is ``(key, {tag: [values], ...})``, with every
    tag present (an empty list where that input has no value for the key); from a tuple or
    list of PCollections it is ``(key, ([values of the first], [values of the second], ...))``.

    >>> {"emails": emails, "phones": phones} | beam.CoGroupByKey()   # doctest: +SKIP
    ("amy", {"emails": ["amy@x.org"], "phones": []})

    ``pipeline=`` is needed only when there may be no input PCollections at all.
    """

    def __init__(self, *, pipeline: Any = None) -> None:
        super().__init__()
        self.pipeline = pipeline

    def __ror__(self, left: Any, label: str | None = None) -> Any:
        # An empty dict or tuple names no pipeline; the one given here owns the transform.
        if not _has_pvalues(left) and isinstance(left, (dict, list, tuple)):
            if self.pipeline is None:
                msg = f"{self.label} of no PCollections needs the pipeline: CoGroupByKey(pipeline=p)"
                raise ValueError(msg)
            return self.pipeline.apply(self, left, label)
        return super().__ror__(left, label)

    def expand(self, pcolls: Any) -> pvalue.PCollection:
        if isinstance(pcolls, pvalue.PCollection):
            msg = f"{self.label} takes a dict or a tuple of PCollections, not the single {pcolls!r}"
            raise TypeError(msg)
        as_dict = isinstance(pcolls, dict)
        if as_dict:
            tags, inputs = list(pcolls.keys()), list(pcolls.values())
        else:
            inputs = list(pcolls)
            tags = list(range(len(inputs)))
        for tag, pc in zip(tags, inputs):
            if not isinstance(pc, pvalue.PCollection):
                msg = f"{self.label}: input {tag!r} is {pc!r}, not a PCollection"
                raise TypeError(msg)
        if not inputs:
            if self.pipeline is None:
                msg = f"{self.label} of no PCollections needs the pipeline: CoGroupByKey(pipeline=p)"
                raise ValueError(msg)
            return self.pipeline | "Empty" >> Create([])
        tagged = [pc | f"Tag[{tag!r}]" >> ParDo(_TagValue(index, tag)) for index, (tag, pc) in enumerate(zip(tags, inputs))]
        return (
            tagged
            | "Flatten" >> Flatten()
            | "GroupByKey" >> GroupByKey()
            | "CollectByTag" >> ParDo(_CollectByTag(tags, as_dict))
        )


class _KeepNothing(CombineFn):
    """Combines any values into ``None``: only the keys matter to ``Distinct``."""

    def create_accumulator(self) -> None:
        return None

    def add_input(self, accumulator: None, element: Any) -> None:
        return None

    def merge_accumulators(self, accumulators: Iterable[None]) -> None:
        return None

    def extract_output(self, accumulator: None) -> None:
        return None


def _pair_with_none(element: Any) -> tuple:
    return (element, None)


@with_input_types(_T)
@with_output_types(_T)
@ptransform_fn
def Distinct(pcoll: pvalue.PCollection) -> pvalue.PCollection:
    """Each distinct element once per window (elements must be hashable).

    >>> p | beam.Create([1, 2, 1]) | beam.Distinct()                # doctest: +SKIP
    1, 2
    """
    return pcoll | "ToPairs" >> Map(_pair_with_none) | "Group" >> CombinePerKey(_KeepNothing()) | "Distinct" >> Keys()


@with_input_types(_T)
@with_output_types(_T)
@ptransform_fn
def RemoveDuplicates(pcoll: pvalue.PCollection) -> pvalue.PCollection:
    """Beam's older name for ``Distinct``."""
    return pcoll | "RemoveDuplicates" >> Distinct()


# -- Reshuffle ------------------------------------------------------------------------------------


class _ReifyMetadata(DoFn):
    """``(k, v) -> (k, WindowedValue(v, ...))``: keeps timestamp, window and pane through a regrouping."""

    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam, window: Any = DoFn.WindowParam, pane: Any = DoFn.PaneInfoParam) -> Iterable[Any]:
        key, value = element
        yield (key, WindowedValue(value, timestamp.micros, (window,), pane))


def _restore_metadata(element: tuple) -> Iterable[WindowedValue]:
    key, reified = element
    for wv in reified:
        yield WindowedValue((key, wv.value), wv.timestamp_micros, wv.windows, wv.pane_info)


class _RegroupByKey(GroupByKey):
    """ReshufflePerKey's grouping: each element gets its own pane back right after it, so
    the grouping's pane indices are never seen and its keys need no state past their step."""

    pane_indices_observed = False


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(typehints.Tuple[_K, _V])
class ReshufflePerKey(PTransform):
    """The (key, value) input unchanged (values, timestamps, windows, panes), redistributed by key.

    A ``GroupByKey`` in the global window with an ``Always`` trigger, so it never waits for
    a watermark; each element's metadata rides along in its value and is restored after.

    >>> pairs | beam.transforms.util.ReshufflePerKey() | beam.Map(work)   # doctest: +SKIP
    """

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        windowing = pcoll.windowing
        regrouped = (
            pcoll
            | "ReifyMetadata" >> ParDo(_ReifyMetadata())
            | "InGlobalWindow" >> WindowInto(
                GlobalWindows(),
                trigger=Always(),
                accumulation_mode=AccumulationMode.DISCARDING,
                timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST,
            )
            | "GroupByKey" >> _RegroupByKey()
            | "RestoreMetadata" >> FlatMap(_restore_metadata)
        )
        # The elements are back in their own windows, so the PCollection is windowed as
        # the input was (Beam does the same).
        regrouped.windowing = windowing
        return regrouped


class _RandomKey:
    def __init__(self, num_buckets: int) -> None:
        self.num_buckets = num_buckets

    def __call__(self, element: Any) -> tuple:
        return (random.randrange(self.num_buckets), element)


def _drop_key(pair: tuple) -> Any:
    return pair[1]


@with_input_types(_T)
@with_output_types(_T)
class Reshuffle(PTransform):
    """The input unchanged, redistributed at random across workers: a fusion break.

    Use it after a step that multiplies elements (a fan-out ``FlatMap``) so that what
    follows runs spread over the cluster. ``num_buckets`` caps the number of random keys.

    >>> p | beam.Create(urls) | beam.Reshuffle() | beam.Map(fetch)   # doctest: +SKIP
    """

    _DEFAULT_NUM_BUCKETS = 1 << 32

    def __init__(self, num_buckets: int | None = None) -> None:
        super().__init__()
        if num_buckets is not None and (isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets <= 0):
            msg = f"Reshuffle: num_buckets must be an int greater than 0, got {num_buckets!r}"
            raise ValueError(msg)
        self.num_buckets = num_buckets or self._DEFAULT_NUM_BUCKETS

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return (
            pcoll
            | "AddRandomKeys" >> Map(_RandomKey(self.num_buckets))
            | "ReshufflePerKey" >> ReshufflePerKey()
            | "RemoveRandomKeys" >> Map(_drop_key)
        )


# -- WaitOn -------------------------------------------------------------------------------------------


def _nothing(element: Any) -> list:
    return []


def _first(element: Any, *unused_signals: Any) -> Any:
    return element


class WaitOn(PTransform):
    """The input unchanged, each window held back until the same window of every given
    PCollection is complete (for example, until a write has finished).

    >>> main | beam.WaitOn(written) | beam.Map(notify)            # doctest: +SKIP
    """

    def __init__(self, *to_be_waited_on: pvalue.PCollection) -> None:
        super().__init__()
        self._to_be_waited_on = to_be_waited_on

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        # Only completeness matters: an empty grouping of each signal is a side input that
        # is ready when the signal's window is done.
        signals = [
            pvalue.AsIter(signal | f"WaitOn{index}" >> (FlatMap(_nothing) | GroupByKey()))
            for index, signal in enumerate(self._to_be_waited_on)
        ]
        return pcoll | "Wait" >> Map(_first, *signals)

