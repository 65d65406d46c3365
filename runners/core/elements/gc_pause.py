"""The cyclic garbage collector paused around a block that allocates many objects it keeps.

While a stage merges a partition's partial results, or the driver reads what it collects,
nearly every object made lives on: the collector's passes over the old generation free
nothing, yet come more often the more is allocated, and each rescans everything held. Paused,
the collector scans them once when it resumes. Only the cyclic collector stops: reference
counting still frees everything at once.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_PAUSES = 0
_RESUME_GC = False
_PAUSES_LOCK = threading.Lock()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off for the block (nested or in several threads: off until the last
    such block ends, then back on if it was on before the first)."""
    global _PAUSES, _RESUME_GC
    with _PAUSES_LOCK:
        if _PAUSES == 0:
            _RESUME_GC = gc.isenabled()
            gc.disable()
        _PAUSES += 1
    try:
        yield
    finally:
        with _PAUSES_LOCK:
            _PAUSES -= 1
            if _PAUSES == 0 and _RESUME_GC:
                gc.enable()
