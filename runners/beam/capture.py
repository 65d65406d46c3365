"""``capture`` for apache_beam PCollections: their emissions, read after the run.

``sparkbeam.capture(pcoll)`` calls this for a Beam PCollection: the run then records every
element it emits (value, timestamp, windows, pane, step), read with
``result.emissions(pcoll)``, as for a sparkbeam pipeline. Windows and panes there are the
engine's (``sparkbeam.window``), which print and compare as Beam's do.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from apache_beam import pvalue as beam_pvalue

from sparkbeam.pipeline import register_capture

__all__ = ["capture", "captured_in"]

#: pipeline -> {id(pcoll): (pcoll, log path or None)}
_CAPTURED: weakref.WeakKeyDictionary[Any, dict[int, tuple[Any, str | None]]] = weakref.WeakKeyDictionary()


def capture(pcoll: Any, log: str | os.PathLike[str] | None = None) -> Any:
    """Record what ``pcoll`` emits during the run; returns ``pcoll``."""
    if not isinstance(pcoll, beam_pvalue.PCollection):
        msg = f"capture takes a PCollection, not {pcoll!r}"
        raise TypeError(msg)
    path = None
    if log is not None:
        if not isinstance(log, (str, os.PathLike)) or not os.fspath(log):
            msg = f"capture({pcoll}): log must be a file path, got {log!r}"
            raise TypeError(msg)
        path = os.path.abspath(os.fspath(log))
    captured = _CAPTURED.setdefault(pcoll.pipeline, {})
    given = captured.get(id(pcoll))
    if given is not None and path is not None and given[1] not in (None, path):
        msg = f"capture({pcoll}): already captured with log={given[1]!r}; one log per PCollection"
        raise ValueError(msg)
    captured[id(pcoll)] = (pcoll, path if path is not None else (given[1] if given else None))
    return pcoll


# sparkbeam.capture(pcoll) of a Beam PCollection comes here: the SDK imports no runner.
register_capture("apache_beam", capture)


def captured_in(pipeline: Any) -> tuple[list[Any], dict[int, str]]:
    """The captured PCollections of ``pipeline``, and their logs by ``id`` of the PCollection."""
    entries = _CAPTURED.get(pipeline, {})
    pcolls = [pcoll for pcoll, _ in entries.values()]
    logs = {key: path for key, (_, path) in entries.items() if path is not None}
    return pcolls, logs
