"""Elements crossing between the engine and Beam's code: WindowedValue, windows, panes.

The engine moves its own ``WindowedValue`` (a tuple with the timestamp in microseconds);
Beam's DoFnRunner takes and emits Beam's. A Beam DoFn's input is converted as it enters
and its outputs as they leave; values themselves are never copied. Windows and pane infos
repeat from element to element, so their conversions are cached.
"""

from __future__ import annotations

from typing import Any

from apache_beam.transforms.window import GlobalWindow as BeamGlobalWindow
from apache_beam.utils import windowed_value as beam_wv

from sparkbeam.runners.beam.windowing import to_beam_window, to_engine_window
from sparkbeam.utils.windowed_value import (
    PANE_INFO_UNKNOWN,
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
)

__all__ = ["to_beam", "to_beam_pane", "to_beam_windows", "to_engine", "to_engine_pane", "to_engine_windows"]

_beam_windows: dict[tuple, tuple] = {}
_engine_windows: dict[tuple, tuple] = {}
_beam_panes: dict[PaneInfo, Any] = {PANE_INFO_UNKNOWN: beam_wv.PANE_INFO_UNKNOWN}
_engine_panes: dict[Any, PaneInfo] = {beam_wv.PANE_INFO_UNKNOWN: PANE_INFO_UNKNOWN}
_CACHE_LIMIT = 100_000
_create = beam_wv.create
_BEAM_GLOBAL = BeamGlobalWindow()


_ENGINE_UNKNOWN = PANE_INFO_UNKNOWN
_BEAM_UNKNOWN = beam_wv.PANE_INFO_UNKNOWN
_BEAM_GLOBAL_ONLY = (_BEAM_GLOBAL,)
_ENGINE_GLOBAL_ONLY = (to_engine_window(_BEAM_GLOBAL),)


def to_beam_pane(pane: PaneInfo) -> Any:
    if pane is _ENGINE_UNKNOWN:  # most elements outside groupings: skip hashing the pane
        return _BEAM_UNKNOWN
    found = _beam_panes.get(pane)
    if found is None:
        found = _beam_panes[pane] = beam_wv.PaneInfo(
            pane.is_first, pane.is_last, int(pane.timing), pane.index, pane.nonspeculative_index
        )
    return found


def to_engine_pane(pane: Any) -> PaneInfo:
    if pane is _BEAM_UNKNOWN:
        return _ENGINE_UNKNOWN
    found = _engine_panes.get(pane)
    if found is None:
        found = _engine_panes[pane] = PaneInfo(
            pane.is_first, pane.is_last, PaneInfoTiming(pane.timing), pane.index, pane.nonspeculative_index
        )
    return found


def to_beam_windows(windows: tuple) -> tuple:
    """Beam's windows for a tuple of the engine's."""
    found = _beam_windows.get(windows)
    if found is None:
        if len(_beam_windows) >= _CACHE_LIMIT:
            _beam_windows.clear()
        found = _beam_windows[windows] = tuple(to_beam_window(w) for w in windows)
    return found


def to_engine_windows(windows: Any) -> tuple:
    """The engine's windows (a tuple) for Beam's (a tuple or a list)."""
    if len(windows) == 1 and windows[0] is _BEAM_GLOBAL:  # Beam's global window is one object
        return _ENGINE_GLOBAL_ONLY
    key = windows if type(windows) is tuple else tuple(windows)
    found = _engine_windows.get(key)
    if found is None:
        if len(_engine_windows) >= _CACHE_LIMIT:
            _engine_windows.clear()
        found = _engine_windows[key] = tuple(to_engine_window(w) for w in key)
    return found


def to_beam(wv: WindowedValue) -> Any:
    """Beam's WindowedValue for one of the engine's (same value object)."""
    return _create(wv.value, wv.timestamp_micros, to_beam_windows(wv.windows), to_beam_pane(wv.pane_info))


def to_engine(wv: Any) -> WindowedValue:
    """The engine's WindowedValue for one of Beam's (same value object)."""
    return WindowedValue(wv.value, wv.timestamp_micros, to_engine_windows(wv.windows), to_engine_pane(wv.pane_info))
