"""Pickles written before ``runners/core`` moved into rooms (#24) read back: a checkpoint
names each engine class by the module it was defined in, and those paths changed.

Checkpoints and sealed files are authenticated before anything is unpickled
(``sealing.py``); what they hold names classes such as ``records.StateBucket`` by module
path. The engine's flat modules (``sparkbeam.runners.core.records``) are now modules of a
room (``sparkbeam.runners.core.grouping.records``), and ``StepParams``/``StageSummary``
left ``steps`` for ``lowering.step_values``. Every reader of a persisted pickle goes through
``loads``/``Unpickler`` here, which map each old path to the new one, so a stream
checkpointed by the previous version resumes (the checkpoint format stays 5: what it holds
did not change, only where its classes live). Nothing else is remapped.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

__all__ = ["Unpickler", "current_path", "loads"]

_CORE = "sparkbeam.runners.core."

#: a flat module of runners/core before the move -> the room it is in now
_ROOM_OF: dict[str, str] = {
    "bounded_reads": "sources",
    "clock": "loop",
    "descriptions": "lowering",
    "dofn_invoker": "elements",
    "drops": "grouping",
    "errors": "lowering",
    "execution": "elements",
    "fused": "elements",
    "gc_pause": "elements",
    "grouping": "grouping",
    "grouping_engine": "grouping",
    "grouping_step": "grouping",
    "grouping_strategies": "grouping",
    "history": "loop",
    "holds": "grouping",
    "keyed_buckets": "state",
    "keys": "grouping",
    "lifting": "grouping",
    "memory": "loop",
    "merging": "grouping",
    "metrics": "elements",
    "ops": "lowering",
    "physical": "plan",
    "plan": "plan",
    "records": "grouping",
    "registry": "lowering",
    "schema_segments": "schema",
    "schema_sources": "schema",
    "settings": "lowering",
    "side_input_wait": "loop",
    "source_watermarks": "sources",
    "sources": "sources",
    "stateful_step": "state",
    "steps": "loop",
    "strategies": "lowering",
    "stream_sources": "sources",
    "text_lines": "sources",
    "timeline": "loop",
    "triggers": "grouping",
    "user_state": "state",
    "validation": "lowering",
    "window_assignment": "elements",
    "window_state": "grouping",
}

#: (old module, name) -> the module that defines the name now, for the classes a checkpoint
#: may hold that left their module (``physical.nothing_due`` moved too, but is never pickled)
_MOVED_NAMES: dict[tuple[str, str], str] = {
    (_CORE + "steps", "StageSummary"): _CORE + "lowering.step_values",
    (_CORE + "steps", "StepParams"): _CORE + "lowering.step_values",
}


def current_path(module: str, name: str) -> tuple[str, str]:
    """Where ``module.name``, as a pickle written before the move names it, is now."""
    moved = _MOVED_NAMES.get((module, name))
    if moved is not None:
        return moved, name
    # Unambiguous though three old modules (grouping, plan, sources) are rooms' names now:
    # a room's package defines no class (its __init__ imports nothing), so a pickle that
    # names a class in one was written before the move.
    if module.startswith(_CORE):
        old = module[len(_CORE) :]
        room = _ROOM_OF.get(old)
        if room is not None:
            return f"{_CORE}{room}.{old}", name
    return module, name


class Unpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that also finds engine classes by their paths before the move."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(*current_path(module, name))


def loads(payload: bytes) -> Any:
    """``pickle.loads`` for a persisted (and already authenticated) pickle."""
    return Unpickler(io.BytesIO(payload)).load()
