"""One streaming source's watermark, combined from its partitions' (the "valve").

Each partition of a source has its own copy of the source's ``WatermarkEstimator``. After
the runner has fed a step's batches to ``observe``, ``advance(now)`` applies these rules
(``now`` and every time are processing or event time in integer microseconds):

1. A partition's watermark is its estimator's ``current_watermark(now)`` (None counts as
   the beginning of time), and never decreases.
2. A partition is *idle* when more than ``idle_timeout`` of processing time has passed
   since it last delivered records (a batch with ``count > 0``, at that batch's
   ``processing_time``) or, if it never has, since it was first seen or declared. With
   ``idle_timeout=None`` partitions never go idle; with ``0`` a partition is idle in
   every step in which it delivered nothing.
3. The source's watermark is the minimum over the partitions that are active (not idle)
   and *aligned*. An idle partition does not hold the watermark back.
4. When every partition is idle, the source's watermark is the maximum over the
   partitions of their estimators' ``idle_watermark(now)`` (never below the partition's
   own watermark): it is not stuck behind the slowest partition, and with
   ``advance_when_idle=True`` or a walltime estimator it keeps moving with processing
   time.
5. A partition loses alignment when it goes idle. When it delivers records again it is
   active but takes no part in the minimum until its own watermark has caught up with
   the source's; so its return never holds the watermark back. Its records behind the
   watermark are late (dropping them is the caller's business). A partition first seen
   through ``observe`` joins the same way, as one that was idle until then.
6. A partition named by ``declare`` is aligned from the start: it holds the watermark
   (at the beginning of time, if it has no opinion) until it delivers records or goes
   idle. Declare the partitions you know up front (Kafka partitions, rate-source
   splits) so that the watermark waits for their first records.
7. The source's watermark never decreases. It stays at ``start`` until a partition
   exists, and stays where it was when no active partition is aligned.

These are the rules of Flink's ``StatusWatermarkValve``, with partitions for channels and
the idle timeout of ``WatermarkStrategy.withIdleness`` deciding idleness.

>>> from sparkbeam.io.watermarks import MonotonicWatermarkEstimator, ObservedBatch
>>> source = PartitionedWatermark("Kafka", MonotonicWatermarkEstimator(), idle_timeout=10)
>>> source.observe(0, ObservedBatch(count=1, min_timestamp=5, max_timestamp=5, processing_time=0))
>>> source.observe(1, ObservedBatch(count=1, min_timestamp=9, max_timestamp=9, processing_time=0))
>>> source.advance(now=0)
5
>>> source.observe(1, ObservedBatch(count=1, min_timestamp=20, max_timestamp=20, processing_time=20))
>>> source.advance(now=20)  # partition 0 has been silent for more than 10 µs: idle
20
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import Any

import attrs

from sparkbeam.io.watermarks import ObservedBatch, WatermarkEstimator
from sparkbeam.runners.core.lowering.descriptions import attributes, describe
from sparkbeam.utils.timestamp import MIN_TIMESTAMP

__all__ = ["PartitionStatus", "PartitionedWatermark"]

MIN = MIN_TIMESTAMP.micros

_SNAPSHOT_FORMAT = "sparkbeam.PartitionedWatermark/1"


def _micros_text(value: int | None) -> str:
    return "none" if value is None else f"{value / 1_000_000:g} s"


def _described(fields: dict[str, Any], name: str) -> str:
    return describe(fields[name]) if name in fields else "(none)"


@attrs.frozen
class PartitionStatus:
    """One partition as of the last ``advance``: what it holds and why (for monitoring)."""

    partition: str
    watermark: int
    idle: bool
    aligned: bool
    last_data_time: int
    count_total: int


@attrs.define(eq=False)
class _Partition:
    key: Hashable
    estimator: WatermarkEstimator
    last_data_time: int
    watermark: int = MIN
    idle: bool = False
    aligned: bool = False
    count_total: int = 0

    def to_plain(self) -> dict[str, Any]:
        return {**attrs.asdict(self, recurse=False), "estimator": copy.deepcopy(self.estimator)}


class PartitionedWatermark:
    """The watermark of one source read in partitions, each with its own estimator.

    ``idle_timeout`` is in microseconds (None: partitions never go idle). See the module
    documentation for the rules.
    """

    def __init__(
        self,
        source_label: str,
        prototype: WatermarkEstimator,
        idle_timeout: int | None,
        start: int = MIN,
    ) -> None:
        if not isinstance(prototype, WatermarkEstimator):
            msg = f"{source_label}: the watermark estimator must be a WatermarkEstimator, got {prototype!r}"
            raise TypeError(msg)
        if idle_timeout is not None:
            if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int):
                msg = f"{source_label}: idle_timeout must be an int number of microseconds or None, got {idle_timeout!r}"
                raise TypeError(msg)
            if idle_timeout < 0:
                msg = f"{source_label}: idle_timeout must be >= 0 microseconds or None, got {idle_timeout}"
                raise ValueError(msg)
        self.source_label = source_label
        self.prototype = prototype
        self.idle_timeout = idle_timeout
        self.start = start
        self._watermark = start
        self._partitions: dict[Hashable, _Partition] = {}

    @property
    def watermark(self) -> int:
        """The source's watermark as of the last ``advance`` (microseconds)."""
        return self._watermark

    def declare(self, partition: Hashable, now: int) -> None:
        """Make ``partition`` hold the watermark from ``now``, before its first records.

        Declaring a partition already known changes nothing.
        """
        if partition not in self._partitions:
            self._partitions[partition] = _Partition(
                partition, copy.deepcopy(self.prototype), last_data_time=now, aligned=True
            )

    def observe(self, partition: Hashable, batch: ObservedBatch) -> None:
        """Feed what ``partition`` delivered in one step to its estimator."""
        state = self._partitions.get(partition)
        if state is None:
            state = _Partition(partition, copy.deepcopy(self.prototype), batch.processing_time)
            self._partitions[partition] = state
        state.estimator.observe(batch)
        if batch.count > 0:
            state.count_total += batch.count
            state.last_data_time = max(state.last_data_time, batch.processing_time)

    def advance(self, now: int) -> int:
        """Recompute the partitions' and the source's watermarks at ``now``; return the source's."""
        previous = self._watermark
        for state in self._partitions.values():
            opinion = state.estimator.current_watermark(now)
            state.watermark = max(state.watermark, MIN if opinion is None else opinion)
            idle = self._is_idle(state, now)
            if idle:
                state.aligned = False
            elif not state.aligned and state.watermark >= previous:
                state.aligned = True
            state.idle = idle
        if not self._partitions:
            return previous
        if all(state.idle for state in self._partitions.values()):
            candidate = max(self._idle_watermark(state, now) for state in self._partitions.values())
        else:
            aligned = [state.watermark for state in self._partitions.values() if state.aligned]
            candidate = min(aligned) if aligned else previous
        self._watermark = max(previous, candidate)
        return self._watermark

    def _is_idle(self, state: _Partition, now: int) -> bool:
        return self.idle_timeout is not None and now - state.last_data_time > self.idle_timeout

    @staticmethod
    def _idle_watermark(state: _Partition, now: int) -> int:
        opinion = state.estimator.idle_watermark(now)
        return state.watermark if opinion is None else max(state.watermark, opinion)

    def statuses(self) -> list[PartitionStatus]:
        """Every partition as of the last ``advance``, in the order they were first seen."""
        return [
            PartitionStatus(
                partition=repr(state.key),
                watermark=state.watermark,
                idle=state.idle,
                aligned=state.aligned,
                last_data_time=state.last_data_time,
                count_total=state.count_total,
            )
            for state in self._partitions.values()
        ]

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to carry on after a restart, as a plain picklable dict.

        The estimators are copied, so the snapshot does not change as this object runs on.
        """
        return {
            "format": _SNAPSHOT_FORMAT,
            "source_label": self.source_label,
            "prototype": copy.deepcopy(self.prototype),
            "idle_timeout": self.idle_timeout,
            "start": self.start,
            "watermark": self._watermark,
            "partitions": [state.to_plain() for state in self._partitions.values()],
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> PartitionedWatermark:
        """The ``PartitionedWatermark`` that ``snapshot`` saved; advancing it continues identically."""
        if not isinstance(data, dict) or data.get("format") != _SNAPSHOT_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            msg = (
                f"not a PartitionedWatermark snapshot (expected format {_SNAPSHOT_FORMAT!r}, "
                f"got {found!r}); pass the dict that snapshot() returned"
            )
            raise ValueError(msg)
        data = copy.deepcopy(data)  # restoring one snapshot twice gives independent estimators
        restored = cls(data["source_label"], data["prototype"], data["idle_timeout"], data["start"])
        restored._watermark = data["watermark"]
        for fields in data["partitions"]:
            restored._partitions[fields["key"]] = _Partition(**fields)
        return restored

    def reconfigure(self, prototype: WatermarkEstimator, idle_timeout: int | None) -> list[str]:
        """Take a resumed run's settings where they changed since the checkpoint, from the
        next ``advance`` on; returns what changed. ``idle_timeout`` is simply replaced. A
        changed estimator of the same class keeps what each partition's copy learned (the
        attributes observing changed) and takes the new prototype's changed parameters;
        another class, or a changed parameter that observing also changes, is refused
        (ValueError): what was learned cannot carry over. Watermarks never go back: a
        larger delay holds the watermark where it is until the events catch up."""
        changes = []
        if idle_timeout != self.idle_timeout:
            changes.append(f"idle_timeout {_micros_text(self.idle_timeout)} -> {_micros_text(idle_timeout)}")
            self.idle_timeout = idle_timeout
        before, after = describe(self.prototype), describe(prototype)
        if before == after:
            return changes
        if type(prototype) is not type(self.prototype):
            msg = (
                f"{self.source_label}: the watermark estimator is {after} in this run and {before} in the "
                "checkpoint; each partition's estimator carries what it learned, which another class cannot take "
                "over. Run with the checkpoint's estimator, or start a new --checkpoint_dir"
            )
            raise ValueError(msg)
        old, new = attributes(self.prototype), attributes(prototype)
        changed = sorted(name for name in old.keys() | new.keys() if _described(old, name) != _described(new, name))
        learned = {
            name
            for state in self._partitions.values()
            for name, value in attributes(state.estimator).items()
            if describe(value) != _described(old, name)
        }
        if learned & set(changed):
            msg = (
                f"{self.source_label}: the watermark estimator changed ({before} -> {after}) in "
                f"{', '.join(sorted(learned & set(changed)))}, which its partitions' copies changed while observing; "
                "what they learned cannot carry over. Run with the checkpoint's estimator, or start a new --checkpoint_dir"
            )
            raise ValueError(msg)
        try:
            for state in self._partitions.values():
                for name in changed:
                    setattr(state.estimator, name, copy.deepcopy(new[name]))
        except (AttributeError, TypeError) as error:  # a frozen estimator, a missing attribute
            msg = (
                f"{self.source_label}: the watermark estimator changed ({before} -> {after}) and its partitions' "
                f"copies cannot take the new parameters ({error}). Run with the checkpoint's estimator, or start a "
                "new --checkpoint_dir"
            )
            raise ValueError(msg) from None
        self.prototype = copy.deepcopy(prototype)
        changes.append(f"watermark {before} -> {after}")
        return changes

    def __repr__(self) -> str:
        return (
            f"PartitionedWatermark({self.source_label!r}, watermark={self._watermark}, "
            f"partitions={len(self._partitions)})"
        )
