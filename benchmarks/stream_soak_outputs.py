"""What a stream soak job leaves behind, read back: its timeline log and its committed lines.

The soak's parts (stream_soak_kills.py, stream_soak_rate.py, stream_soak_memory.py) check
these against what the job should have done; a kill may cut the last line of a log short.
"""

from __future__ import annotations

import collections
import glob
import itertools
import json
import os

__all__ = ["TimelineTail", "committed", "read_timeline", "timeline_problems", "totals"]


class TimelineTail:
    """Follows a timeline log as runs append to it; a line cut short by a kill is skipped."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0
        self.pending = ""

    def new_records(self) -> list[dict]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                handle.seek(self.offset)
                text = handle.read()
                self.offset = handle.tell()
        except FileNotFoundError:
            return []
        *lines, self.pending = (self.pending + text).split("\n")
        return parse_lines(lines)


def parse_lines(lines: list[str]) -> list[dict]:
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # the line a kill cut short
    return records


def read_timeline(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return parse_lines(handle.read().split("\n"))


def committed(output_dir: str, name: str) -> collections.Counter:
    """Every line of the committed step directories (hidden temporary ones excluded)."""
    lines: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(output_dir, f"{name}-step-*", "*")):
        with open(path, encoding="utf-8") as handle:
            lines.update(line.rstrip("\n") for line in handle)
    return lines


def totals(lines: collections.Counter) -> collections.Counter:
    found: collections.Counter = collections.Counter()
    for line, times in lines.items():
        key, start, total = line.split(",")
        found[(key, int(start))] += int(total) * times
    return found


def timeline_problems(records: list[dict]) -> list[str]:
    """A replayed step must log what it logged before; no stage's watermark goes back; nothing late."""
    problems = []
    fields = ("input_watermark", "output_watermark", "elements_in", "elements_out", "dead_letters")
    by_stage: dict[str, dict[int, tuple]] = collections.defaultdict(dict)
    for record in records:
        seen = tuple(record[f] for f in fields)
        first = by_stage[record["stage"]].setdefault(record["step"], seen)
        if first != seen:
            problems.append(f"{record['stage']} step {record['step']}: {dict(zip(fields, seen))} on replay, {dict(zip(fields, first))} before")
        if record["dropped"]:
            why = {name: record[name] for name in record if name.endswith("_dropped") and record[name]}
            problems.append(f"{record['stage']} step {record['step']}: dropped {why}")
    for stage, steps in by_stage.items():
        ordered = [(s, steps[s]) for s in sorted(steps)]
        for (step_before, before), (step_after, after) in itertools.pairwise(ordered):
            if after[0] < before[0] or after[1] < before[1]:
                problems.append(f"{stage}: watermark went back from step {step_before} {before[:2]} to step {step_after} {after[:2]}")
    return problems[:10]
