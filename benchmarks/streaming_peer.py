"""What every streaming peer of streaming_windowed_scores.py is and gives back.

A peer is one engine (streaming_sparkbeam.py, streaming_beam.py, streaming_structured.py):
``prepare`` builds its input untimed, ``run`` is one timed run giving a ``Run``, ``idle``
measures steps with no data (streaming_idle.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
from streaming_idle import IdleFigure
from streaming_script import Script
from workloads import Row

__all__ = ["Peer", "Run"]


@attrs.define
class Run:
    """What one timed run of a peer produced."""

    rows: list[Row]  # the final (count, sum) per key and window
    seconds: float  # the timed part: from building the pipeline (query) to the rows on the driver
    #: steps (sparkbeam), TestStream events (Beam) or micro-batches (Structured Streaming)
    steps: int
    #: panes that must not exist here (nothing is late, the trigger is the default): EARLY/LATE
    extra_panes: int = 0
    details: list[str] = attrs.field(factory=list)  # printed under the table
    #: more details, worked out after the run and its CPU watch (they may wait for Spark)
    explain: Callable[[], list[str]] | None = None


class Peer:
    """One engine. ``prepare(script)`` builds its input (not timed: TestStream objects,
    files); ``run(prepared)`` is one timed run; ``idle(count)`` measures steps that carry no
    data (with one key's state present); ``describe`` is printed in the header."""

    describe = ""

    def prepare(self, script: Script) -> Any:
        raise NotImplementedError

    def run(self, prepared: Any) -> Run:
        raise NotImplementedError

    def idle(self, count: int) -> list[IdleFigure]:
        raise NotImplementedError
