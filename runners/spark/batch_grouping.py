"""Batch grouping as a lifted combine: ``combineByKey`` on (key, window).

In batch, a grouping whose trigger is the default one fires exactly one pane per key and
window when the watermark jumps to +inf, so it needs no trigger machinery: each partition
combines what it holds per (key, window) before the shuffle (combiner lifting) and the
merge after it yields the pane. A GroupByKey is the same with lists as accumulators. The
pane's timestamp follows the timestamp combiner (with the overlapping-window rule), and
its pane info is what Beam's batch runner gives. It drops nothing: in batch no window is
late, and the default trigger never closes one, so every (element, window) pair reaches
a pane.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.combine import CombineFn, accumulator_from
from sparkbeam.runners.core.errors import TransformError, UserCodeError
from sparkbeam.runners.core.grouping_step import key_element
from sparkbeam.runners.core.metrics import step_scoped
from sparkbeam.runners.core.ops import GroupOp
from sparkbeam.runners.spark.metrics import MetricsChannel, metered, task_container, task_failed
from sparkbeam.trigger import DefaultTrigger
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue
from sparkbeam.window import GlobalWindow, TimestampCombiner

__all__ = ["applies", "group"]

_EOW = TimestampCombiner.OUTPUT_AT_EOW
_LATEST = TimestampCombiner.OUTPUT_AT_LATEST


def applies(op: GroupOp) -> bool:
    windowing = op.windowing
    return isinstance(windowing.triggerfn, DefaultTrigger) and not windowing.windowfn.is_merging()


class _ListCombineFn(CombineFn):
    """GroupByKey as a combine: the accumulator is the list of values."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, element: Any) -> list:
        accumulator.append(element)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        merged: list = []
        for accumulator in accumulators:
            merged.extend(accumulator)
        return merged

    def extract_output(self, accumulator: list) -> list:
        return accumulator


class _SetUpOnce:
    """A CombineFn that has its ``setup`` called once in each process that unpickles it."""

    def __init__(self, fn: CombineFn) -> None:
        self.fn = fn
        self.ready = False

    def __getstate__(self) -> dict:
        return {"fn": self.fn}

    def __setstate__(self, state: dict) -> None:
        self.fn = state["fn"]
        self.ready = False

    def get(self) -> CombineFn:
        if not self.ready:
            self.fn.setup()
            self.ready = True
        return self.fn


def _output_time(op: GroupOp, overlapping_window_rule: bool, window: Any, micros: int) -> int:
    windowing = op.windowing
    combiner = windowing.timestamp_combiner
    if combiner is _EOW:
        return window.end.micros - 1  # max_timestamp(), without building a Timestamp
    windowfn = windowing.windowfn
    if combiner is TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED:
        micros = windowfn.get_transformed_output_time(window, Timestamp.from_micros(micros)).micros
    if combiner is not _LATEST and overlapping_window_rule:
        floor = windowfn.overlap_output_floor(window)
        if floor is not None:
            micros = max(micros, floor.micros)
    return micros


def _explode(op: GroupOp, rule: bool, counter: Any, elements: Iterable[WindowedValue]) -> Iterator[tuple]:
    seen = 0
    for wv in elements:
        seen += 1
        try:
            key, inner = key_element(op, wv)
        except TransformError as error:
            raise UserCodeError(op.label, op.location, error) from None
        for window in inner.windows:
            yield (key, window), (inner.value, _output_time(op, rule, window, inner.timestamp_micros))
    counter.add(seen)


def _combine_hold(op: GroupOp, a: int, b: int) -> int:
    return max(a, b) if op.windowing.timestamp_combiner is _LATEST else min(a, b)


def _create(op: GroupOp, holder: _SetUpOnce, item: tuple) -> list:
    task_container()  # called by Spark's shuffle code, maybe before any metered function
    fn = holder.get()
    value, hold = item
    try:
        created = fn.create_accumulator()
        return [accumulator_from(fn, "add_input", fn.add_input(created, value), created), hold]
    except Exception as error:
        task_failed()
        raise UserCodeError(op.label, op.location, error, value) from error


def _merge_value(op: GroupOp, holder: _SetUpOnce, combiner: list, item: tuple) -> list:
    task_container()
    fn = holder.get()
    value, hold = item
    try:
        combiner[0] = accumulator_from(fn, "add_input", fn.add_input(combiner[0], value), combiner[0])
    except Exception as error:
        task_failed()
        raise UserCodeError(op.label, op.location, error, value) from error
    combiner[1] = _combine_hold(op, combiner[1], hold)
    return combiner


def _merge_combiners(op: GroupOp, holder: _SetUpOnce, left: list, right: list) -> list:
    task_container()
    fn = holder.get()
    try:
        both = [left[0], right[0]]
        left[0] = accumulator_from(fn, "merge_accumulators", fn.merge_accumulators(both), both)
    except Exception as error:
        task_failed()
        raise UserCodeError(op.label, op.location, error) from error
    left[1] = _combine_hold(op, left[1], right[1])
    return left


def _panes(op: GroupOp, holder: _SetUpOnce, pairs: Iterable[tuple]) -> Iterator[WindowedValue]:
    fn = holder.get()
    if op.windowing.is_default():
        pane = PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0)
        stamp = GlobalWindow().max_timestamp().micros
    else:
        # Beam's batch trigger driver: the default trigger never finishes, so is_last is False.
        pane = PaneInfo(True, False, PaneInfoTiming.ON_TIME, 0, 0)
        stamp = None
    for (key, window), (accumulator, hold) in pairs:
        try:
            output = fn.extract_output(accumulator)
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, key) from error
        yield WindowedValue((key, output), hold if stamp is None else stamp, (window,), pane)


def group(
    rdd: Any, op: GroupOp, num_partitions: int, overlapping_window_rule: bool, counter: Any, channel: MetricsChannel
) -> Any:
    """An RDD of the panes of ``op`` over ``rdd`` (one per key and window)."""
    from pyspark.rdd import portable_hash

    fn = _SetUpOnce(step_scoped(op.combine_fn, op.label) if op.combine_fn is not None else _ListCombineFn())
    pairs = rdd.mapPartitions(functools.partial(metered, channel, _explode, op, overlapping_window_rule, counter))
    combined = pairs.combineByKey(
        functools.partial(_create, op, fn),
        functools.partial(_merge_value, op, fn),
        functools.partial(_merge_combiners, op, fn),
        num_partitions,
        portable_hash,
    )
    return combined.mapPartitions(functools.partial(metered, channel, _panes, op, fn))
