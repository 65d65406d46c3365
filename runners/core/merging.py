"""Merging windows (sessions): fold a bundle's new windows into a key's windows.

When a bundle brings windows the key does not have, the window fn decides which windows
merge. The merged window gets the union of the parts' buffered values (or their merged
accumulators), their trigger state merged by the trigger machines' rules and their
timers, their holds merged by the timestamp combiner (DESIGN §3; Beam Python drops them),
and it is closed if any part was. Pane indices survive only when the merged window is
itself one of the parts, as in Beam Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sparkbeam.combine import CombineFn
from sparkbeam.window import BoundedWindow, WindowFn

from .holds import HoldPolicy
from .triggers import TriggerContext, TriggerMachine, merge_trigger_cells
from .window_state import KeyState, WindowState

__all__ = ["Buckets", "WindowMerger"]

# A bundle's elements per window: values, and timestamps when the combiner needs them.
Buckets = dict[BoundedWindow, tuple[list[Any], "list[int] | None"]]


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

    def merge_bundle(self, state: KeyState, by_window: Buckets, now: int) -> Buckets:
        """Merge the bundle's new windows with the key's; return the buckets re-keyed by
        the windows they now belong to."""
        windows = state.windows
        new_windows = [window for window in by_window if window not in windows]
        if not new_windows:
            return by_window
        collector = _MergeCollector([*windows, *new_windows])
        self.window_fn.merge(collector)
        if not collector.merges:
            return by_window
        merged_away: dict[BoundedWindow, BoundedWindow] = {}
        for parts, result in collector.merges:
            for window in parts:
                if window != result:
                    merged_away[window] = result
            members = [window for window in parts if window in windows]
            if result in windows and result not in members:
                members.append(result)
            if members:
                windows[result] = self._merge_states(result, members, parts, windows, now)
        remapped: Buckets = {}
        for window, (values, timestamps) in by_window.items():
            target = self._final_window(window, merged_away)
            bucket = remapped.get(target)
            if bucket is None:
                remapped[target] = (values, timestamps)
            else:
                bucket[0].extend(values)
                if timestamps is not None:
                    bucket[1].extend(timestamps)  # type: ignore[union-attr]
        return remapped

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
                merged.contents = self.combine_fn.merge_accumulators(contents)
        merged.pending = any(s.pending for s in states)
        merged.gc_hold = any(s.gc_hold for s in states)
        merged.closed = any(s.closed for s in states)
        merged.hold = self.holds.merge(result, [s.hold for s in states])
        for window, window_state in zip(members, states):
            if window == result:
                merged.index = window_state.index
                merged.nonspeculative_index = window_state.nonspeculative_index
        if merged.closed:
            # A closed part closes the merged window: nothing more will be emitted from it.
            merged.contents, merged.pending, merged.hold, merged.gc_hold = None, False, None, False
            return merged
        merge_trigger_cells(self.machine, states, merged)
        self._ctx.bind(merged, result, now)
        self.machine.on_merge(self._ctx, parts)
        return merged
