"""What a run records: every stage's watermarks per step, and the elements captured PCollections emitted.

``Timeline`` (from ``PipelineResult.watermarks()``) has one ``WatermarkRecord`` per step
and stage; ``Emissions`` (from ``PipelineResult.emissions(pcoll)``) one ``Emission`` per
element. Both convert to pandas DataFrames when pandas is installed.

A long stream keeps only its recent steps in memory (``--timeline_retention_steps``, see
``sparkbeam.runners.core.loop.history``): both then start at ``first_step``, say so when printed,
and asking for an earlier step raises ``TrimmedHistoryError`` naming the log that has it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

import attrs

from sparkbeam.runners.core.grouping.drops import DROP_COUNTERS
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp, seconds_text
from sparkbeam.utils.windowed_value import PaneInfo

__all__ = [
    "Emission",
    "Emissions",
    "StepEmissions",
    "Timeline",
    "TrimmedHistoryError",
    "WatermarkRecord",
    "emissions_of",
    "format_micros",
]


class TrimmedHistoryError(LookupError):
    """A step asked for is older than what a long stream keeps in memory."""


def _trimmed_note(first_step: int, log_path: str | None, log_option: str) -> str:
    where = f"the full history is in {log_path}" if log_path else f"give {log_option} to keep the full history"
    return (
        f"steps before {first_step} are no longer in memory (a stream keeps its last "
        f"--timeline_retention_steps steps); {where}"
    )


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
    #: records that crossed a grouping's shuffle (fewer than its elements when its
    #: combine was lifted before the shuffle)
    records_shuffled: int = 0

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

    def __init__(
        self,
        records: list[WatermarkRecord],
        stage_names: list[str],
        *,
        first_step: int = 0,
        log_path: str | None = None,
        notes: dict[str, str] | None = None,
    ) -> None:
        self.records = list(records)
        self.stage_names = list(stage_names)
        #: stage name -> how the planner chose to run it ("SQL plan: ...", "general path: <reason>")
        self.notes = dict(notes or {})
        #: the first step kept in memory: a long stream forgets older ones (they are in ``log_path``)
        self.first_step = first_step
        #: the ``--timeline_log`` holding every step, if one was given
        self.log_path = log_path

    @property
    def trimmed(self) -> bool:
        """Whether steps before ``first_step`` were dropped from memory."""
        return self.first_step > 0

    def history_note(self) -> str | None:
        """What was trimmed and where the full history is; None when nothing was."""
        return _trimmed_note(self.first_step, self.log_path, "--timeline_log=path") if self.trimmed else None

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
        """Every stage's record at ``step``; a trimmed step raises ``TrimmedHistoryError``."""
        if step < self.first_step:
            msg = f"step {step}: {self.history_note()}"
            raise TrimmedHistoryError(msg)
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
        frame = pd.DataFrame(rows)
        frame.attrs["first_step"] = self.first_step
        return frame

    def format(self) -> str:
        """A plain-text table (watermarks in seconds, -inf/+inf at the ends of time)."""
        header = (
            f"{'step':>4} {'stage':<36} {'input wm':>10} {'output wm':>10} {'held by':<48} {'in':>7} "
            f"{'out':>7} {'waiting':>7} {'dropped':>7} why dropped"
        )
        note = self.history_note()
        lines = [f"({note})", header] if note else [header]
        for r in self.records:
            held = f"{r.hold_key} {r.hold_window}" if r.hold_key is not None else ""
            why = ", ".join(f"{reason} {count}" for reason, count in r.drops().items() if count)
            lines.append(
                f"{r.step:>4} {r.stage[:36]:<36} {format_micros(r.input_watermark):>10} "
                f"{format_micros(r.output_watermark):>10} {held[:48]:<48} {r.elements_in:>7} "
                f"{r.elements_out:>7} {r.side_input_waiting:>7} {r.dropped:>7} {why}".rstrip()
            )
        lines.extend(f"note: {stage}: {note}" for stage, note in self.notes.items())
        return "\n".join(lines)

    def __repr__(self) -> str:
        if self.trimmed:
            return f"<Timeline steps {self.first_step}-{self.steps - 1} of {self.steps} (older ones trimmed) x {len(self.stage_names)} stages>"
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


# Beyond this many distinct timestamps, reading a step's emissions stops sharing them.
_SHARED_TIMESTAMPS = 4096

# An Emission's slots, set directly when a step's emissions are read: what attrs' frozen
# ``__init__`` does (Emission has no defaults, converters or validators), in half the time,
# as reading 100,000 results makes 100,000 of them.
_EMISSION_SLOTS = tuple(getattr(Emission, field.name).__set__ for field in attrs.fields(Emission))


class StepEmissions(Sequence[Emission]):
    """The elements one step emitted to a captured PCollection, made ``Emission``s only as
    they are read.

    A batch run captures one element per key and window, often a hundred thousand or more.
    Held as the elements the driver collected, they cost nothing per element beyond the
    element itself: an ``Emission`` and its ``Timestamp`` each, held for the run's life,
    made the cyclic GC rescan them over and over while the results arrived (about half the
    driver's CPU for 60,000 groups). Reading makes each Emission as it goes, equal to the
    one built eagerly, and shares each distinct timestamp (``Timestamp`` is immutable).
    """

    __slots__ = ("elements", "processing_time", "step")

    def __init__(self, elements: Sequence[Any], step: int, processing_time: int) -> None:
        #: the elements as ``(value, timestamp micros, windows, pane)`` (``WindowedValue``s)
        self.elements = elements
        self.step = step
        self.processing_time = processing_time

    def __len__(self) -> int:
        return len(self.elements)

    @overload
    def __getitem__(self, index: int) -> Emission: ...

    @overload
    def __getitem__(self, index: slice) -> list[Emission]: ...

    def __getitem__(self, index: int | slice) -> Emission | list[Emission]:
        if isinstance(index, slice):
            return list(StepEmissions(self.elements[index], self.step, self.processing_time))
        value, micros, windows, pane = self.elements[index]
        return Emission(value, Timestamp.from_micros(micros), windows, pane, self.step, self.processing_time)

    def __iter__(self) -> Iterator[Emission]:
        step, wall = self.step, self.processing_time
        stamps: dict[int, Timestamp] = {}
        new = object.__new__
        set_value, set_timestamp, set_windows, set_pane, set_step, set_processing_time = _EMISSION_SLOTS
        for value, micros, windows, pane in self.elements:
            stamp = stamps.get(micros)
            if stamp is None:
                if len(stamps) >= _SHARED_TIMESTAMPS:
                    stamps.clear()
                stamp = stamps[micros] = Timestamp.from_micros(micros)
            emission = new(Emission)
            set_value(emission, value)
            set_timestamp(emission, stamp)
            set_windows(emission, windows)
            set_pane(emission, pane)
            set_step(emission, step)
            set_processing_time(emission, wall)
            yield emission

    def values(self) -> list[Any]:
        return [element[0] for element in self.elements]

    def joined(self, more: Sequence[Emission]) -> Sequence[Emission]:
        """These emissions, then ``more`` (the same step's, collected later)."""
        if type(more) is StepEmissions and (more.step, more.processing_time) == (self.step, self.processing_time):
            return StepEmissions([*self.elements, *more.elements], self.step, self.processing_time)
        return [*self, *more]

    def __reduce__(self) -> tuple:
        return StepEmissions, (self.elements, self.step, self.processing_time)

    def __repr__(self) -> str:
        return f"<StepEmissions of step {self.step}: {len(self.elements)} elements>"


class Emissions:
    """The elements a captured PCollection emitted, in step order.

    ``rows`` is the list of every ``Emission``, made on first use; iterating (and ``len``,
    ``values``, ``at_step``) reads the steps' emissions as they are held, making no list.
    """

    def __init__(
        self,
        label: str,
        rows: Sequence[Emission] = (),
        *,
        first_step: int = 0,
        log_path: str | None = None,
        steps: Sequence[Sequence[Emission]] | None = None,
    ) -> None:
        self.label = label
        #: the emissions as held, one part per step (``steps``) or all of them in one (``rows``)
        self._parts: list[Sequence[Emission]] = list(steps) if steps is not None else [rows]
        self._rows: list[Emission] | None = None
        #: the first step kept in memory: a long stream forgets older ones (they are in ``log_path``)
        self.first_step = first_step
        #: the file given to ``capture(pcoll, log=...)``, holding every emission, if any
        self.log_path = log_path

    @property
    def rows(self) -> list[Emission]:
        """Every emission, in step order."""
        if self._rows is None:
            self._rows = [row for part in self._parts for row in part]
        return self._rows

    @property
    def trimmed(self) -> bool:
        """Whether the emissions of steps before ``first_step`` were dropped from memory."""
        return self.first_step > 0

    def history_note(self) -> str | None:
        """What was trimmed and where the full history is; None when nothing was."""
        if not self.trimmed:
            return None
        return _trimmed_note(self.first_step, self.log_path, "sparkbeam.capture(pcoll, log=path)")

    def at_step(self, step: int) -> list[Emission]:
        """The elements emitted at ``step``; a trimmed step raises ``TrimmedHistoryError``."""
        if step < self.first_step:
            msg = f"{self.label}, step {step}: {self.history_note()}"
            raise TrimmedHistoryError(msg)
        parts = (part for part in self._parts if type(part) is not StepEmissions or part.step == step)
        return [row for part in parts for row in part if row.step == step]

    def __iter__(self) -> Iterator[Emission]:
        if self._rows is not None:
            return iter(self._rows)
        return itertools.chain.from_iterable(self._parts)

    def __len__(self) -> int:
        if self._rows is not None:
            return len(self._rows)
        return sum(len(part) for part in self._parts)

    def values(self) -> list[Any]:
        if self._rows is not None:
            return [row.value for row in self._rows]
        return [value for part in self._parts for value in _values(part)]

    def to_pandas(self) -> Any:
        try:
            import pandas as pd
        except ImportError:
            msg = "Emissions.to_pandas needs pandas: pip install 'sparkbeam[plot]'"
            raise ImportError(msg) from None
        frame = pd.DataFrame(
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
                for row in self
            ]
        )
        frame.attrs["first_step"] = self.first_step
        return frame

    def __repr__(self) -> str:
        since = f" since step {self.first_step} (older ones trimmed)" if self.trimmed else ""
        return f"<Emissions of {self.label}: {len(self)} elements{since}>"


def _values(part: Sequence[Emission]) -> list[Any]:
    return part.values() if type(part) is StepEmissions else [row.value for row in part]


def emissions_of(plan: Any, emitted: dict[int, Emissions], pcoll: Any) -> Emissions:
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
    return emitted[pcoll_id]
