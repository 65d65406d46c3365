"""The cost of a streaming step that carries no data, per peer, and its table.

Each peer's ``idle(count)`` (streaming_peer.Peer) runs its engine once without and once with
``count`` steps that carry no data after one event, and gives ``IdleFigure``s: the per-step
times the engine shows, if it shows them, and the difference between the two runs per step.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

# A sibling module: run as a file, a benchmark has its own directory on sys.path.
from workloads import WINDOW_MS, cell

if TYPE_CHECKING:
    from streaming_peer import Peer

__all__ = ["IdleFigure", "by_difference", "format_idle", "idle_increment_ms", "measure_idle"]

_Result = TypeVar("_Result")


@attrs.frozen
class IdleFigure:
    """The cost of one kind of step with no data: measured per step, and by difference."""

    peer: str
    kind: str
    steps: int
    median_seconds: float | None  # median of the per-step times the peer shows, if it does
    mean_seconds: float | None  # their mean: a rare slow step shows here, not in the median
    differential_seconds: float  # (run with the idle steps - run without them) / steps
    jobs_per_step: float | None
    note: str = ""


def idle_increment_ms(count: int) -> int:
    """How far each of ``count`` idle steps moves the watermark: all stay inside one window."""
    return max(1, (WINDOW_MS - 1) // (count + 1))


def by_difference(base: Callable[[], Any], with_idle: Callable[[], _Result], count: int) -> tuple[_Result, float]:
    """Time a run without the idle steps (``base``), then the same with ``count`` of them:
    what the second run gave, and its extra seconds per idle step."""
    started = time.perf_counter()
    base()
    base_seconds = time.perf_counter() - started
    started = time.perf_counter()
    result = with_idle()
    seconds = time.perf_counter() - started
    return result, (seconds - base_seconds) / count


def measure_idle(peers: dict[str, Peer], count: int) -> bool:
    """Print every peer's idle figures; False when a peer's idle run failed."""
    print()
    print(
        f"== per-step overhead with no data: {count} idle steps after one event "
        "(one key's state present, its window still open)"
    )
    figures: list[IdleFigure] = []
    ok = True
    for name, peer in peers.items():
        try:
            figures.extend(peer.idle(count))
        except Exception as error:
            traceback.print_exc(file=sys.stderr)
            print(f"   {name}: idle run failed: {type(error).__name__}: {error}")
            ok = False
    print(format_idle(figures))
    print(
        "   median s, mean s: wall-clock of the idle steps as the peer shows them (sparkbeam: its "
        "step loop; Structured Streaming: each micro-batch's triggerExecution); by diff s: (run "
        "with the idle steps - the same run without them) / steps"
    )
    return ok


def format_idle(figures: list[IdleFigure]) -> str:
    header = f"{'peer':<17} {'kind of step with no data':<52} {'steps':>5} {'median s':>9} {'mean s':>9} {'by diff s':>9} {'jobs/step':>9}"
    lines = [header, "-" * len(header)]
    for f in figures:
        note = f"  {f.note}" if f.note else ""
        lines.append(
            f"{f.peer:<17} {f.kind:<52} {f.steps:>5} {cell(f.median_seconds, '.4f'):>9} {cell(f.mean_seconds, '.4f'):>9} "
            f"{f.differential_seconds:>9.4f} {cell(f.jobs_per_step, '.1f'):>9}{note}"
        )
    return "\n".join(lines)
