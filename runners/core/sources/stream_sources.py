"""An unbounded source in the step loop: the micro-batches a step takes, and the source's watermark.

A backend's intake turns each micro-batch of a real source into a ``WalBatch``: the records
it kept, written durably (a write-ahead log), and per source partition how many there were
and their earliest and latest event times. Records behind the source's watermark by more
than the source's ``allowed_delay`` were dropped there and counted; records that could not
be parsed or stamped were kept as dead letters and counted.

Before each step the run hands the source the batches that step takes (``feed``); the step
observes their partition statistics into the source's ``PartitionedWatermark`` at the
step's processing time, and the source's watermark is what that valve says. Everything the
source knows between steps is in ``snapshot()``, so a restored source continues exactly.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from sparkbeam.io.watermarks import ObservedBatch
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import StreamReadOp
from sparkbeam.runners.core.sources.source_watermarks import PartitionedWatermark
from sparkbeam.runners.core.sources.sources import SourceEmission, SourceReport, SourceState
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["PartitionStats", "StreamSourceState", "WalBatch"]

MIN = MIN_TIMESTAMP.micros
MAX = MAX_TIMESTAMP.micros

_LOG = logging.getLogger(__name__)


@attrs.frozen
class PartitionStats:
    """One source partition's share of a micro-batch (records kept, event-time range)."""

    partition: str
    count: int
    min_timestamp: int
    max_timestamp: int


@attrs.frozen
class WalBatch:
    """One micro-batch of a real source, durable in the write-ahead log."""

    batch_id: int
    #: where its records are (None when it kept none)
    path: str | None
    partitions: tuple[PartitionStats, ...]
    records: int
    dropped: int
    bad: int
    #: the source's offsets at the end of the batch, as Spark logged them (for the manifest)
    offsets: str | None = None

    def to_plain(self) -> dict[str, Any]:
        plain = attrs.asdict(self)
        plain["partitions"] = [attrs.astuple(p) for p in self.partitions]
        return plain

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> WalBatch:
        fields = dict(plain)
        fields["partitions"] = tuple(PartitionStats(*p) for p in plain["partitions"])
        return cls(**fields)


class StreamSourceState(SourceState):
    """One unbounded source's progress: its watermark valve and the last batch it consumed."""

    def __init__(self, op: StreamReadOp) -> None:
        self.op = op
        spec = op.spec
        self.allowed_delay = spec.allowed_delay
        self.valve = PartitionedWatermark(op.label, spec.watermark, spec.idle_timeout)
        self.consumed_through = -1
        self.watermark = MIN
        self.done = False
        self._pending: list[WalBatch] = []
        self._now = MIN
        self._exhausted = False

    def drop_before(self) -> int | None:
        """Records stamped before this are dropped at the source (None: nothing is dropped)."""
        if self.allowed_delay is None or self.watermark <= MIN:
            return None
        return self.watermark - self.allowed_delay

    def feed(self, batches: list[WalBatch], now: int, *, exhausted: bool) -> None:
        """What the next step takes; ``exhausted``: the source will deliver nothing after them."""
        self._pending = list(batches)
        self._now = now
        self._exhausted = exhausted

    def next_step(self) -> SourceEmission:
        batches, self._pending = self._pending, []
        for batch in batches:
            for part in batch.partitions:
                self.valve.observe(
                    part.partition,
                    ObservedBatch(part.count, part.min_timestamp, part.max_timestamp, self._now),
                )
            self.consumed_through = batch.batch_id
        if self._exhausted:
            self.done = True
            self.watermark = MAX
        else:
            self.watermark = max(self.watermark, self.valve.advance(self._now))
        report = SourceReport(
            dropped=sum(b.dropped for b in batches),
            dead_letters=sum(b.bad for b in batches),
            **self._holding_partition(),
        )
        paths = tuple(b.path for b in batches if b.path is not None)
        return SourceEmission(self.watermark, wal_paths=paths, report=report)

    def _holding_partition(self) -> dict[str, Any]:
        """The active partition that sets the watermark (what holds the source back)."""
        if self.done:
            return {}
        holding = [s for s in self.valve.statuses() if s.aligned and not s.idle]
        if not holding:
            return {}
        slowest = min(holding, key=lambda s: s.watermark)
        idle = sum(1 for s in self.valve.statuses() if s.idle)
        note = f"partition {slowest.partition}" + (f" ({idle} idle)" if idle else "")
        return {"hold": slowest.watermark, "hold_partition": note}

    def snapshot(self) -> dict[str, Any]:
        return {
            "valve": self.valve.snapshot(),
            "consumed_through": self.consumed_through,
            "watermark": self.watermark,
            "done": self.done,
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Continue from a checkpoint's snapshot, with this run's settings where they
        changed: ``idle_timeout`` and the estimator's parameters apply from the next step
        on (``PartitionedWatermark.reconfigure``), as ``allowed_delay`` always does."""
        self.valve = PartitionedWatermark.restore(data["valve"])
        try:
            changes = self.valve.reconfigure(self.op.spec.watermark, self.op.spec.idle_timeout)
        except ValueError as error:
            msg = f"'{self.op.label}' (applied at {self.op.location}): {error}"
            raise TransformError(msg) from None
        if changes:
            _LOG.warning("'%s': resumed with changed settings, applied from this step on: %s", self.op.label, "; ".join(changes))
        self.consumed_through = data["consumed_through"]
        self.watermark = data["watermark"]
        self.done = data["done"]
