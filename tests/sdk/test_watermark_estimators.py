"""Watermark estimators: what each one makes of the batches a partition delivers."""

from __future__ import annotations

import copy
import doctest
import pickle
import subprocess
import sys
import textwrap

import pytest

from sparkbeam.io import watermarks
from sparkbeam.io.watermarks import (
    BoundedOutOfOrderness,
    BoundedOutOfOrdernessWatermarkEstimator,
    MonotonicWatermarkEstimator,
    ObservedBatch,
    WalltimeWatermarkEstimator,
    WatermarkEstimator,
    coerce_estimator,
)
from sparkbeam.utils.timestamp import MIN_TIMESTAMP, Duration

S = 1_000_000


def batch(*event_seconds: float, at: float = 0) -> ObservedBatch:
    """What a partition delivered: records at ``event_seconds``, read at ``at`` seconds."""
    if not event_seconds:
        return ObservedBatch.empty(processing_time=round(at * S))
    micros = [round(t * S) for t in event_seconds]
    return ObservedBatch(len(micros), min(micros), max(micros), round(at * S))


def fed(estimator: WatermarkEstimator, *batches: ObservedBatch) -> WatermarkEstimator:
    for each in batches:
        estimator.observe(each)
    return estimator


class LatestRecordIsTheWatermark(WatermarkEstimator):
    """A user's estimator: only ``current_watermark`` is required."""

    def __init__(self) -> None:
        self.latest: int | None = None

    def observe(self, batch: ObservedBatch) -> None:
        if batch.count:
            self.latest = batch.max_timestamp

    def current_watermark(self, now: int) -> int | None:
        return self.latest


def test_bounded_out_of_orderness_is_max_seen_minus_delay():
    estimator = fed(BoundedOutOfOrdernessWatermarkEstimator(max_delay=5), batch(12, 20, 15), batch(18))
    assert estimator.current_watermark(now=0) == 15 * S


def test_bounded_out_of_orderness_has_no_opinion_before_any_record():
    estimator = fed(BoundedOutOfOrdernessWatermarkEstimator(max_delay=5), batch(at=3))
    assert estimator.current_watermark(now=3 * S) is None


def test_bounded_out_of_orderness_never_decreases_when_older_records_arrive():
    estimator = fed(BoundedOutOfOrdernessWatermarkEstimator(max_delay=1), batch(30), batch(2, 4))
    assert estimator.current_watermark(now=0) == 29 * S


def test_empty_batches_teach_nothing():
    estimator = fed(MonotonicWatermarkEstimator(), batch(7), batch(at=100))
    assert estimator.current_watermark(now=100 * S) == 7 * S


def test_delay_is_a_duration_or_seconds():
    assert BoundedOutOfOrderness(max_delay=Duration(2)).max_delay == 2 * S
    assert BoundedOutOfOrderness(max_delay=0.25).max_delay == 250_000
    assert WalltimeWatermarkEstimator(delay=3).delay == 3 * S


def test_negative_delay_names_the_estimator_and_the_value():
    with pytest.raises(ValueError, match=r"^BoundedOutOfOrdernessWatermarkEstimator: max_delay must be >= 0, got -5 seconds$"):
        BoundedOutOfOrdernessWatermarkEstimator(max_delay=-5)
    with pytest.raises(ValueError, match=r"^WalltimeWatermarkEstimator: delay must be >= 0, got -0.5 seconds$"):
        WalltimeWatermarkEstimator(delay=Duration(-0.5))


def test_a_delay_that_is_not_a_span_of_time_names_the_setting():
    with pytest.raises(TypeError, match="max_delay must be a Duration or a number of seconds, got '5s'"):
        BoundedOutOfOrderness(max_delay="5s")  # type: ignore[arg-type]


def test_watermarks_near_the_beginning_of_time_stay_in_range():
    estimator = fed(BoundedOutOfOrderness(max_delay=10), ObservedBatch(1, MIN_TIMESTAMP.micros, MIN_TIMESTAMP.micros, 0))
    assert estimator.current_watermark(now=0) == MIN_TIMESTAMP.micros


def test_idle_partitions_follow_the_clock_only_when_asked():
    replaying = fed(BoundedOutOfOrderness(max_delay=5), batch(10))
    live = fed(BoundedOutOfOrderness(max_delay=5, advance_when_idle=True), batch(10))
    assert replaying.idle_watermark(now=100 * S) == 5 * S
    assert live.idle_watermark(now=100 * S) == 95 * S
    assert live.idle_watermark(now=12 * S) == 7 * S  # the clock is behind: the data decides
    assert live.current_watermark(now=100 * S) == 5 * S  # only idleness follows the clock


def test_an_idle_partition_without_data_may_follow_the_clock():
    live = BoundedOutOfOrderness(max_delay=5, advance_when_idle=True)
    assert live.idle_watermark(now=100 * S) == 95 * S


def test_monotonic_is_bounded_out_of_orderness_without_delay():
    estimator = fed(MonotonicWatermarkEstimator(), batch(3, 9))
    assert estimator.current_watermark(now=0) == 9 * S
    assert repr(estimator) == "MonotonicWatermarkEstimator()"


def test_walltime_ignores_the_data():
    estimator = fed(WalltimeWatermarkEstimator(delay=2), batch(1_000))
    assert estimator.current_watermark(now=50 * S) == 48 * S
    assert estimator.idle_watermark(now=60 * S) == 58 * S


def test_a_user_estimator_needs_only_current_watermark():
    estimator = fed(LatestRecordIsTheWatermark(), batch(4), batch(at=9))
    assert estimator.current_watermark(now=9 * S) == 4 * S
    assert estimator.idle_watermark(now=9 * S) == 4 * S  # the default: no movement when idle


def test_an_estimator_without_current_watermark_says_what_to_implement():
    class Unfinished(WatermarkEstimator):
        pass

    with pytest.raises(NotImplementedError, match=r"Unfinished must implement current_watermark\(self, now\)"):
        Unfinished().current_watermark(now=0)


def test_estimators_pickle_and_copy_with_their_state():
    for estimator in (
        fed(BoundedOutOfOrderness(max_delay=1, advance_when_idle=True), batch(8)),
        fed(MonotonicWatermarkEstimator(), batch(8)),
        WalltimeWatermarkEstimator(delay=1),
        fed(LatestRecordIsTheWatermark(), batch(8)),
    ):
        for twin in (pickle.loads(pickle.dumps(estimator)), copy.deepcopy(estimator)):
            assert type(twin) is type(estimator)
            assert twin.current_watermark(now=20 * S) == estimator.current_watermark(now=20 * S)
            assert twin.idle_watermark(now=20 * S) == estimator.idle_watermark(now=20 * S)


def test_observed_batch_rejects_impossible_summaries():
    with pytest.raises(ValueError, match="count must be an int >= 0, got -1"):
        ObservedBatch(count=-1, min_timestamp=0, max_timestamp=0, processing_time=0)
    with pytest.raises(ValueError, match=r"min_timestamp \(9\) is after max_timestamp \(1\)"):
        ObservedBatch(count=2, min_timestamp=9, max_timestamp=1, processing_time=0)
    assert ObservedBatch.empty(processing_time=5).count == 0


def test_coerce_estimator_takes_an_instance_as_is():
    estimator = MonotonicWatermarkEstimator()
    assert coerce_estimator("ReadFromKafka", estimator) is estimator


@pytest.mark.parametrize("name", ["processing_time", "ingestion_time"])
def test_coerce_estimator_reads_processing_time_names_as_walltime(name):
    estimator = coerce_estimator("ReadFromKafka", name)
    assert isinstance(estimator, WalltimeWatermarkEstimator)
    assert estimator.delay == 0


@pytest.mark.parametrize("value", ["event_time", 5, None])
def test_coerce_estimator_names_the_owner_the_value_and_what_is_accepted(value):
    with pytest.raises(TypeError) as raised:
        coerce_estimator("ReadFromKafka", value)
    message = str(raised.value)
    assert message.startswith("ReadFromKafka: the watermark estimator must be a WatermarkEstimator instance")
    assert "'processing_time', 'ingestion_time'" in message
    assert message.endswith(f"got {value!r}")


def test_coerce_estimator_spots_a_class_passed_for_an_instance():
    with pytest.raises(TypeError, match=r"pass an instance: MonotonicWatermarkEstimator\(\.\.\.\), not the class"):
        coerce_estimator("ReadFromKafka", MonotonicWatermarkEstimator)


def test_the_documented_examples_run():
    assert doctest.testmod(watermarks).failed == 0


def test_importing_the_estimators_does_not_import_pyspark():
    script = textwrap.dedent(
        """
        import sys

        class BlockPyspark:
            def find_spec(self, name, path=None, target=None):
                if name == "pyspark" or name.startswith("pyspark."):
                    raise ImportError("imported " + name)
                return None

        sys.meta_path.insert(0, BlockPyspark())
        import sparkbeam.io.watermarks
        import sparkbeam.runners.core.sources.source_watermarks
        assert "pyspark" not in sys.modules
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
