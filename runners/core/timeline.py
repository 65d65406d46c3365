"""What a run records: every stage's watermarks per step, and the elements captured PCollections emitted.

``Timeline`` (from ``PipelineResult.watermarks()``) has one ``WatermarkRecord`` per step
and stage; ``Emissions`` (from ``PipelineResult.emissions(pcoll)``) one ``Emission`` per
element. Both convert to pandas DataFrames when pandas is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from sparkbeam.runners.core.drops import DROP_COUNTERS
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp, seconds_text
from sparkbeam.utils.windowed_value import PaneInfo

__all__ = ["Emission", "Emissions", "Timeline", "WatermarkRecord", "emissions_of", "format_micros"]


def _as_seconds(micros: int | None) -> float | None:
    if micros is None:
        return None
    if micros <= MIN_TIMESTAMP.micros:
        return float("-inf")
    if micros >= MAX_TIMESTAMP.micros:
        return float("inf")
    return micros / 1_000_000


def format_micros(micros: int | None) -> str:
    if micros is None:
        return "-"
    if micros <= MIN_TIMESTAMP.micros:
        return "-inf"
    if micros >= MAX_TIMESTAMP.micros:
        return "+inf"
    return seconds_text(micros)


@attrs.frozen
class WatermarkRecord:
    """One stage at the end of one step.

    Drops are counted in (element, window) pairs, per reason (``DropReason``):
    ``late_dropped`` (behind the allowed lateness, or behind a source's allowed delay),
    ``closed_dropped`` (the window's trigger had finished), ``merged_into_closed_dropped``
    (merged into a window whose trigger had finished), ``expired_state_dropped`` (deleted
    unemitted when the window was collected); ``dropped`` is their sum.
    """

    step: int
    processing_time: int  # micros on the run's clock
    stage: str
    stage_id: int
    input_watermark: int
    output_watermark: int
    earliest_hold: int | None
    hold_key: str | None
    hold_window: str | None
    elements_in: int
    elements_out: int
    late_dropped: int
    closed_dropped: int
    state_keys: int
    state_windows: int
    #: records a source could not parse or stamp, sent to its dead-letter output
    dead_letters: int = 0
    merged_into_closed_dropped: int = 0
    expired_state_dropped: int = 0
    #: main-input elements (per window) waiting for a side input to be ready
    side_input_waiting: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The fields, and ``dropped`` (their drops summed), as for ``--timeline_log``."""
        return {**attrs.asdict(self), "dropped": self.dropped}

    def drops(self) -> dict[str, int]:
        """The drops of this step by reason (``"late"``, ``"closed_window"``, ...), zeros included."""
        return {reason.value: getattr(self, counter) for reason, counter in DROP_COUNTERS.items()}

    @property
    def dropped(self) -> int:
        """All (element, window) pairs this stage dropped in this step, whatever the reason."""
        return sum(getattr(self, counter) for counter in DROP_COUNTERS.values())


class Timeline:
    """The watermark timeline of a run: one record per step and stage."""

    def __init__(self, records: list[WatermarkRecord], stage_names: list[str]) -> None:
        self.records = list(records)
        self.stage_names = list(stage_names)

    def __iter__(self) -> Iterator[WatermarkRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def for_stage(self, stage: str) -> list[WatermarkRecord]:
        """The records of the stage named by its transform label (a unique prefix will do)."""
        names = [name for name in self.stage_names if name == stage] or [
            name for name in self.stage_names if name.startswith(stage)
        ]
        if len(names) != 1:
            msg = f"no single stage named {stage!r}; stages: {self.stage_names}"
            raise KeyError(msg)
        return [r for r in self.records if r.stage == names[0]]

    def at_step(self, step: int) -> dict[str, WatermarkRecord]:
        return {r.stage: r for r in self.records if r.step == step}

    @property
    def steps(self) -> int:
        return 1 + max((r.step for r in self.records), default=-1)

    def to_pandas(self, seconds: bool = True) -> Any:
        """A DataFrame, one row per step and stage; times in seconds (±inf at the ends of
        time) unless ``seconds=False`` asks for the raw microseconds."""
        try:
            import pandas as pd
        except ImportError:
            msg = "Timeline.to_pandas needs pandas: pip install 'sparkbeam[plot]'"
            raise ImportError(msg) from None
        rows = [r.as_dict() for r in self.records]
        if seconds:
            for row in rows:
                for column in ("input_watermark", "output_watermark", "earliest_hold"):
                    row[column] = _as_seconds(row[column])
                row["processing_time"] = row["processing_time"] / 1_000_000
        return pd.DataFrame(rows)

    def format(self) -> str:
        """A plain-text table (watermarks in seconds, -inf/+inf at the ends of time)."""
        header = (
            f"{'step':>4} {'stage':<36} {'input wm':>10} {'output wm':>10} {'held by':<48} {'in':>7} "
            f"{'out':>7} {'waiting':>7} {'dropped':>7} why dropped"
        )
        lines = [header]
        for r in self.records:
            held = f"{r.hold_key} {r.hold_window}" if r.hold_key is not None else ""
            why = ", ".join(f"{reason} {count}" for reason, count in r.drops().items() if count)
            lines.append(
                f"{r.step:>4} {r.stage[:36]:<36} {format_micros(r.input_watermark):>10} "
                f"{format_micros(r.output_watermark):>10} {held[:48]:<48} {r.elements_in:>7} "
                f"{r.elements_out:>7} {r.side_input_waiting:>7} {r.dropped:>7} {why}".rstrip()
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Timeline {self.steps} steps x {len(self.stage_names)} stages>"


@attrs.frozen
class Emission:
    """One element a captured PCollection emitted, and when."""

    value: Any
    timestamp: Timestamp
    windows: tuple
    pane: PaneInfo
    step: int
    processing_time: int

    @property
    def window(self) -> Any:
        (window,) = self.windows
        return window


class Emissions:
    """The elements a captured PCollection emitted, in step order."""

    def __init__(self, label: str, rows: list[Emission]) -> None:
        self.label = label
        self.rows = rows

    def __iter__(self) -> Iterator[Emission]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def values(self) -> list[Any]:
        return [row.value for row in self.rows]

    def to_pandas(self) -> Any:
        try:
            import pandas as pd
        except ImportError:
            msg = "Emissions.to_pandas needs pandas: pip install 'sparkbeam[plot]'"
            raise ImportError(msg) from None
        return pd.DataFrame(
            [
                {
                    "value": row.value,
                    "timestamp": float(row.timestamp),
                    "window": str(row.windows[0]) if len(row.windows) == 1 else str(row.windows),
                    "timing": row.pane.timing.name,
                    "pane_index": row.pane.index,
                    "is_first": row.pane.is_first,
                    "is_last": row.pane.is_last,
                    "step": row.step,
                    "processing_time": row.processing_time,
                }
                for row in self.rows
            ]
        )

    def __repr__(self) -> str:
        return f"<Emissions of {self.label}: {len(self.rows)} elements>"


def emissions_of(plan: Any, emitted: dict[int, list[Emission]], pcoll: Any) -> Emissions:
    """The captured emissions of ``pcoll``, or an error saying how to capture it."""
    lowered = plan.lowered
    pcoll_id = lowered.handle_ids.get(id(pcoll))
    if pcoll_id is None or pcoll_id not in lowered.captured:
        label = getattr(pcoll, "label", repr(pcoll))
        msg = (
            f"{label} was not captured: call sparkbeam.capture(pcoll) while building the "
            "pipeline, before running it"
        )
        raise KeyError(msg)
    return Emissions(pcoll.label, emitted[pcoll_id])
