"""Batch grouping as a lifted combine: ``combineByKey`` on (key, window).

In batch, a grouping whose trigger is the default one fires exactly one pane per key and
window when the watermark jumps to +inf, so it needs no trigger machinery: each partition
combines what it holds per (key, window) before the shuffle (combiner lifting) and the
merge after it yields the pane. A GroupByKey is the same with lists as accumulators. The
pane's timestamp follows the timestamp combiner (with the overlapping-window rule; the
rules are ``runners/core/holds.py``'s), and its pane info is what Beam's batch runner gives. It drops nothing: in batch no window is
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
from sparkbeam.runners.core.holds import HoldPolicy, last_instant, single_pane_timestamp
from sparkbeam.runners.core.metrics import step_scoped
from sparkbeam.runners.core.ops import GroupOp
from sparkbeam.runners.spark.metrics import MetricsChannel, metered, task_container, task_failed
from sparkbeam.trigger import DefaultTrigger
from sparkbeam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue

__all__ = ["applies", "group"]


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


def _explode(op: GroupOp, holds: HoldPolicy, counter: Any, elements: Iterable[WindowedValue]) -> Iterator[tuple]:
    """((key, window), (value, output time)) per element and window: the output time is
    the element's hold, which the combine below reduces to the pane's timestamp."""
    output_time = holds.output_time
    seen = 0
    for wv in elements:
        seen += 1
        try:
            key, inner = key_element(op, wv)
        except TransformError as error:
            raise UserCodeError(op.label, op.location, error) from None
        for window in inner.windows:
            yield (key, window), (inner.value, output_time(window, inner.timestamp_micros))
    counter.add(seen)


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


def _merge_value(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, combiner: list, item: tuple) -> list:
    task_container()
    fn = holder.get()
    value, hold = item
    try:
        combiner[0] = accumulator_from(fn, "add_input", fn.add_input(combiner[0], value), combiner[0])
    except Exception as error:
        task_failed()
        raise UserCodeError(op.label, op.location, error, value) from error
    combiner[1] = holds.combine(combiner[1], hold)
    return combiner


def _merge_combiners(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, left: list, right: list) -> list:
    task_container()
    fn = holder.get()
    try:
        both = [left[0], right[0]]
        left[0] = accumulator_from(fn, "merge_accumulators", fn.merge_accumulators(both), both)
    except Exception as error:
        task_failed()
        raise UserCodeError(op.label, op.location, error) from error
    left[1] = holds.combine(left[1], right[1])
    return left


def _panes(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, pairs: Iterable[tuple]) -> Iterator[WindowedValue]:
    fn = holder.get()
    single_pane_stamp = single_pane_timestamp(op.windowing, holds.trigger)
    # Beam's batch runner: default windowing gives each key one last pane; otherwise the
    # default trigger never finishes, so is_last is False.
    pane = PaneInfo(True, single_pane_stamp is not None, PaneInfoTiming.ON_TIME, 0, 0)
    for (key, window), (accumulator, hold) in pairs:
        try:
            output = fn.extract_output(accumulator)
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, key) from error
        if single_pane_stamp is None:
            timestamp = holds.pane_timestamp(last_instant(window), hold)
        else:
            timestamp = single_pane_stamp
        yield WindowedValue((key, output), timestamp, (window,), pane)


def group(
    rdd: Any, op: GroupOp, num_partitions: int, overlapping_window_rule: bool, counter: Any, channel: MetricsChannel
) -> Any:
    """An RDD of the panes of ``op`` over ``rdd`` (one per key and window)."""
    from pyspark.rdd import portable_hash

    fn = _SetUpOnce(step_scoped(op.combine_fn, op.label) if op.combine_fn is not None else _ListCombineFn())
    holds = HoldPolicy(op.windowing, overlapping_window_rule=overlapping_window_rule)
    pairs = rdd.mapPartitions(functools.partial(metered, channel, _explode, op, holds, counter))
    combined = pairs.combineByKey(
        functools.partial(_create, op, fn),
        functools.partial(_merge_value, op, fn, holds),
        functools.partial(_merge_combiners, op, fn, holds),
        num_partitions,
        portable_hash,
    )
    return combined.mapPartitions(functools.partial(metered, channel, _panes, op, fn, holds))
