"""The per-key event-time grouping engine: windows, triggers, holds, lateness, GC.

A runner keeps one ``KeyState`` per key and hands the engine each step's elements
(``add_elements``) and each watermark or clock move (``fire_timers``); the engine returns
the panes that fired, as ``WindowedValue((key, payload), pane_timestamp, (window,), pane)``
where the payload is the list of grouped values, or ``combine_fn.extract_output(acc)``.

``build_grouping_engine`` chooses, once per stage, the strategy for the stage's windowing
(``grouping_strategies.py``): end-of-window firing for the default trigger, the trigger
state machines for any other trigger or merging windows, or Beam's single pane per key in
batch. They share bucketing, contents, panes and garbage collection
(``grouping_engine.py``); holds and pane timestamps are ``holds.py``'s, drops are counted
through ``drops.py``.

The semantics are DESIGN §3: Beam Python's ``GeneralTriggerDriver`` (pane info, holds,
merging, the trigger protocol) plus Beam Java's garbage collection (a final pane for data
still pending when the watermark passes a window's GC time, then all of its state is
deleted) and the GC hold. ``batch=True`` reproduces the groupings of Beam's FnApiRunner in
batch. Where this differs from Beam Python, on purpose:

- a pane fired by elements is judged (EARLY / LATE, keep the hold) against the input
  watermark its trigger was evaluated at; Beam passes the output watermark there, which
  its harness sets equal to the input watermark;
- a window whose trigger finished releases its hold (Beam keeps it and stalls);
- all due timers of a window in one time domain are consumed by one trigger evaluation
  (Beam fires each, which emits empty duplicate panes for nested watermark triggers);
- holds of merging windows are merged, not dropped;
- a window whose trigger finished takes no part in later merges, and a merge whose result
  is such a window leaves it closed (Beam Java's ``ReduceFnRunner``; see ``merging.py``).

Data leaves the engine in a pane or through ``GroupingStats.discard``, which counts it by
reason (``drops.py``): late, closed window, merged into a closed window, expired state.

>>> from sparkbeam.windowing import Windowing
>>> from sparkbeam.window import FixedWindows, IntervalWindow
>>> from sparkbeam.utils.windowed_value import WindowedValue
>>> engine = build_grouping_engine(Windowing(FixedWindows(10)))
>>> engine  # doctest: +ELLIPSIS
EndOfWindowGrouping(Windowing(...))
>>> state, stats = engine.new_key_state(), GroupingStats()
>>> window = (IntervalWindow(0, 10),)
>>> engine.add_elements(state, "k", [WindowedValue("a", 1_000_000, window)],
...                     input_watermark=0, output_watermark=0, now=0, stats=stats)
[]
>>> [pane.value for pane in engine.fire_timers(state, "k", input_watermark=10_000_000,
...                                            now=0, stats=stats)]
[('k', ['a'])]

An engine is not thread-safe (it reuses one trigger context); use one per task.
"""

from __future__ import annotations

from sparkbeam.combine import CombineFn
from sparkbeam.runners.core.elements.metrics import step_scoped
from sparkbeam.runners.core.grouping.drops import DropReason, GroupingStats
from sparkbeam.runners.core.grouping.grouping_engine import GroupingEngine
from sparkbeam.runners.core.grouping.grouping_strategies import (
    EndOfWindowGrouping,
    SinglePaneGrouping,
    TriggeredGrouping,
)
from sparkbeam.runners.core.grouping.holds import HoldPolicy, single_pane_timestamp
from sparkbeam.runners.core.grouping.window_state import KeyState, WindowState
from sparkbeam.runners.core.lowering.ops import GroupOp
from sparkbeam.trigger import Always, DefaultTrigger, Never
from sparkbeam.windowing import Windowing

__all__ = [
    "DropReason",
    "GroupingEngine",
    "GroupingStats",
    "KeyState",
    "WindowState",
    "build_grouping_engine",
    "engine_for",
]


def build_grouping_engine(
    windowing: Windowing,
    *,
    combine_fn: CombineFn | None = None,
    overlapping_window_rule: bool = True,
    batch: bool = False,
    keep_pane_indices: bool = True,
) -> GroupingEngine:
    """The grouping strategy for ``windowing``.

    ``overlapping_window_rule`` switches DESIGN §3's rule for overlapping windows (off:
    Beam's current behaviour). ``batch=True`` reproduces Beam's FnApiRunner batch grouping:
    the runner then calls ``add_elements`` with every element at the minimum watermark and
    ``fire_timers`` at the maximum watermark and clock. ``keep_pane_indices=False`` (a
    grouping whose output panes nobody sees) forgets windows whose panes all fired.
    """
    trigger = windowing.triggerfn
    if batch and isinstance(trigger, Never):
        trigger = Always()  # Beam's batch grouping fires a Never trigger once, as Always
    holds = HoldPolicy(windowing, overlapping_window_rule=overlapping_window_rule, trigger=trigger)
    if batch:
        stamp = single_pane_timestamp(windowing, trigger)
        if stamp is not None:
            return SinglePaneGrouping(windowing, trigger, holds, combine_fn, pane_timestamp=stamp)
    if type(trigger) is DefaultTrigger and not windowing.windowfn.is_merging():
        return EndOfWindowGrouping(windowing, trigger, holds, combine_fn, keep_pane_indices=keep_pane_indices)
    return TriggeredGrouping(windowing, trigger, holds, combine_fn, keep_pane_indices=keep_pane_indices)


def engine_for(op: GroupOp, *, overlapping_window_rule: bool, batch: bool) -> GroupingEngine:
    """The engine of a grouping op, its CombineFn set up (this copy of it: on Spark, the
    one just unpickled on the executor), run in the grouping's step so that its metric
    updates land under its label."""
    combine_fn = step_scoped(op.combine_fn, op.label)
    if combine_fn is not None:
        combine_fn.setup()
    return build_grouping_engine(
        op.windowing,
        combine_fn=combine_fn,
        overlapping_window_rule=overlapping_window_rule,
        batch=batch,
        keep_pane_indices=op.keep_pane_indices,
    )
