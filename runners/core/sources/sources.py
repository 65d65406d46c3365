"""What each source stage contributes to a step: its new elements and its new watermark.

Bounded sources (Create, Impulse, ReadFromText) deliver everything in the first step and
then move their watermark to the end of time. A TestStream delivers one event per step;
when its script is over, its watermark moves to the end of time.
"""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.runners.core.lowering.ops import Op, TestStreamOp
from sparkbeam.testing.test_stream import ElementEvent, ProcessingTimeEvent, WatermarkEvent
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue, new_windowed_value
from sparkbeam.window import GlobalWindow

__all__ = ["BoundedSourceState", "SourceEmission", "SourceReport", "SourceState", "TestStreamState"]

MIN = MIN_TIMESTAMP.micros
MAX = MAX_TIMESTAMP.micros


@attrs.frozen
class SourceReport:
    """What a real source did in a step besides delivering elements."""

    dropped: int = 0  # behind the watermark by more than the allowed delay
    dead_letters: int = 0  # unparsable, or without a readable timestamp
    hold: int | None = None  # the watermark of the partition holding the source back
    hold_partition: str | None = None


@attrs.frozen
class SourceEmission:
    """One step of one source: ``whole`` (deliver the source's entire bounded content),
    ``elements`` (explicit, already windowed) or ``wal_paths`` (a real source's durable
    micro-batches), and the watermark after the step."""

    watermark: int
    whole: Op | None = None
    elements: tuple[WindowedValue, ...] = ()
    advance_clock_by: int = 0
    wal_paths: tuple[str, ...] = ()
    report: SourceReport | None = None

    @property
    def is_empty(self) -> bool:
        return self.whole is None and not self.elements and not self.wal_paths


class SourceState:
    watermark: int = MIN
    done: bool = False

    def next_step(self) -> SourceEmission:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        """What a checkpoint keeps of the source (its position and watermark)."""
        return {"watermark": self.watermark, "done": self.done}

    def restore(self, data: dict[str, Any]) -> None:
        self.watermark = data["watermark"]
        self.done = data["done"]


class BoundedSourceState(SourceState):
    def __init__(self, op: Op) -> None:
        self.op = op

    def next_step(self) -> SourceEmission:
        if self.done:
            return SourceEmission(MAX)
        self.done = True
        self.watermark = MAX
        return SourceEmission(MAX, whole=self.op)


class TestStreamState(SourceState):
    """Replays the events of one TestStream output tag (clock events apply to every tag)."""

    __test__ = False

    def __init__(self, op: TestStreamOp, tag: Any) -> None:
        self.events = list(op.events)
        self.tag = tag
        self.position = 0

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "position": self.position}

    def restore(self, data: dict[str, Any]) -> None:
        super().restore(data)
        self.position = data["position"]

    @property
    def remaining(self) -> int:
        return len(self.events) - self.position

    def next_step(self) -> SourceEmission:
        if self.position >= len(self.events):
            if not self.done:
                self.done = True
                self.watermark = MAX
            return SourceEmission(self.watermark)
        event = self.events[self.position]
        self.position += 1
        if self.position == len(self.events) and self.watermark >= MAX:
            self.done = True
        if isinstance(event, ElementEvent):
            if event.tag != self.tag:
                return SourceEmission(self.watermark)
            window = (GlobalWindow(),)
            # Built in C (``new_windowed_value``): a step may carry a million elements.
            elements = tuple(
                [new_windowed_value((tv.value, tv.timestamp_micros, window, PANE_INFO_UNKNOWN)) for tv in event.timestamped_values]
            )
            return SourceEmission(self.watermark, elements=elements)
        if isinstance(event, WatermarkEvent):
            if event.tag == self.tag:
                self.watermark = max(self.watermark, event.new_watermark.micros)
            # A script that ends at the end of time is done with its last event.
            self.done = self.position == len(self.events) and self.watermark >= MAX
            return SourceEmission(self.watermark)
        if isinstance(event, ProcessingTimeEvent):
            return SourceEmission(self.watermark, advance_clock_by=event.advance_by.micros)
        msg = f"unknown TestStream event {event!r}"
        raise TypeError(msg)

