"""Watermark estimators: how a streaming source turns what it read into a watermark.

A source is read in partitions (Kafka partitions, rate-source splits, ...). Each partition
gets its own copy of the estimator (``copy.deepcopy`` of the one you pass), and the runner
combines the partitions' watermarks into the source's watermark (see
``sparkbeam.runners.core.sources.source_watermarks`` for the idleness rules).

An estimator runs on the driver, where the records are not: they stay on the Spark
executors. What the driver sees of one partition in one step is an ``ObservedBatch``: how
many records it delivered, their smallest and largest event time, and the processing time
at which the step read them. That is why ``observe`` takes a batch, not a record.

All times are integer microseconds. Delays are given as a ``Duration`` or a number of
seconds.

>>> estimator = BoundedOutOfOrdernessWatermarkEstimator(max_delay=5)
>>> estimator.observe(ObservedBatch(count=3, min_timestamp=10_000_000,
...                                 max_timestamp=20_000_000, processing_time=0))
>>> estimator.current_watermark(now=0)  # 20 s seen, 5 s of allowed disorder
15000000

Write your own by subclassing ``WatermarkEstimator``; instances must pickle, because
they are copied per partition and saved in checkpoints.
"""

from __future__ import annotations

import attrs

from sparkbeam.utils.timestamp import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    Duration,
    DurationLike,
    seconds_text,
)

__all__ = [
    "BoundedOutOfOrderness",
    "BoundedOutOfOrdernessWatermarkEstimator",
    "MonotonicWatermarkEstimator",
    "ObservedBatch",
    "WalltimeWatermarkEstimator",
    "WatermarkEstimator",
    "coerce_estimator",
]

_MIN = MIN_TIMESTAMP.micros
_MAX = MAX_TIMESTAMP.micros

_PROCESSING_TIME_NAMES = ("processing_time", "ingestion_time")


def _non_negative_count(instance: ObservedBatch, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = f"ObservedBatch.count must be an int >= 0, got {value!r}"
        raise ValueError(msg)


@attrs.frozen
class ObservedBatch:
    """What one source partition delivered in one step, as the driver sees it.

    ``count`` records with event times from ``min_timestamp`` to ``max_timestamp``, read
    at ``processing_time`` (all microseconds). A batch with ``count == 0`` says the
    partition was read and had nothing; its two timestamps mean nothing
    (``ObservedBatch.empty`` builds one).

    >>> ObservedBatch(count=2, min_timestamp=1, max_timestamp=9, processing_time=100).count
    2
    """

    count: int = attrs.field(validator=_non_negative_count)
    min_timestamp: int
    max_timestamp: int
    processing_time: int

    def __attrs_post_init__(self) -> None:
        if self.count > 0 and self.min_timestamp > self.max_timestamp:
            msg = (
                f"ObservedBatch: min_timestamp ({self.min_timestamp}) is after "
                f"max_timestamp ({self.max_timestamp}) in a batch of {self.count} records"
            )
            raise ValueError(msg)

    @classmethod
    def empty(cls, processing_time: int) -> ObservedBatch:
        """A read that found nothing (``count=0``) at ``processing_time``."""
        return cls(count=0, min_timestamp=_MAX, max_timestamp=_MIN, processing_time=processing_time)


class WatermarkEstimator:
    """Base class of watermark estimators; one instance per source partition.

    Implement ``current_watermark``; override ``observe`` to learn from the batches and
    ``idle_watermark`` to let an idle partition advance. Watermarks are microseconds;
    ``None`` means "no opinion yet" and counts as the beginning of time.

    >>> class EveryRecordOnTime(WatermarkEstimator):
    ...     def __init__(self):
    ...         self.latest = None
    ...     def observe(self, batch):
    ...         if batch.count:
    ...             self.latest = max(batch.max_timestamp, self.latest or batch.max_timestamp)
    ...     def current_watermark(self, now):
    ...         return self.latest
    >>> EveryRecordOnTime().current_watermark(now=0) is None
    True
    """

    def observe(self, batch: ObservedBatch) -> None:
        """Learn from what the partition delivered in one step (default: ignore it)."""

    def current_watermark(self, now: int) -> int | None:
        """This partition's watermark at processing time ``now``, or None for no opinion."""
        msg = (
            f"{type(self).__name__} must implement current_watermark(self, now) -> int | None "
            "(microseconds; None for no opinion yet)"
        )
        raise NotImplementedError(msg)

    def idle_watermark(self, now: int) -> int | None:
        """What the watermark may advance to while the partition delivers nothing.

        Only used when every partition of the source is idle; by default the current
        watermark, so an idle source does not move on its own.
        """
        return self.current_watermark(now)


def _delay_micros(owner: str, setting: str, value: DurationLike) -> int:
    if isinstance(value, Duration):
        micros = value.micros
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        micros = Duration(seconds=value).micros
    else:
        msg = f"{owner}: {setting} must be a Duration or a number of seconds, got {value!r}"
        raise TypeError(msg)
    if micros < 0:
        msg = f"{owner}: {setting} must be >= 0, got {seconds_text(micros)} seconds"
        raise ValueError(msg)
    return micros


def _minus(time: int, delay: int) -> int:
    # Keeps a watermark near the beginning of time from falling off Beam's range.
    return max(_MIN, time - delay)


class BoundedOutOfOrdernessWatermarkEstimator(WatermarkEstimator):
    """Records arrive at most ``max_delay`` behind the latest event time seen.

    The watermark is the largest event time seen minus ``max_delay`` (no opinion before
    the first record; it never decreases). With ``advance_when_idle=True``, an idle
    partition's watermark follows processing time: ``max(watermark, now - max_delay)``
    (Beam KafkaIO's ``CustomTimestampPolicyWithLimitedDelay``). It is off by default
    because when replaying old data, processing time is far ahead of event time and
    every record would then be late.

    >>> estimator = BoundedOutOfOrdernessWatermarkEstimator(max_delay=Duration(2))
    >>> estimator.observe(ObservedBatch(count=1, min_timestamp=7_000_000,
    ...                                 max_timestamp=7_000_000, processing_time=0))
    >>> estimator.current_watermark(now=0)
    5000000
    """

    def __init__(self, max_delay: DurationLike, advance_when_idle: bool = False) -> None:
        self.max_delay = _delay_micros(type(self).__name__, "max_delay", max_delay)
        self.advance_when_idle = advance_when_idle
        self.max_event_time: int | None = None

    def observe(self, batch: ObservedBatch) -> None:
        if batch.count == 0:
            return
        if self.max_event_time is None or batch.max_timestamp > self.max_event_time:
            self.max_event_time = batch.max_timestamp

    def current_watermark(self, now: int) -> int | None:
        if self.max_event_time is None:
            return None
        return _minus(self.max_event_time, self.max_delay)

    def idle_watermark(self, now: int) -> int | None:
        current = self.current_watermark(now)
        if not self.advance_when_idle:
            return current
        following_the_clock = _minus(now, self.max_delay)
        return following_the_clock if current is None else max(current, following_the_clock)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_delay=Duration({seconds_text(self.max_delay)}), "
            f"advance_when_idle={self.advance_when_idle})"
        )


BoundedOutOfOrderness = BoundedOutOfOrdernessWatermarkEstimator


class MonotonicWatermarkEstimator(BoundedOutOfOrdernessWatermarkEstimator):
    """Event times only grow within a partition: the watermark is the latest seen.

    >>> MonotonicWatermarkEstimator()
    MonotonicWatermarkEstimator()
    """

    def __init__(self) -> None:
        super().__init__(max_delay=0)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class WalltimeWatermarkEstimator(WatermarkEstimator):
    """Processing (ingestion) time: the watermark is ``now - delay``, whatever the data.

    >>> WalltimeWatermarkEstimator(delay=1).current_watermark(now=10_000_000)
    9000000
    """

    def __init__(self, delay: DurationLike = 0) -> None:
        self.delay = _delay_micros(type(self).__name__, "delay", delay)

    def current_watermark(self, now: int) -> int | None:
        return _minus(now, self.delay)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(delay=Duration({seconds_text(self.delay)}))"


def coerce_estimator(owner: str, value: object) -> WatermarkEstimator:
    """The estimator that ``value`` names, for a source's ``watermark_estimator=`` setting.

    Accepts a ``WatermarkEstimator`` instance (returned as is) or ``"processing_time"`` /
    ``"ingestion_time"`` (a ``WalltimeWatermarkEstimator()``).

    >>> coerce_estimator("ReadFromKafka", "processing_time")
    WalltimeWatermarkEstimator(delay=Duration(0))
    """
    if isinstance(value, WatermarkEstimator):
        return value
    if isinstance(value, str) and value in _PROCESSING_TIME_NAMES:
        return WalltimeWatermarkEstimator()
    hint = ""
    if isinstance(value, type) and issubclass(value, WatermarkEstimator):
        hint = f" (pass an instance: {value.__name__}(...), not the class)"
    msg = (
        f"{owner}: the watermark estimator must be a WatermarkEstimator instance "
        f"(e.g. BoundedOutOfOrderness(max_delay=10)) or one of "
        f"{', '.join(repr(name) for name in _PROCESSING_TIME_NAMES)}; got {value!r}{hint}"
    )
    raise TypeError(msg)
