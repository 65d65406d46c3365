"""Combiner lifting in streaming: combine per (key, window) before the shuffle.

A ``CombinePerKey`` step need not shuffle its raw elements: each partition combines what it
holds per (key, window) into a ``Partial`` (``records.py``) and only those cross the
shuffle; after it, the engine merges them into the key's state (``add_partials``) exactly
where it would have added the elements. Beam lifts combiners the same way (a partial
combine before the GroupByKey, a merge of accumulators after it).

Nothing the engine decides changes, because a ``Partial`` carries all the engine reads of
its elements:

- the accumulator (the CombineFn's add_input over them, in the partition's order; a
  CombineFn is commutative and associative, which is what Beam's lifting assumes too);
- the element count: element-count triggers (``AfterCount``, ``Repeatedly``, early and late
  firings), ``pending`` and the drop counts need the exact number of elements;
- the hold, by ``holds.py``'s rules at the step's output watermark, and whether any element
  was behind it (late data, which holds at GC time instead).

Firing within a step is not observable, so neither is the grouping of elements into
partials: the engine hands a trigger one step's elements of a window at once
(``on_element`` with their count, then one ``should_fire``), so ``AfterCount(3)`` over five
elements of one step fires once with all five whether they arrive as five elements or as
two partials of two and three. Beam's runners treat a combined bundle the same way, as its
input elements for count purposes. Late data is dropped after the shuffle, a partial at a
time (all of its elements share its window, hence its GC time), and counted by its count.
Processing-time and watermark triggers read no elements at all.

Lifted: every ``CombinePerKey`` over windows that do not merge, whatever its trigger (a
GroupByKey gains nothing from it: its accumulator is its list of elements).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.combine import CombineFn, accumulator_from
from sparkbeam.runners.core.grouping.grouping_step import key_element, ungroupable
from sparkbeam.runners.core.grouping.holds import HoldPolicy, output_time_ignores_window
from sparkbeam.runners.core.grouping.keys import UngroupableKeyError, grouping_key
from sparkbeam.runners.core.grouping.records import Partial
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import GroupOp
from sparkbeam.window import IntervalWindow

__all__ = ["lifts", "precombine"]


def lifts(op: GroupOp) -> bool:
    """Whether a grouping op is combined before its shuffle in a stream: a combine over
    windows that do not merge, or over merging windows (sessions) per proto-session where
    an element's output time does not depend on the window it merges into."""
    if op.combine_fn is None:
        return False
    return not op.windowing.windowfn.is_merging() or output_time_ignores_window(op.windowing)


def precombine(
    op: GroupOp,
    combine_fn: CombineFn,
    holds: HoldPolicy,
    output_watermark: int,
    elements: Iterable[Any],
) -> Iterator[tuple[Any, Partial]]:
    """(key, Partial) per key and window of one partition's elements (see the module docs).

    ``output_watermark`` is the stage's output watermark of the step, the one the engine
    judges holds against after the shuffle."""
    # Interval windows are grouped by their (start, end) integers: hashing window objects
    # costs Python-level calls per element.
    groups: dict[tuple, list] = {}
    per_element_hold = not holds.depends_only_on_window
    held_output_time = holds.held_output_time
    combine = holds.combine
    interval_window = IntervalWindow
    for wv in elements:
        value, timestamp, windows, _pane = wv
        if type(value) is tuple and len(value) == 2:
            key, value = value  # no copy of the element to take its key off
            kind = type(key)
            if kind is not str and kind is not int and kind is not bytes:  # keys.grouping_key's own, inlined
                try:
                    key = grouping_key(key)
                except UngroupableKeyError as error:
                    raise UserCodeError(op.label, op.location, ungroupable(op, key, error)) from None
        else:
            try:
                key, inner = key_element(op, wv)
            except TransformError as error:
                raise UserCodeError(op.label, op.location, error) from None
            value = inner.value
        for window in windows:
            # records.group_key, inlined: this is once per element and window.
            if type(window) is interval_window:
                group_key: tuple = (key, window._bounds)
            else:
                group_key = (key, window)
            group = groups.get(group_key)
            if group is None:
                group = groups[group_key] = [[], None, False, window, key]
            group[0].append(value)
            if per_element_hold:
                hold = held_output_time(window, timestamp, output_watermark)
                if hold is None:
                    group[2] = True
                else:
                    group[1] = combine(group[1], hold)
    # Under END_OF_WINDOW the hold is the window's end, which the engine sets after the
    # shuffle (a proto-session's end is not its merged session's).
    for values, hold, unheld, window, key in groups.values():
        try:
            created = combine_fn.create_accumulator()
            accumulator = accumulator_from(combine_fn, "add_inputs", combine_fn.add_inputs(created, values), created)
            accumulator = combine_fn.compact(accumulator)  # it crosses the shuffle, as in Beam
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, key) from error
        yield key, Partial(window, accumulator, len(values), hold, unheld)
