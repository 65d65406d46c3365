"""A source's watermark from its partitions: minimum, idleness, rejoining, checkpoints.

Most cases are transcripts: each step is the processing time, what each partition
delivered (event times in seconds; an empty list is a read that found nothing), and the
source watermark after the step, in seconds.
"""

from __future__ import annotations

import copy
import doctest
import pickle
from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkbeam.io.watermarks import (
    BoundedOutOfOrderness,
    MonotonicWatermarkEstimator,
    ObservedBatch,
    WalltimeWatermarkEstimator,
    WatermarkEstimator,
)
from sparkbeam.runners.core.sources import source_watermarks
from sparkbeam.runners.core.sources.source_watermarks import (
    MIN,
    PartitionedWatermark,
    PartitionStatus,
)

S = 1_000_000

Step = tuple[float, dict[Hashable, list[float]], float | None]


def batch(event_seconds: list[float], at: float) -> ObservedBatch:
    if not event_seconds:
        return ObservedBatch.empty(processing_time=round(at * S))
    micros = [round(t * S) for t in event_seconds]
    return ObservedBatch(len(micros), min(micros), max(micros), round(at * S))


def seconds(micros: int) -> float | None:
    return None if micros == MIN else micros / S


def play(source: PartitionedWatermark, steps: list[Step]) -> None:
    """Run the transcript; the expected watermark is in seconds (None: the beginning of time)."""
    for number, (now, delivered, expected) in enumerate(steps):
        for partition, event_seconds in delivered.items():
            source.observe(partition, batch(event_seconds, at=now))
        watermark = seconds(source.advance(round(now * S)))
        assert watermark == expected, f"step {number} at {now} s: watermark {watermark}, expected {expected}"


def valve(estimator: WatermarkEstimator | None = None, idle_timeout: float | None = 10) -> PartitionedWatermark:
    timeout = None if idle_timeout is None else round(idle_timeout * S)
    return PartitionedWatermark("Kafka", estimator or MonotonicWatermarkEstimator(), timeout)


def status_of(source: PartitionedWatermark, partition: Hashable) -> PartitionStatus:
    (status,) = [s for s in source.statuses() if s.partition == repr(partition)]
    return status


def test_watermark_is_the_minimum_over_partitions():
    play(valve(), [
        # now  delivered                  watermark
        (0,    {"a": [10], "b": [4]},     4),
        (1,    {"a": [12], "b": [6]},     6),
        (2,    {"b": [30]},               12),
    ])


def test_stays_at_start_until_a_partition_exists():
    source = PartitionedWatermark("Kafka", MonotonicWatermarkEstimator(), None, start=7 * S)
    assert source.advance(100 * S) == 7 * S
    assert source.watermark == 7 * S


def test_partitions_without_an_opinion_leave_the_watermark_where_it_was():
    source = PartitionedWatermark("Kafka", BoundedOutOfOrderness(max_delay=1), None, start=7 * S)
    source.observe("a", batch([], at=0))
    source.declare("b", now=0)
    assert source.advance(100 * S) == 7 * S


def test_idle_partition_stops_holding_the_watermark():
    play(valve(idle_timeout=10), [
        # now  delivered                  watermark
        (0,    {"a": [10], "b": [4]},     4),
        (10,   {"a": [20], "b": []},      4),     # b silent for exactly 10 s: not yet idle
        (11,   {"a": [25]},               25),    # b silent for 11 s: idle, a alone decides
        (12,   {"a": [26]},               26),
    ])


def test_idle_timeout_none_means_partitions_never_go_idle():
    play(valve(idle_timeout=None), [
        (0,      {"a": [10], "b": [4]},   4),
        (10**6,  {"a": [20]},             4),
    ])


def test_idle_timeout_zero_idles_every_partition_silent_in_the_step():
    play(valve(idle_timeout=0), [
        (0,    {"a": [10], "b": [4]},     4),
        (1,    {"a": [12]},               12),
    ])


def test_all_idle_source_takes_the_max_partition_watermark():
    play(valve(idle_timeout=10), [
        (0,    {"a": [10], "b": [4], "c": [7]},   4),
        (20,   {},                                10),   # all idle: not stuck behind b
        (40,   {},                                10),   # nothing moves by itself
    ])


def test_all_idle_source_follows_the_clock_with_advance_when_idle():
    play(valve(BoundedOutOfOrderness(max_delay=5, advance_when_idle=True)), [
        (0,    {"a": [10], "b": [4]},     -1),
        (20,   {},                        15),
        (40,   {},                        35),
    ])


def test_all_idle_walltime_source_keeps_moving():
    play(valve(WalltimeWatermarkEstimator(delay=1)), [
        (0,    {"a": [], "b": []},        -1),
        (5,    {"a": [3]},                4),
        (30,   {},                        29),
    ])


def test_rejoining_partition_never_moves_the_watermark_back():
    play(valve(idle_timeout=10), [
        # now  delivered                  watermark
        (0,    {"a": [10], "b": [4]},     4),
        (11,   {"a": [30]},               30),    # b idle
        (12,   {"a": [31], "b": [6]},     31),    # b is back, far behind: not aligned
        (13,   {"a": [32], "b": [20]},    32),
        (14,   {"a": [40], "b": [33]},    33),    # b caught up with 32: it holds again
        (15,   {"a": [41], "b": [35]},    35),
    ])


def test_a_rejoining_partition_is_active_but_not_aligned_until_it_catches_up():
    source = valve(idle_timeout=10)
    play(source, [(0, {"a": [10], "b": [4]}, 4), (11, {"a": [30]}, 30), (12, {"b": [6]}, 30)])
    assert status_of(source, "b") == PartitionStatus("'b'", 6 * S, idle=False, aligned=False, last_data_time=12 * S, count_total=2)
    assert status_of(source, "a") == PartitionStatus("'a'", 30 * S, idle=False, aligned=True, last_data_time=11 * S, count_total=2)


def test_when_the_only_active_partition_is_catching_up_the_watermark_waits():
    play(valve(idle_timeout=10), [
        (0,    {"a": [10], "b": [4]},     4),
        (20,   {},                        10),    # all idle
        (21,   {"b": [5]},                10),    # b back but behind: nobody aligned
        (22,   {"b": [12]},               12),    # b caught up
    ])


def test_declared_partition_holds_the_watermark_until_its_first_records():
    source = valve(idle_timeout=10)
    source.declare("b", now=0)
    play(source, [
        (0,    {"a": [10]},               None),  # b has no opinion yet
        (5,    {"a": [20], "b": [3]},     3),
    ])


def test_declared_partition_that_stays_silent_goes_idle():
    source = valve(idle_timeout=10)
    source.declare("b", now=0)
    play(source, [(0, {"a": [10]}, None), (11, {"a": [20]}, 20)])


def test_declaring_a_known_partition_changes_nothing():
    source = valve(idle_timeout=10)
    play(source, [(0, {"a": [10]}, 10)])
    source.declare("a", now=5 * S)
    play(source, [(11, {}, 10)])
    assert status_of(source, "a").last_data_time == 0


def test_a_partition_discovered_late_does_not_hold_the_watermark():
    play(valve(), [
        (0,    {"a": [10]},               10),
        (1,    {"a": [20], "b": [5]},     20),    # b's records are late; declare b to wait for it
        (2,    {"a": [30], "b": [25]},    25),
    ])


class LastBatchStart(WatermarkEstimator):
    """A user's estimator whose opinion can go backwards (the valve keeps it monotonic)."""

    def __init__(self) -> None:
        self.start: int | None = None

    def observe(self, batch: ObservedBatch) -> None:
        if batch.count:
            self.start = batch.min_timestamp

    def current_watermark(self, now: int) -> int | None:
        return self.start


def test_user_defined_estimator_works_and_partition_watermarks_never_decrease():
    source = valve(LastBatchStart())
    play(source, [(0, {"a": [10, 12], "b": [20]}, 10), (1, {"a": [2], "b": [21]}, 10), (2, {"a": [15]}, 15)])
    assert [s.watermark for s in source.statuses()] == [15 * S, 21 * S]


def test_each_partition_gets_its_own_copy_of_the_estimator():
    prototype = MonotonicWatermarkEstimator()
    source = valve(prototype)
    play(source, [(0, {"a": [10], "b": [4]}, 4)])
    assert prototype.current_watermark(now=0) is None
    assert [s.watermark for s in source.statuses()] == [10 * S, 4 * S]


def test_statuses_tell_why_the_watermark_is_held():
    source = valve(idle_timeout=10)
    play(source, [(0, {0: [10], 1: [4]}, 4), (11, {0: [12, 14]}, 14)])
    assert source.statuses() == [
        PartitionStatus("0", 14 * S, idle=False, aligned=True, last_data_time=11 * S, count_total=3),
        PartitionStatus("1", 4 * S, idle=True, aligned=False, last_data_time=0, count_total=1),
    ]


def test_snapshot_restore_continues_identically():
    steps: list[Step] = [
        (0,    {"a": [10], "b": [4]},     4),
        (11,   {"a": [30]},               30),
        (12,   {"b": [6]},                30),
        (13,   {"a": [40], "b": [35]},    35),
        (30,   {},                        40),
    ]
    source = valve(BoundedOutOfOrderness(max_delay=0, advance_when_idle=False))
    play(source, steps[:2])
    restored = PartitionedWatermark.restore(pickle.loads(pickle.dumps(source.snapshot())))
    assert restored.statuses() == source.statuses()
    play(restored, steps[2:])
    play(source, steps[2:])
    assert restored.statuses() == source.statuses()


def test_a_snapshot_does_not_change_as_the_source_runs_on():
    source = valve()
    play(source, [(0, {"a": [10]}, 10)])
    snapshot = source.snapshot()
    play(source, [(1, {"a": [50]}, 50)])
    first, second = PartitionedWatermark.restore(snapshot), PartitionedWatermark.restore(snapshot)
    play(first, [(2, {}, 10)])
    play(second, [(2, {"a": [20]}, 20)])
    assert first.statuses()[0].watermark == 10 * S


def test_restore_rejects_what_snapshot_did_not_make():
    with pytest.raises(ValueError, match="not a PartitionedWatermark snapshot"):
        PartitionedWatermark.restore({"watermark": 0})


def test_negative_idle_timeout_names_the_source_and_the_setting():
    with pytest.raises(ValueError, match=r"^Kafka: idle_timeout must be >= 0 microseconds or None, got -1$"):
        PartitionedWatermark("Kafka", MonotonicWatermarkEstimator(), idle_timeout=-1)


def test_idle_timeout_is_microseconds():
    with pytest.raises(TypeError, match=r"^Kafka: idle_timeout must be an int number of microseconds or None, got 1\.5$"):
        PartitionedWatermark("Kafka", MonotonicWatermarkEstimator(), idle_timeout=1.5)  # type: ignore[arg-type]


def test_an_estimator_that_is_not_one_names_the_source():
    with pytest.raises(TypeError, match=r"^Kafka: the watermark estimator must be a WatermarkEstimator"):
        PartitionedWatermark("Kafka", "processing_time", idle_timeout=None)  # type: ignore[arg-type]


def test_the_transcript_harness_can_fail():
    with pytest.raises(AssertionError, match=r"step 1 at 11 s: watermark 25\.0, expected 4"):
        play(valve(idle_timeout=10), [(0, {"a": [10], "b": [4]}, 4), (11, {"a": [25]}, 4)])


def test_the_documented_example_runs():
    assert doctest.testmod(source_watermarks).failed == 0


# Property: random reads, declarations and advances, against several estimators.

ESTIMATORS = [
    lambda: BoundedOutOfOrderness(max_delay=2),
    lambda: BoundedOutOfOrderness(max_delay=2, advance_when_idle=True),
    MonotonicWatermarkEstimator,
    lambda: WalltimeWatermarkEstimator(delay=3),
    LastBatchStart,
]

partitions = st.integers(min_value=0, max_value=3)
reads = st.tuples(st.just("read"), partitions, st.lists(st.integers(min_value=0, max_value=60), max_size=3))
declarations = st.tuples(st.just("declare"), partitions, st.just([]))
advances = st.tuples(st.just("advance"), st.integers(min_value=0, max_value=15), st.just([]))
operations = st.lists(st.one_of(reads, reads, advances, advances, declarations), max_size=40)


def replay(source: PartitionedWatermark, ops: list, now: int = 0) -> tuple[list[int], int]:
    """Apply ``ops`` from processing time ``now``; the watermark after each advance, and the end time."""
    watermarks = []
    for kind, argument, event_seconds in ops:
        if kind == "read":
            source.observe(argument, batch(event_seconds, at=now / S))
        elif kind == "declare":
            source.declare(argument, now)
        else:
            now += argument * S
            previous = source.watermark
            watermark = source.advance(now)
            check_invariants(source, previous, watermark)
            watermarks.append(watermark)
    return watermarks, now


def check_invariants(source: PartitionedWatermark, previous: int, watermark: int) -> None:
    statuses = source.statuses()
    assert watermark >= previous, "the source watermark went back"
    if statuses and all(s.idle for s in statuses):
        assert watermark >= max(s.watermark for s in statuses), "an all-idle source lags a partition"
    elif watermark > previous:
        holding = [s.watermark for s in statuses if not s.idle and s.aligned]
        assert holding, "the watermark moved with no active aligned partition"
        assert watermark <= min(holding), "the watermark passed an active aligned partition"


@settings(max_examples=300, deadline=None)
@given(
    ops=operations,
    estimator=st.sampled_from(ESTIMATORS),
    idle_timeout=st.one_of(st.none(), st.integers(min_value=0, max_value=20)),
    split=st.floats(min_value=0, max_value=1),
)
def test_source_watermark_properties_and_checkpoint_replay(ops, estimator, idle_timeout, split):
    timeout = None if idle_timeout is None else idle_timeout * S
    uninterrupted = PartitionedWatermark("Kafka", estimator(), timeout)
    expected, _ = replay(uninterrupted, ops)

    cut = round(split * len(ops))
    before = PartitionedWatermark("Kafka", estimator(), timeout)
    first_part, now = replay(before, ops[:cut])
    checkpoint = pickle.loads(pickle.dumps(copy.deepcopy(before.snapshot())))
    restored = PartitionedWatermark.restore(checkpoint)
    second_part, _ = replay(restored, ops[cut:], now)
    assert first_part + second_part == expected
    assert restored.statuses() == uninterrupted.statuses()


# -- a resumed run's changed settings --------------------------------------------------------


def resumed(valve: PartitionedWatermark) -> PartitionedWatermark:
    return PartitionedWatermark.restore(pickle.loads(pickle.dumps(valve.snapshot())))


def test_a_changed_delay_applies_from_the_resume_on_and_keeps_what_was_learned():
    valve = PartitionedWatermark("Read", BoundedOutOfOrderness(max_delay=10), idle_timeout=None)
    valve.observe("a", batch([100], at=0))
    assert valve.advance(0) == 90 * S
    again = resumed(valve)
    assert again.reconfigure(BoundedOutOfOrderness(max_delay=30), idle_timeout=5 * S) == [
        "idle_timeout none -> 5 s",
        "watermark BoundedOutOfOrdernessWatermarkEstimator(advance_when_idle=False, max_delay=10000000, "
        "max_event_time=None) -> BoundedOutOfOrdernessWatermarkEstimator(advance_when_idle=False, "
        "max_delay=30000000, max_event_time=None)",
    ]
    assert again.advance(1 * S) == 90 * S  # 100 - 30 would go back: it holds
    again.observe("a", batch([150], at=2))
    assert again.advance(2 * S) == 120 * S  # the latest event, learned before and after, minus the new delay
    assert again.idle_timeout == 5 * S
    assert again.reconfigure(BoundedOutOfOrderness(max_delay=30), idle_timeout=5 * S) == []


def test_another_estimator_class_is_refused_naming_both():
    valve = PartitionedWatermark("Read", BoundedOutOfOrderness(max_delay=10), idle_timeout=None)
    valve.observe("a", batch([100], at=0))
    with pytest.raises(ValueError, match=r"Read: the watermark estimator is WalltimeWatermarkEstimator\(.*\) in this run and BoundedOutOfOrdernessWatermarkEstimator\(.*\) in the checkpoint"):
        resumed(valve).reconfigure(WalltimeWatermarkEstimator(), idle_timeout=None)


class Scaled(WatermarkEstimator):
    """A user's estimator whose parameter is also what it learns (it adapts its lag)."""

    def __init__(self, lag):
        self.lag = lag
        self.latest = None

    def observe(self, batch):
        if batch.count:
            self.latest = batch.max_timestamp
            self.lag = max(self.lag, batch.max_timestamp - batch.min_timestamp)

    def current_watermark(self, now):
        return None if self.latest is None else self.latest - self.lag


def test_a_changed_parameter_that_observing_changes_too_is_refused():
    valve = PartitionedWatermark("Read", Scaled(lag=1), idle_timeout=None)
    valve.observe("a", batch([100, 130], at=0))
    with pytest.raises(ValueError, match=r"Read: the watermark estimator changed .* in lag, which its partitions' copies changed while observing"):
        resumed(valve).reconfigure(Scaled(lag=5), idle_timeout=None)
