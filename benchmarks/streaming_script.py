"""The streaming benchmarks' stream: events cut into arrival batches, each followed by a watermark.

streaming_windowed_scores.py replays a ``Script`` through every streaming peer, and
stateful_dedup.py through its streaming one. The watermarks are chosen from the data so
that nothing is late for any peer and Spark's per-query watermark equals the TestStream's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

# A sibling module: run as a file, a benchmark has its own directory on sys.path.
from workloads import Event

__all__ = ["Script", "make_script", "test_stream"]


@attrs.frozen
class Script:
    """The stream: arrival batches, and the watermark (epoch ms) announced after each one.

    ``watermarks[k]`` is None when the watermark would not move after batch k (TestStream
    refuses a watermark that does not move forward). After the last batch the watermark goes
    to the end of time.
    """

    batches: list[list[Event]] = attrs.field(repr=lambda b: f"<{len(b)} batches>")
    watermarks: list[int | None]
    out_of_orderness_ms: int

    @property
    def events(self) -> int:
        return sum(len(batch) for batch in self.batches)

    @property
    def all_events(self) -> list[Event]:
        return [event for batch in self.batches for event in batch]

    def is_late_free(self) -> bool:
        """No event arrives behind a watermark already announced (checked, not assumed)."""
        watermark = None
        for batch, after in zip(self.batches, self.watermarks):
            if watermark is not None and any(event_ms < watermark for _, _, event_ms in batch):
                return False
            if after is not None:
                watermark = after
        return True


def make_script(events: list[Event], steps: int) -> Script:
    """Cut ``events`` (in arrival order) into ``steps`` batches and pick the watermarks.

    The watermark after a batch is the latest event time seen so far minus an out-of-orderness
    bound, which is what Spark's ``withWatermark`` computes per query. The bound is taken from
    the data: the smallest whole number of minutes such that no event is ever behind the
    watermark announced before its batch. So nothing is late for any peer, the watermark never
    passes events still to come, and Spark's watermark equals the TestStream's.
    """
    size = -(-len(events) // steps)
    batches = [events[start : start + size] for start in range(0, len(events), size)]
    lag = 0
    latest = None
    for batch in batches:
        earliest = min(event_ms for _, _, event_ms in batch)
        if latest is not None:
            lag = max(lag, latest - earliest)
        batch_latest = max(event_ms for _, _, event_ms in batch)
        latest = batch_latest if latest is None else max(latest, batch_latest)
    out_of_orderness_ms = max(1, -(-lag // 60_000)) * 60_000
    watermarks: list[int | None] = []
    latest = None
    announced = None  # the watermark starts at the beginning of time
    for batch in batches:
        batch_latest = max(event_ms for _, _, event_ms in batch)
        latest = batch_latest if latest is None else max(latest, batch_latest)
        watermark = latest - out_of_orderness_ms
        if announced is None or watermark > announced:
            watermarks.append(watermark)
            announced = watermark
        else:
            watermarks.append(None)
    return Script(batches, watermarks, out_of_orderness_ms)


def test_stream(
    script: Script, new_test_stream: Callable[[], Any], timestamped_value: type, from_micros: Callable[[int], Any]
) -> tuple[Any, list[str]]:
    """``script`` as a TestStream of either SDK (sparkbeam's API is Beam's), given its
    ``TestStream`` class, its ``TimestampedValue`` and how it makes a timestamp from
    microseconds; with the kind of each of its events ("data", "watermark"), one per step."""
    stream = new_test_stream()
    kinds = []
    for batch, watermark in zip(script.batches, script.watermarks):
        stream.add_elements(
            [timestamped_value((key, score), from_micros(event_ms * 1000)) for key, score, event_ms in batch]
        )
        kinds.append("data")
        if watermark is not None:
            stream.advance_watermark_to(from_micros(watermark * 1000))
            kinds.append("watermark")
    stream.advance_watermark_to_infinity()
    kinds.append("watermark")
    return stream, kinds
