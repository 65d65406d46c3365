"""What the grouping engine keeps per key and window: plain, picklable, compact.

A runner stores one ``KeyState`` per key between steps (in a Spark partition, in a
checkpoint); it pickles as positional tuples, with no field names per window.
"""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.window import BoundedWindow

from .triggers import TriggerCell

__all__ = ["KeyState", "WindowState"]


@attrs.define(slots=True, repr=False)
class WindowState(TriggerCell):
    """Everything the engine keeps for one (key, window).

    ``contents`` is the list of buffered values (or the combine accumulator), ``None`` when
    empty; ``pending`` counts the elements that arrived since the last pane (what would be
    lost, and is counted, if the window were discarded now); ``hold`` is the
    timestamp-combiner hold in microseconds; ``gc_hold`` says late data is pending, which
    holds the watermark at the window's GC time; ``closed`` marks a finished trigger.
    """

    contents: Any = None
    pending: int = 0
    hold: int | None = None
    gc_hold: bool = False
    index: int = 0
    nonspeculative_index: int = 0
    closed: bool = False

    def __reduce__(self):  # a positional tuple: no field names in every pickled window
        return (
            WindowState,
            (
                self.trigger_state,
                self.timers,
                self.contents,
                self.pending,
                self.hold,
                self.gc_hold,
                self.index,
                self.nonspeculative_index,
                self.closed,
            ),
        )

    def __repr__(self) -> str:
        flags = [name for name in ("pending", "gc_hold", "closed") if getattr(self, name)]
        return (
            f"WindowState(contents={self.contents!r}, hold={self.hold}, index={self.index}, "
            f"nonspeculative_index={self.nonspeculative_index}, flags={flags}, "
            f"trigger_state={self.trigger_state}, timers={self.timers})"
        )


@attrs.define(slots=True)
class KeyState:
    """All state of one key: its windows. Picklable; the runner stores it between steps."""

    windows: dict[BoundedWindow, WindowState] = attrs.Factory(dict)

    def __reduce__(self):
        return (KeyState, (self.windows,))
