"""The windowing strategy a PCollection carries: window fn, trigger, accumulation, lateness."""

from __future__ import annotations

import attrs

from sparkbeam.trigger import AccumulationMode, DefaultTrigger, TriggerFn
from sparkbeam.utils.timestamp import Duration
from sparkbeam.window import GlobalWindows, TimestampCombiner, WindowFn

__all__ = ["Windowing"]


def _lateness(value: object) -> Duration:
    duration = Duration.of(value)
    if duration.micros < 0:
        msg = f"allowed_lateness must not be negative, got {value!r}"
        raise ValueError(msg)
    return duration


@attrs.frozen
class Windowing:
    """How a PCollection's elements are windowed and when groupings over it emit panes."""

    windowfn: WindowFn = attrs.field(factory=GlobalWindows)
    triggerfn: TriggerFn = attrs.field(factory=DefaultTrigger)
    accumulation_mode: AccumulationMode = AccumulationMode.DISCARDING
    timestamp_combiner: TimestampCombiner = TimestampCombiner.OUTPUT_AT_EOW
    allowed_lateness: Duration = attrs.field(factory=Duration, converter=_lateness)

    def is_default(self) -> bool:
        return self == Windowing()
