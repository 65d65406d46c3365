"""An element at run time: its value, event time, windows and pane.

``WindowedValue`` is a tuple so that the runner can move millions of them cheaply; its
timestamp is kept as integer microseconds (``timestamp_micros``), and ``.timestamp`` gives
the ``Timestamp`` a user sees.
"""

from __future__ import annotations

import enum
import functools
from typing import Any, NamedTuple

import attrs

from sparkbeam.beam_surface import module_getattr
from sparkbeam.utils.timestamp import Timestamp

__all__ = ["PANE_INFO_UNKNOWN", "PaneInfo", "PaneInfoTiming", "WindowedValue", "new_windowed_value"]


class PaneInfoTiming(enum.IntEnum):
    """When a pane fired relative to the watermark (Beam's numbering)."""

    EARLY = 0
    ON_TIME = 1
    LATE = 2
    UNKNOWN = 3

    def __repr__(self) -> str:
        return self.name


@attrs.frozen
class PaneInfo:
    """Which firing of a window produced an element.

    ``index`` counts every pane of the window from 0; ``nonspeculative_index`` counts
    the ON_TIME and LATE panes from 0 and is -1 for EARLY panes.
    """

    is_first: bool
    is_last: bool
    timing: PaneInfoTiming = attrs.field(converter=PaneInfoTiming)
    index: int
    nonspeculative_index: int

    def __repr__(self) -> str:
        return (
            f"PaneInfo(first={self.is_first}, last={self.is_last}, timing={self.timing.name}, "
            f"index={self.index}, nonspeculative_index={self.nonspeculative_index})"
        )


PANE_INFO_UNKNOWN = PaneInfo(True, True, PaneInfoTiming.UNKNOWN, 0, 0)


class WindowedValue(NamedTuple):
    value: Any
    timestamp_micros: int
    windows: tuple
    pane_info: PaneInfo = PANE_INFO_UNKNOWN

    @property
    def timestamp(self) -> Timestamp:
        return Timestamp.from_micros(self.timestamp_micros)

    def with_value(self, value: Any) -> WindowedValue:
        return WindowedValue(value, self.timestamp_micros, self.windows, self.pane_info)

    def __repr__(self) -> str:
        return (
            f"WindowedValue({self.value!r}, {self.timestamp!r}, {list(self.windows)!r}, "
            f"{self.pane_info!r})"
        )


#: ``new_windowed_value((value, timestamp_micros, windows, pane_info))``: a WindowedValue
#: built in C, for the runner's per-element paths (``WindowedValue(...)`` runs a Python-level
#: ``__new__``, which costs a frame per element). All four fields, in order.
new_windowed_value = functools.partial(tuple.__new__, WindowedValue)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.utils.windowed_value")
