"""Why an element left a grouping stage without being in a pane, and the counters per reason.

Every (element, window) pair a grouping stage receives leaves it in one of two ways: in an
output pane, or through ``GroupingStats.discard`` with one of the reasons below. Nothing
else deletes buffered data, so in discarding mode the pairs that went in equal the values
in the panes plus the counted drops (checked on random streams by
tests/conformance/test_invariants.py).

>>> stats = GroupingStats()
>>> stats.discard(DropReason.LATE, 2)
>>> stats.late_dropped, stats.dropped
(2, 2)
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["DROP_COUNTERS", "DropReason", "GroupingStats"]


class DropReason(enum.Enum):
    """Why (element, window) pairs were discarded."""

    #: the window's GC time (end + allowed lateness) was behind the stage's input watermark
    LATE = "late"
    #: the window's trigger had finished
    CLOSED_WINDOW = "closed_window"
    #: merged (sessions) into a window whose trigger had finished: buffered contents of the
    #: windows that merged into it, and new elements that joined it
    MERGED_INTO_CLOSED = "merged_into_closed"
    #: still pending when the window was garbage-collected, and not emitted
    EXPIRED_STATE = "expired_state"


#: The counter of each reason, as named in ``StageSummary`` and ``WatermarkRecord``
#: (``late_dropped`` and ``closed_dropped`` are the names the README documents).
DROP_COUNTERS: dict[DropReason, str] = {
    DropReason.LATE: "late_dropped",
    DropReason.CLOSED_WINDOW: "closed_dropped",
    DropReason.MERGED_INTO_CLOSED: "merged_into_closed_dropped",
    DropReason.EXPIRED_STATE: "expired_state_dropped",
}


@attrs.define
class GroupingStats:
    """Counters the engine increments; the runner sums them per step and stage.

    Drops are counted in (element, window) pairs: an element in three sliding windows that
    are all late counts three times.
    """

    late_dropped: int = 0
    closed_dropped: int = 0
    merged_into_closed_dropped: int = 0
    expired_state_dropped: int = 0
    panes_fired: int = 0

    def discard(self, reason: DropReason, count: int) -> None:
        """Count ``count`` (element, window) pairs the engine throws away for ``reason``.

        The only way data leaves the engine other than in a pane: every discard calls it.
        """
        if count:
            name = DROP_COUNTERS[reason]
            setattr(self, name, getattr(self, name) + count)

    @property
    def dropped(self) -> int:
        """All drops, whatever the reason."""
        return sum(getattr(self, name) for name in DROP_COUNTERS.values())
