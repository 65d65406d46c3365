"""Batch grouping as a lifted combine on (key, window).

In batch, a grouping whose trigger is the default one fires exactly one pane per key and
window when the watermark jumps to +inf, so it needs no trigger machinery: each partition
combines what it holds per (key, window) before the shuffle (combiner lifting) and the
merge after it yields the pane. A GroupByKey is the same with lists as accumulators. The
pane's timestamp follows the timestamp combiner (with the overlapping-window rule; the
rules are ``runners/core/holds.py``'s), and its pane info is what Beam's batch runner
gives. It drops nothing: in batch no window is late, and the default trigger never closes
one, so every (element, window) pair reaches a pane.

The shuffle's keys are compact (``records.group_key``): (key, start, end) in microseconds
for an interval window. The map side is one loop of sparkbeam's own over a bounded table
(``_precombine``), not PySpark's ``combineByKey``, whose merger calls three Python
functions per element; the merge after the shuffle is PySpark's merger, which spills.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.combine import CombineFn, accumulator_from
from sparkbeam.metrics.execution import _CURRENT
from sparkbeam.runners.core.errors import TransformError, UserCodeError
from sparkbeam.runners.core.gc_pause import gc_paused
from sparkbeam.runners.core.grouping_step import key_element
from sparkbeam.runners.core.holds import HoldPolicy, last_instant, single_pane_timestamp
from sparkbeam.runners.core.metrics import StepScopedCombineFn, step_scoped
from sparkbeam.runners.core.ops import GroupOp
from sparkbeam.runners.core.records import window_of_group_key
from sparkbeam.runners.spark.metrics import MetricsChannel, metered, task_failed
from sparkbeam.trigger import DefaultTrigger
from sparkbeam.utils.windowed_value import (
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
    new_windowed_value,
)
from sparkbeam.window import GlobalWindow, IntervalWindow

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


# The map side's table is bounded: when it holds this many (key, window) groups (or, for
# a GroupByKey, buffered values) its partials go on to the shuffle and it starts afresh.
# A (key, window) then crosses the shuffle more than once, which the merge absorbs.
MAX_TABLE_ENTRIES = 100_000


def _precombine(
    op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, counter: Any, elements: Iterable[WindowedValue]
) -> Iterator[tuple[tuple, list]]:
    """(compact (key, window), [accumulator, hold]) per key and window of one partition:
    the combine lifted before the shuffle.

    One loop with the CombineFn's ``add_input`` called directly: no element is copied to
    take its key off, the hold is taken per element only when the timestamp combiner reads
    timestamps, and the metrics step is set once around the loop rather than per call.
    """
    fn = holder.get()
    scoped = fn if isinstance(fn, StepScopedCombineFn) else None
    raw = scoped.fn if scoped is not None else fn
    add_input, create = raw.add_input, raw.create_accumulator
    output_time = holds.output_time
    combine_holds = holds.combine
    per_element_hold = not holds.depends_only_on_window
    counts_values = op.combine_fn is None  # a GroupByKey: its accumulators grow per element
    interval_window = IntervalWindow
    table: dict[tuple, list] = {}
    held = 0
    seen = 0
    current = _CURRENT
    outer_step = current.step
    if scoped is not None:
        current.step = scoped.precombine
    try:
        for wv in elements:
            seen += 1
            value = wv[0]
            if type(value) is tuple and len(value) == 2:
                key, inner = value
            else:
                try:
                    key, keyed = key_element(op, wv)
                except TransformError as error:
                    raise UserCodeError(op.label, op.location, error) from None
                inner = keyed.value
            for window in wv[2]:
                # records.group_key, inlined: this is once per element and window.
                if type(window) is interval_window:
                    compact: tuple = (key, window._bounds)
                else:
                    compact = (key, window)
                entry = table.get(compact)
                try:
                    if entry is None:
                        created = create()
                        added = add_input(created, inner)
                        if added is None:
                            accumulator_from(raw, "add_input", added, created)
                        table[compact] = [added, output_time(window, wv[1]) if per_element_hold else None]
                        held += 1
                    else:
                        accumulator = entry[0]
                        added = add_input(accumulator, inner)
                        if added is None:
                            accumulator_from(raw, "add_input", added, accumulator)
                        entry[0] = added
                        if per_element_hold:
                            entry[1] = combine_holds(entry[1], output_time(window, wv[1]))
                        if counts_values:
                            held += 1
                except Exception as error:
                    raise UserCodeError(op.label, op.location, error, inner) from error
            if held >= MAX_TABLE_ENTRIES:
                current.step = outer_step
                yield from table.items()
                table = {}
                held = 0
                if scoped is not None:
                    current.step = scoped.precombine
    except Exception:
        task_failed()
        raise
    finally:
        current.step = outer_step
    counter.add(seen)
    yield from table.items()


def _merge_partials(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, memory_limit: int, pairs: Iterable[tuple]) -> Iterator[tuple]:
    """The shuffled partials of one partition merged per (key, window), through PySpark's
    merger, which spills to disk when the partition outgrows ``memory_limit`` MB."""
    from pyspark.shuffle import Aggregator, ExternalMerger

    merge = functools.partial(_merge_combiners, op, holder, holds)
    merger: Any = ExternalMerger(Aggregator(_unchanged, merge, merge), memory_limit)
    # The merger holds every partial until the panes go out, so the GC's passes while they
    # arrive free nothing, and each pass over the old generation rescans all of them (the
    # partials' lists are never untracked): about a fifth of the merge's CPU for 30,000
    # groups in a partition (more where the heap is bigger). A spill collects explicitly.
    with gc_paused():
        merger.mergeCombiners(iter(pairs))
    return merger.items()


def _unchanged(combiner: list) -> list:
    return combiner


def _merge_combiners(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, left: list, right: list) -> list:
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
    # The CombineFn's extract_output called directly, in its step (as the scoped fn would,
    # without two more Python calls per group); the step is set around the call alone, as
    # the pane is then handed to the stage's body, which runs in its own.
    scoped = fn if isinstance(fn, StepScopedCombineFn) else None
    extract_output = scoped.fn.extract_output if scoped is not None else fn.extract_output
    extract_step = scoped.extract if scoped is not None else None
    current = _CURRENT
    pane_timestamp = holds.pane_timestamp
    single_pane_stamp = single_pane_timestamp(op.windowing, holds.trigger)
    # Beam's batch runner: default windowing gives each key one last pane; otherwise the
    # default trigger never finishes, so is_last is False.
    pane = PaneInfo(True, single_pane_stamp is not None, PaneInfoTiming.ON_TIME, 0, 0)
    windows: dict = {}
    # Per interval window (compact bounds) and for the global window: the one windows tuple
    # their panes share (so that pickling them for the driver writes it once per batch, and
    # the driver holds one), and its last instant. A window of another class, which may
    # carry data beyond what makes it equal, keeps its own.
    per_window: dict[Any, tuple[tuple, int]] = {}
    for compact, (accumulator, hold) in pairs:
        key, bounds = compact
        shareable = type(bounds) is tuple or type(bounds) is GlobalWindow
        shared = per_window.get(bounds) if shareable else None
        if shared is None:
            window = window_of_group_key(compact, windows)
            shared = ((window,), last_instant(window))
            if shareable:
                per_window[bounds] = shared
        in_windows, end = shared
        outer_step = current.step
        if extract_step is not None:
            current.step = extract_step
        try:
            output = extract_output(accumulator)
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, key) from error
        finally:
            current.step = outer_step
        timestamp = pane_timestamp(end, hold) if single_pane_stamp is None else single_pane_stamp
        yield new_windowed_value(((key, output), timestamp, in_windows, pane))


def group(
    rdd: Any, op: GroupOp, num_partitions: int, overlapping_window_rule: bool, counter: Any, channel: MetricsChannel
) -> Any:
    """An RDD of the panes of ``op`` over ``rdd`` (one per key and window)."""
    from pyspark.rdd import _parse_memory, portable_hash

    fn = _SetUpOnce(step_scoped(op.combine_fn, op.label) if op.combine_fn is not None else _ListCombineFn())
    holds = HoldPolicy(op.windowing, overlapping_window_rule=overlapping_window_rule)
    memory_limit = _parse_memory(rdd.context.getConf().get("spark.python.worker.memory", "512m"))
    partials = rdd.mapPartitions(functools.partial(metered, channel, _precombine, op, fn, holds, counter))
    shuffled = partials.partitionBy(num_partitions, portable_hash)
    merged = shuffled.mapPartitions(
        functools.partial(metered, channel, _merge_partials, op, fn, holds, memory_limit), preservesPartitioning=True
    )
    return merged.mapPartitions(functools.partial(metered, channel, _panes, op, fn, holds))
