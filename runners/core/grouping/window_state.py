"""What the grouping engine keeps per key and window: plain, picklable, compact.

A runner stores one ``KeyState`` per key between steps (in a Spark partition, in a
checkpoint); it pickles as positional tuples, with no field names per window.
"""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.runners.core.grouping.triggers import TriggerCell
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.window import BoundedWindow, IntervalWindow

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
    """All state of one key: its windows. Picklable; the runner stores it between steps.

    It pickles as a list of plain rows, one per window: an ``IntervalWindow`` as its
    bounds, then the window state's fields. Pickling then makes no Python-level call per
    window or per window state (a keyed stage pickles and unpickles all of its state every
    step), and unpickling rebuilds each interval window once per process, not per key.
    """

    windows: dict[BoundedWindow, WindowState] = attrs.Factory(dict)

    def __reduce__(self):
        rows = [
            (
                window._bounds if type(window) is IntervalWindow else window,
                state.trigger_state,
                state.timers,
                state.contents,
                state.pending,
                state.hold,
                state.gc_hold,
                state.index,
                state.nonspeculative_index,
                state.closed,
            )
            for window, state in self.windows.items()
        ]
        return (_key_state_from_rows, (rows,))


#: interval windows rebuilt from their bounds, shared by every key's state in this process
#: (a window is immutable); cleared when it grows past ``_WINDOW_CACHE_SIZE``
_WINDOW_CACHE: dict[tuple[int, int], IntervalWindow] = {}
_WINDOW_CACHE_SIZE = 65536


def _key_state_from_rows(rows: list[tuple]) -> KeyState:
    """A ``KeyState`` from its pickled rows (``KeyState.__reduce__``)."""
    cache = _WINDOW_CACHE
    windows: dict[BoundedWindow, WindowState] = {}
    for row in rows:
        where = row[0]
        if type(where) is tuple:
            window = cache.get(where)
            if window is None:
                if len(cache) >= _WINDOW_CACHE_SIZE:
                    cache.clear()
                window = cache[where] = IntervalWindow(Timestamp.from_micros(where[0]), Timestamp.from_micros(where[1]))
        else:
            window = where
        windows[window] = WindowState(*row[1:])
    return KeyState(windows)
