"""Batch grouping as a lifted combine on (key, window).

In batch, a grouping whose trigger is the default one fires exactly one pane per key and
window when the watermark jumps to +inf, so it needs no trigger machinery: each partition
combines what it holds per (key, window) before the shuffle (combiner lifting) and the
merge after it yields the pane. A GroupByKey is the same with lists as accumulators. The
pane's timestamp follows the timestamp combiner (with the overlapping-window rule; the
rules are ``runners/core/grouping/holds.py``'s), and its pane info is what Beam's batch runner
gives. It drops nothing: in batch no window is late, and the default trigger never closes
one, so every (element, window) pair reaches a pane.

The shuffle's keys are compact (``records.group_key``): (key, start, end) in microseconds
for an interval window. The map side is one loop of sparkbeam's own over a bounded table
(``_precombine``), not PySpark's ``combineByKey``, whose merger calls three Python
functions per element; the merge after the shuffle is PySpark's merger, which spills.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

import attrs
from pyspark.rdd import portable_hash

from sparkbeam.combine import CombineFn, accumulator_from
from sparkbeam.metrics.execution import enter_step, in_step, in_step_1, in_step_2, leave_step
from sparkbeam.runners.core.elements.dofn_invoker import SideInputs
from sparkbeam.runners.core.elements.fused import FusedBody
from sparkbeam.runners.core.elements.gc_pause import gc_paused
from sparkbeam.runners.core.elements.metrics import StepScopedCombineFn, step_scoped
from sparkbeam.runners.core.grouping.grouping_step import key_element, ungroupable
from sparkbeam.runners.core.grouping.holds import HoldPolicy, last_instant, single_pane_timestamp
from sparkbeam.runners.core.grouping.keys import GroupingKey, UngroupableKeyError, grouping_key
from sparkbeam.runners.core.grouping.records import window_of_group_key
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import GroupOp
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.spark.metrics import MetricsChannel, metered, task_failed
from sparkbeam.utils.windowed_value import (
    PANE_INFO_UNKNOWN,
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
    new_windowed_value,
)
from sparkbeam.window import GlobalWindow, IntervalWindow

__all__ = ["MapSideTable", "UpstreamBody", "compact_key_hash", "group"]


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


class MapSideTable:
    """One partition's map side of a batch grouping: an accumulator per compact (key,
    window), filled by ``add_elements`` (a list of elements, one loop) and, from a fused
    body whose re-stamping Map feeds the grouping (``add_stamped``), one element at a time
    with no element built. Its records go to the shuffle as (compact key, (accumulator,
    hold)).

    The CombineFn's ``add_input`` is called directly: no element is copied to take its key
    off, the hold is taken per element only when the timestamp combiner reads timestamps,
    and the metrics step is the combine's own around each call. The accumulators are a
    dict of their own (holds in another, when kept) and the records are tuples: a list per
    entry or record stays tracked by Python's cyclic garbage collector, so that a
    partition's worth of them reaches its oldest generation and sets off full collections
    of the worker's heap (a tuple of untracked values is untracked at its first collection).

    A front end's CombineFn may be called directly for the table's life (``direct_calls``:
    a Beam CombineFn, with Beam's metrics tracking set once rather than checked per call);
    ``close`` ends that once the table has its last element.

    The table is bounded: once it holds ``MAX_TABLE_ENTRIES`` groups (or, for a GroupByKey,
    buffered values), its records move to ``flushed``, to go on to the shuffle, and it
    starts afresh.
    """

    def __init__(self, op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy) -> None:
        fn = holder.get()
        scoped = fn if isinstance(fn, StepScopedCombineFn) else None
        self.op = op
        self.fn = scoped.fn if scoped is not None else fn
        #: the combine's metrics step, or None to leave the current one
        self.step = scoped.precombine if scoped is not None else None
        #: whose ``create_accumulator`` and ``add_input`` the table calls, and what ends that
        direct = getattr(self.fn, "direct_calls", None)
        self.calls: Any = self.fn
        self._end_calls: Callable[[], None] = _nothing_to_end
        if direct is not None:
            self.calls, self._end_calls = direct()
        self.holds = holds
        self.per_element_hold = not holds.depends_only_on_window
        self.counts_values = op.combine_fn is None  # a GroupByKey: its accumulators grow per element
        # Cleared in place when flushed, never replaced: ``add_stamped`` holds them.
        self.accumulators: dict[tuple, Any] = {}
        self.held_times: dict[tuple, Any] = {}  # per_element_hold only
        #: groups (or a GroupByKey's values) in the table
        self.held = 0
        #: elements added, in all
        self.seen = 0
        #: records of the tables that filled up, for the shuffle
        self.flushed: list[tuple[tuple, tuple]] = []
        #: ``add_stamped(value, micros, windows)``: what ``add_elements`` does for the
        #: element ``(value, micros, windows, PANE_INFO_UNKNOWN)``
        self.add_stamped: Callable[[Any, int, tuple], None] = self._stamped_adder()

    def add_elements(self, elements: Iterable[WindowedValue]) -> None:
        op, raw, holds = self.op, self.fn, self.holds
        add_input, create = self.calls.add_input, self.calls.create_accumulator
        output_time, combine_holds = holds.output_time, holds.combine
        per_element_hold, counts_values = self.per_element_hold, self.counts_values
        accumulators, held_times = self.accumulators, self.held_times
        interval_window = IntervalWindow
        absent = _ABSENT
        held = self.held
        seen = 0
        outer_step = enter_step(self.step) if self.step is not None else None
        try:
            for wv in elements:
                seen += 1
                value = wv[0]
                if type(value) is tuple and len(value) == 2:
                    key, inner = value
                    kind = type(key)
                    if kind is not str and kind is not int and kind is not bytes:  # keys.grouping_key's own
                        try:
                            key = grouping_key(key)
                        except UngroupableKeyError as error:
                            raise UserCodeError(op.label, op.location, ungroupable(op, key, error)) from None
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
                    accumulator = accumulators.get(compact, absent)
                    try:
                        if accumulator is absent:
                            accumulator = create()
                            held += 1
                            if per_element_hold:
                                held_times[compact] = output_time(window, wv[1])
                        else:
                            if per_element_hold:
                                held_times[compact] = combine_holds(held_times[compact], output_time(window, wv[1]))
                            if counts_values:
                                held += 1
                        added = add_input(accumulator, inner)
                        if added is None:
                            accumulator_from(raw, "add_input", added, accumulator)
                        accumulators[compact] = added
                    except Exception as error:
                        raise UserCodeError(op.label, op.location, error, inner) from error
                if held >= MAX_TABLE_ENTRIES:
                    self.flushed.extend(self.drain())
                    held = 0
        finally:
            if outer_step is not None:
                leave_step(outer_step)
            self.seen += seen
            self.held = held

    def keyed_stamped_adder(self, key_type: type, others: Callable[[Any, int, tuple], None]) -> Callable[[Any, int, tuple], None] | None:
        """``add_stamped`` for (key, value) pairs whose key is exactly ``key_type`` alone,
        the parts of any other element handed to ``others`` (which may make something else
        of them first: a Beam key coded); None where the table takes no parts at all (the
        holds read timestamps, or a GroupByKey)."""
        if self.per_element_hold or self.counts_values:
            return None
        return self._stamped_adder(key_type, others)

    def _stamped_adder(
        self, key_type: type | None = None, others: Callable[[Any, int, tuple], None] | None = None
    ) -> Callable[[Any, int, tuple], None]:
        """``add_stamped``: for a (key, value) pair in one interval window under holds
        that need no timestamps, the loop of ``add_elements`` for that one element, else
        ``add_elements`` of the element built (``keyed_stamped_adder``: ``others``)."""
        unknown = PANE_INFO_UNKNOWN

        def add_built(value: Any, micros: int, windows: tuple) -> None:
            self.add_elements((new_windowed_value((value, micros, windows, unknown)),))

        if self.per_element_hold or self.counts_values:
            return add_built
        fallback = add_built if others is None else others
        op, raw, step = self.op, self.fn, self.step
        add_input, create = self.calls.add_input, self.calls.create_accumulator
        if step is not None:
            # The CombineFn's calls in its step, the caller's put back after each (made
            # once: this is once per element).
            add_input, create = in_step_2(step, add_input), in_step(step, create)
        accumulators = self.accumulators
        interval_window = IntervalWindow
        absent = _ABSENT

        def add_stamped(value: Any, micros: int, windows: tuple) -> None:
            if type(value) is not tuple or len(value) != 2 or len(windows) != 1 or type(windows[0]) is not interval_window:
                fallback(value, micros, windows)
                return
            key, inner = value
            kind = type(key)
            if kind is not key_type:
                if key_type is not None:
                    fallback(value, micros, windows)
                    return
                if kind is not str and kind is not int:  # what the engine groups by (keys.py)
                    try:
                        key = grouping_key(key)
                    except UngroupableKeyError as error:
                        raise UserCodeError(op.label, op.location, ungroupable(op, key, error)) from None
            compact = (key, windows[0]._bounds)
            accumulator = accumulators.get(compact, absent)
            new_group = accumulator is absent
            try:
                if new_group:
                    accumulator = create()
                    self.held += 1
                added = add_input(accumulator, inner)
                if added is None:
                    accumulator_from(raw, "add_input", added, accumulator)
            except Exception as error:
                raise UserCodeError(op.label, op.location, error, inner) from error
            accumulators[compact] = added
            self.seen += 1
            # Only a new group fills the table further.
            if new_group and self.held >= MAX_TABLE_ENTRIES:
                self.flushed.extend(self.drain())

        return add_stamped

    def close(self) -> None:
        """After the table's last element: the CombineFn is no longer called directly."""
        end, self._end_calls = self._end_calls, _nothing_to_end
        end()

    def take_flushed(self) -> list[tuple[tuple, tuple]]:
        """The records of the tables that filled up since last asked."""
        flushed, self.flushed = self.flushed, []
        return flushed

    def drain(self) -> list[tuple[tuple, tuple]]:
        """The table's records; the table starts afresh."""
        accumulators, held_times = self.accumulators, self.held_times
        # Each accumulator crosses the shuffle: compacted first, as Beam's runners do
        # (``CombineFn.compact``; the identity unless the CombineFn defines it).
        shrink = self.fn.compact
        try:
            if held_times:
                records = [(compact, (shrink(accumulator), held_times[compact])) for compact, accumulator in accumulators.items()]
            else:
                records = [(compact, (shrink(accumulator), None)) for compact, accumulator in accumulators.items()]
        except Exception as error:
            raise UserCodeError(self.op.label, self.op.location, error) from error
        accumulators.clear()
        held_times.clear()
        self.held = 0
        return records


#: what ``dict.get`` gives for a group not in the table (an accumulator may be None)
_ABSENT = object()


def _nothing_to_end() -> None:
    return None


#: how many elements the map side takes from its input at a time (``_precombine``)
CHUNK = 256


def _precombine(
    op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, counter: Any, elements: Iterable[WindowedValue]
) -> Iterator[tuple[tuple, tuple]]:
    """(compact (key, window), (accumulator, hold)) per key and window of one partition:
    the combine lifted before the shuffle (``MapSideTable``), for elements from an RDD."""
    table = MapSideTable(op, holder, holds)
    iterator = iter(elements)
    try:
        while True:
            chunk = list(islice(iterator, CHUNK))
            table.add_elements(chunk)
            if table.flushed:
                yield from table.take_flushed()
            if len(chunk) < CHUNK:
                break
    except Exception:
        task_failed()
        raise
    finally:
        table.close()
    counter.add(table.seen)
    yield from table.drain()


def _precombine_body(
    stage: Stage,
    side_broadcast: Any,
    body_counters: Any,
    pcoll: int,
    op: GroupOp,
    holder: _SetUpOnce,
    holds: HoldPolicy,
    counter: Any,
    values: bool,
    elements: Iterable[Any],
) -> Iterator[tuple[tuple, tuple]]:
    """``_precombine`` over the output of the upstream stage's bare body, run in the same
    pass (``UpstreamBody``): the body's outputs fill the table as it makes them, a list
    at a time, and a re-stamping Map's into fixed windows one at a time with no element
    built (``MapSideTable.add_stamped``)."""
    table = MapSideTable(op, holder, holds)
    try:
        side = SideInputs(side_broadcast.value) if side_broadcast is not None else None
        body = FusedBody(stage, side, bare=True, stamped_exit=table.add_stamped, keyed_stamped_exit=table.keyed_stamped_adder)
        for chunk in body.run_bare_chunks(pcoll, elements, values=values):
            table.add_elements(chunk)
            if table.flushed:
                yield from table.take_flushed()
    finally:
        table.close()
    # Spark has consumed the body's whole output: the bundle is done.
    body.finalize_bundle()
    if body_counters is not None:
        body_counters[0].add(body.elements_in)
        body_counters[1].add(table.seen)  # what the body emitted, stamped or built
    counter.add(table.seen)
    yield from table.drain()


@attrs.frozen
class UpstreamBody:
    """The bare fused body of the stage upstream of a batch grouping, not yet run, that
    the grouping alone reads (``Strategy.MAP_SIDE_PASS``, ``element_stages.py``): it runs it in its
    map side's pass (``_precombine_body``) rather than over its output RDD."""

    source: Any  # the RDD of the body's input elements
    stage: Any  # the stage as shipped (stage_records.shippable)
    side: Any  # its side inputs' broadcast, or None
    counters: Any  # its (elements in, elements out) accumulators
    pcoll: int  # the PCollection its elements enter as
    values: bool = False  # ``source`` holds the elements' values alone (FusedBody.run_bare_chunks)


def _merge_partials(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, memory_limit: int, pairs: Iterable[tuple]) -> Iterator[tuple]:
    """The shuffled partials of one partition merged per (key, window), through PySpark's
    merger, which spills to disk when the partition outgrows ``memory_limit`` MB."""
    from pyspark.shuffle import Aggregator, ExternalMerger

    merge = functools.partial(_merge_combiners, op, holder, holds)
    merger: Any = ExternalMerger(Aggregator(_unchanged, merge, merge), memory_limit)
    # The merger holds every partial until the panes go out, so the GC's passes while they
    # arrive free nothing, and each pass over the old generation rescans all of them (what
    # the merge builds is tracked until a pass untracks it): about a fifth of the merge's CPU for 30,000
    # groups in a partition (more where the heap is bigger). A spill collects explicitly.
    with gc_paused():
        merger.mergeCombiners(iter(pairs))
    return merger.items()


def _unchanged(combiner: tuple) -> tuple:
    return combiner


def _merge_combiners(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, left: tuple, right: tuple) -> tuple:
    fn = holder.get()
    try:
        both = [left[0], right[0]]
        merged = accumulator_from(fn, "merge_accumulators", fn.merge_accumulators(both), both)
    except Exception as error:
        task_failed()
        raise UserCodeError(op.label, op.location, error) from error
    return merged, holds.combine(left[1], right[1])


def _panes(op: GroupOp, holder: _SetUpOnce, holds: HoldPolicy, pairs: Iterable[tuple]) -> Iterator[WindowedValue]:
    fn = holder.get()
    # The CombineFn's extract_output called directly, in its step (as the scoped fn would,
    # without two more Python calls per group); the step is set around the call alone, as
    # the pane is then handed to the stage's body, which runs in its own.
    scoped = fn if isinstance(fn, StepScopedCombineFn) else None
    calls = scoped.fn if scoped is not None else fn
    # A front end's CombineFn called directly, as by the map side (``MapSideTable``).
    direct = getattr(calls, "direct_calls", None)
    end_calls = _nothing_to_end
    if direct is not None:
        calls, end_calls = direct()
    try:
        yield from _extracted_panes(op, holds, calls.extract_output, scoped.extract if scoped is not None else None, pairs)
    finally:
        end_calls()


def _extracted_panes(
    op: GroupOp, holds: HoldPolicy, extract_output: Callable[[Any], Any], extract_step: str | None, pairs: Iterable[tuple]
) -> Iterator[WindowedValue]:
    if extract_step is not None:
        # In its step alone: the pane is then handed to the stage's body, in its own.
        extract_output = in_step_1(extract_step, extract_output)
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
    grouped_by_form = GroupingKey
    for compact, (accumulator, hold) in pairs:
        key, bounds = compact
        if type(key) is grouped_by_form:  # the user's key (keys.user_key, inlined)
            key = key.key
        shareable = type(bounds) is tuple or type(bounds) is GlobalWindow
        shared = per_window.get(bounds) if shareable else None
        if shared is None:
            window = window_of_group_key(compact, windows)
            shared = ((window,), last_instant(window))
            if shareable:
                per_window[bounds] = shared
        in_windows, end = shared
        try:
            output = extract_output(accumulator)
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, key) from error
        timestamp = pane_timestamp(end, hold) if single_pane_stamp is None else single_pane_stamp
        yield new_windowed_value(((key, output), timestamp, in_windows, pane))


# Spark starts every Python worker with the same PYTHONHASHSEED (portable_hash refuses to
# run without one), so that str and bytes hash alike in every worker.
_HASH_SEEDED = "PYTHONHASHSEED" in os.environ


def compact_key_hash(compact: tuple) -> int:
    """The shuffle's partition function: ``hash`` of a compact key whose user key is a
    str, int or bytes and whose window is an interval window's bounds (ints), which
    hashes in C; PySpark's ``portable_hash`` of anything else (it hashes None alike in
    every process, and calls itself per member of a tuple, five Python calls for a
    compact key). Any function that gives equal keys one partition in every worker will
    do: a batch grouping's shuffle meets no state partitioned before it."""
    key, window = compact
    kind = type(key)
    if type(window) is tuple and (kind is str or kind is int or kind is bytes) and _HASH_SEEDED:
        return hash(compact)
    return portable_hash(compact)


def group(
    rdd: Any,
    op: GroupOp,
    num_partitions: int,
    overlapping_window_rule: bool,
    counter: Any,
    channel: MetricsChannel,
    upstream: UpstreamBody | None = None,
) -> Any:
    """An RDD of the panes of ``op`` over ``rdd`` (one per key and window); over the
    output of ``upstream``, run in the same pass, when given (``rdd`` is then its output,
    unused)."""
    from pyspark.rdd import _parse_memory

    fn = _SetUpOnce(step_scoped(op.combine_fn, op.label) if op.combine_fn is not None else _ListCombineFn())
    holds = HoldPolicy(op.windowing, overlapping_window_rule=overlapping_window_rule)
    memory_limit = _parse_memory(rdd.context.getConf().get("spark.python.worker.memory", "512m"))
    if upstream is not None:
        precombine = functools.partial(
            metered, channel, _precombine_body, upstream.stage, upstream.side, upstream.counters, upstream.pcoll, op, fn, holds, counter, upstream.values
        )
        partials = upstream.source.mapPartitions(precombine)
    else:
        partials = rdd.mapPartitions(functools.partial(metered, channel, _precombine, op, fn, holds, counter))
    shuffled = partials.partitionBy(num_partitions, compact_key_hash)
    merged = shuffled.mapPartitions(
        functools.partial(metered, channel, _merge_partials, op, fn, holds, memory_limit), preservesPartitioning=True
    )
    return merged.mapPartitions(functools.partial(metered, channel, _panes, op, fn, holds))
