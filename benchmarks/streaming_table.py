"""The streaming benchmark's table: one line per peer at one size, with the ratio to sparkbeam."""

from __future__ import annotations

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
from streaming_runs import Outcome
from workloads import busy_warning, cell, runs_note

__all__ = ["format_table"]


def format_table(outcomes: list[Outcome]) -> str:
    """One line per peer. The ratio is of seconds per event, which is the ratio of seconds
    when the sizes are equal and still fair when Beam ran a smaller stream."""
    timed = [o for o in outcomes if o.seconds is not None and not o.disagrees]
    reference = next((o for o in timed if o.peer == "sparkbeam"), None)
    header = (
        f"{'peer':<17} {'events':>9} {'seconds':>8} {'events/s':>9} {'steps':>5} {'s/step':>7} "
        f"{'vs sparkbeam':>12} {'CPU s':>7} {'others':>6}  result"
    )
    lines = [header, "-" * len(header)]
    smaller = False
    for o in outcomes:
        if o.seconds is None:
            lines.append(
                f"{o.peer:<17} {o.events:>9,} {'-':>8} {'-':>9} {'-':>5} {'-':>7} {'-':>12} {'-':>7} {'-':>6}  {o.problem}"
            )
            continue
        ratio = "-"
        if reference is not None and reference.seconds and not o.disagrees:
            ratio = f"{(o.seconds / o.events) / (reference.seconds / reference.events):.2f}x"
            if o.events != reference.events:
                ratio += "*"
                smaller = True
        steps = o.steps or 0
        per_step = f"{o.seconds / steps:.3f}" if steps else "-"
        lines.append(
            f"{o.peer:<17} {o.events:>9,} {o.seconds:>8.2f} {o.events / o.seconds:>9,.0f} {steps:>5} "
            f"{per_step:>7} {ratio:>12} {cell(o.cpu_seconds, '.1f'):>7} {cell(o.others_cores, '.2f'):>6}  "
            f"{o.problem or 'agrees'}{runs_note(o.runs)}"
        )
    if smaller:
        lines.append(
            "* ran a smaller stream (--beam-events): the ratio is of seconds per event, not of seconds"
        )
    lines.extend(busy_warning({o.peer: o.others_cores for o in outcomes}))
    return "\n".join(lines)
