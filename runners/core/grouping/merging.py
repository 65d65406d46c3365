"""Merging windows (sessions): fold a bundle's new windows into a key's open windows.

When a bundle brings windows the key has no open state for, the window fn decides which
windows merge. The merged window gets the union of the parts' buffered values (or their
merged accumulators), their trigger state merged by the trigger machines' rules and their
timers, and their holds merged by the timestamp combiner (DESIGN §3; Beam Python drops
them). Pane indices survive only when the merged window is itself one of the parts, as in
Beam Python.

Closed windows (their trigger finished) follow Beam Java's ``ReduceFnRunner``, which takes
a window out of its active set when its trigger closes and keeps only the closed mark until
garbage collection:

- a closed window takes no part in merging, so it does not close the windows that overlap
  it later (Java's ``testMergingWithClosedDoesNotPoison``); a bundle's window equal to a
  closed one is merged as a new window with no state;
- a merge whose result *is* a closed window (same bounds, not yet collected) leaves it
  closed: the buffered contents of the windows merged into it, and the bundle's elements
  whose windows merged into it, are discarded and counted as ``MERGED_INTO_CLOSED``
  (Java drops such new elements as closed-window drops and loses the buffered contents
  without a count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from sparkbeam.combine import CombineFn, accumulator_from
from sparkbeam.runners.core.grouping.drops import DropReason, GroupingStats
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.grouping.triggers import (
    TriggerContext,
    TriggerMachine,
    merge_trigger_cells,
)
from sparkbeam.runners.core.grouping.window_state import KeyState, WindowState
from sparkbeam.window import BoundedWindow, WindowFn

__all__ = ["Buckets", "WindowMerger"]

# A bundle's elements per window: values, and timestamps when the combiner needs them.
Buckets = dict[BoundedWindow, tuple[list[Any], "list[int] | None"]]


_B = TypeVar("_B")


def _bucket_size(bucket: tuple[list[Any], list[int] | None]) -> int:
    return len(bucket[0])


def _join_buckets(bucket: tuple[list[Any], list[int] | None], other: tuple[list[Any], list[int] | None]) -> None:
    bucket[0].extend(other[0])
    if bucket[1] is not None and other[1] is not None:
        bucket[1].extend(other[1])


class _MergeCollector(WindowFn.MergeContext):
    """Records the merges a merging window fn asks for."""

    def __init__(self, windows: Iterable[BoundedWindow]) -> None:
        super().__init__(windows)
        self.merges: list[tuple[list[BoundedWindow], BoundedWindow]] = []

    def merge(self, to_be_merged: Iterable[BoundedWindow], merge_result: BoundedWindow) -> None:
        self.merges.append((list(to_be_merged), merge_result))


class WindowMerger:
    """Merges windows of one key for a merging window fn."""

    def __init__(
        self,
        window_fn: WindowFn,
        machine: TriggerMachine,
        holds: HoldPolicy,
        combine_fn: CombineFn | None,
    ) -> None:
        self.window_fn = window_fn
        self.machine = machine
        self.holds = holds
        self.combine_fn = combine_fn
        self._ctx = TriggerContext()

    def merge_bundle(
        self,
        state: KeyState,
        by_window: dict[BoundedWindow, _B],
        now: int,
        stats: GroupingStats,
        size: Callable[[Any], int] = _bucket_size,
        join: Callable[[Any, Any], None] = _join_buckets,
    ) -> dict[BoundedWindow, _B]:
        """Merge the bundle's new windows with the key's open ones; return the buckets
        re-keyed by the windows they now belong to, without those that merged into a
        closed window (counted in ``stats``).

        A bucket is a window's raw values (``Buckets``) or, when the combine was lifted,
        its partials (``size`` says how many elements a bucket holds, ``join`` adds the
        second of two buckets that now share a window to the first)."""
        windows = state.windows
        open_windows = [window for window, window_state in windows.items() if not window_state.closed]
        new_windows = [window for window in by_window if not _is_open(windows.get(window))]
        if not new_windows:
            return by_window
        collector = _MergeCollector([*open_windows, *new_windows])
        self.window_fn.merge(collector)
        if not collector.merges:
            return by_window
        merged_away: dict[BoundedWindow, BoundedWindow] = {}
        for parts, result in collector.merges:
            for window in parts:
                if window != result:
                    merged_away[window] = result
            members = [window for window in parts if _is_open(windows.get(window))]
            result_state = windows.get(result)
            if result_state is not None and result_state.closed:
                self._discard_into_closed(members, windows, stats)
                continue
            if result_state is not None and result not in members:
                members.append(result)
            if members:
                windows[result] = self._merge_states(result, members, parts, windows, now)
        remapped: dict[BoundedWindow, _B] = {}
        for window, arrived in by_window.items():
            target = self._final_window(window, merged_away)
            if target != window and not _is_open_or_absent(windows.get(target)):
                stats.discard(DropReason.MERGED_INTO_CLOSED, size(arrived))
                continue
            bucket = remapped.get(target)
            if bucket is None:
                remapped[target] = arrived
            else:
                join(bucket, arrived)
        return remapped

    def _discard_into_closed(
        self, members: list[BoundedWindow], windows: dict[BoundedWindow, WindowState], stats: GroupingStats
    ) -> None:
        """The open windows ``members`` merge into a closed window: it stays closed, and
        what they buffered and had not emitted is dropped."""
        for window in members:
            stats.discard(DropReason.MERGED_INTO_CLOSED, windows.pop(window).pending)

    def _final_window(
        self, window: BoundedWindow, merged_away: dict[BoundedWindow, BoundedWindow]
    ) -> BoundedWindow:
        target = window
        for _ in range(len(merged_away) + 1):
            if target not in merged_away:
                return target
            target = merged_away[target]
        msg = f"{self.window_fn!r} merged windows in a cycle starting at {window!r}"
        raise RuntimeError(msg)

    def _merge_states(
        self,
        result: BoundedWindow,
        members: list[BoundedWindow],
        parts: Sequence[BoundedWindow],
        windows: dict[BoundedWindow, WindowState],
        now: int,
    ) -> WindowState:
        states = [windows.pop(window) for window in members]
        merged = WindowState()
        contents = [s.contents for s in states if s.contents is not None]
        if len(contents) == 1:
            merged.contents = contents[0]
        elif contents:
            if self.combine_fn is None:
                merged.contents = [value for part in contents for value in part]
            else:
                merged.contents = accumulator_from(
                    self.combine_fn, "merge_accumulators", self.combine_fn.merge_accumulators(contents), contents
                )
        merged.pending = sum(s.pending for s in states)
        merged.gc_hold = any(s.gc_hold for s in states)
        merged.hold = self.holds.merge(result, [s.hold for s in states])
        for window, window_state in zip(members, states):
            if window == result:
                merged.index = window_state.index
                merged.nonspeculative_index = window_state.nonspeculative_index
        merge_trigger_cells(self.machine, states, merged)
        self._ctx.bind(merged, result, now)
        self.machine.on_merge(self._ctx, parts)
        return merged


def _is_open(window_state: WindowState | None) -> bool:
    return window_state is not None and not window_state.closed


def _is_open_or_absent(window_state: WindowState | None) -> bool:
    return window_state is None or not window_state.closed
