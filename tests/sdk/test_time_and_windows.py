"""Timestamps, durations and window functions behave as Beam's."""

from __future__ import annotations

import pickle
import random

import pytest

from sparkbeam.transforms.window import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    BoundedWindow,
    Duration,
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    Timestamp,
    WindowFn,
)


def test_timestamps_are_microseconds_and_compare_with_seconds():
    assert Timestamp(1.5).micros == 1_500_000
    assert Timestamp(10) == 10
    assert Timestamp(10) < 10.5
    assert Timestamp(10) - Timestamp(4) == Duration(6)
    assert Timestamp(10) + Duration(micros=1) == Timestamp(micros=10_000_001)
    assert int(Timestamp(-1.5)) == -2  # rounds down, as Beam's
    assert Timestamp.of(0.1).micros == 100_000
    assert pickle.loads(pickle.dumps(Timestamp(3))) == Timestamp(3)
    assert MIN_TIMESTAMP < Timestamp(0) < MAX_TIMESTAMP


def test_rfc3339_round_trip_and_naive_datetimes_refused():
    ts = Timestamp.from_rfc3339("2026-11-01T09:00:00Z")
    assert ts.to_rfc3339() == "2026-11-01T09:00:00Z"
    assert Timestamp.from_rfc3339("2026-11-01T09:00:00.5Z").to_rfc3339() == "2026-11-01T09:00:00.500000Z"
    import datetime

    with pytest.raises(ValueError, match="no time zone"):
        Timestamp.from_utc_datetime(datetime.datetime(2026, 1, 1))


def test_rfc3339_text_is_exactly_beams():
    from apache_beam.utils.timestamp import Timestamp as BeamTimestamp

    rng = random.Random(3339)
    micros = [0, 1, -1, 999_999, 1_000_000, -1_000_000, 1_767_225_600_000_000, 1_767_225_600_100_000,
              -62_135_596_800_000_000, 253_402_300_799_999_999]
    micros += [rng.randrange(-62_135_596_800_000_000, 253_402_300_799_999_999) for _ in range(300)]
    micros += [rng.randrange(-62_135_596_800, 253_402_300_799) * 1_000_000 for _ in range(100)]  # whole seconds
    for value in micros:
        assert Timestamp.from_micros(value).to_rfc3339() == BeamTimestamp(micros=value).to_rfc3339(), value
        text = BeamTimestamp(micros=value).to_rfc3339()
        assert Timestamp.from_rfc3339(text).micros == value


def test_timestamps_durations_and_windows_print_as_beams():
    # Users format these into their output (Beam's top_wikipedia_sessions writes
    # str(window)), so the text must be Beam's to the character.
    from apache_beam.transforms.window import BoundedWindow as BeamBoundedWindow
    from apache_beam.transforms.window import IntervalWindow as BeamIntervalWindow
    from apache_beam.utils.timestamp import MAX_TIMESTAMP as BEAM_MAX
    from apache_beam.utils.timestamp import MIN_TIMESTAMP as BEAM_MIN
    from apache_beam.utils.timestamp import Duration as BeamDuration
    from apache_beam.utils.timestamp import Timestamp as BeamTimestamp

    for micros in [0, 1, -1, 1_500_000, -1_500_000, 3_600_002_000, 86_400_000_000, 1_447_686_663_921_000]:
        assert repr(Timestamp.from_micros(micros)) == repr(BeamTimestamp(micros=micros)), micros
        assert str(Timestamp.from_micros(micros)) == str(BeamTimestamp(micros=micros)), micros
        assert repr(Duration.from_micros(micros)) == repr(BeamDuration(micros=micros)), micros
        end = micros + 3_600_002_000
        ours, beams = IntervalWindow(Timestamp.from_micros(micros), Timestamp.from_micros(end)), BeamIntervalWindow(
            BeamTimestamp(micros=micros), BeamTimestamp(micros=end))
        assert (str(ours), repr(ours), str([ours])) == (str(beams), repr(beams), str([beams])), micros
    assert (repr(MIN_TIMESTAMP), repr(MAX_TIMESTAMP)) == (repr(BEAM_MIN), repr(BEAM_MAX))
    assert str(GlobalWindow()) == "GlobalWindow"

    class OwnWindow(IntervalWindow):
        pass

    class OwnBeamWindow(BeamIntervalWindow):
        pass

    assert str(OwnWindow(0, 60)) == str(OwnBeamWindow(0, 60)) == "[0.0, 60.0)"

    class Open(BoundedWindow):
        pass

    assert repr(Open(5)) == BeamBoundedWindow.__repr__(OwnBeamWindow(0, 5)) == "[?, 5.0)"


def assign(window_fn, t):
    return sorted(window_fn.assign(WindowFn.AssignContext(t)))


def test_fixed_windows_with_offset():
    assert assign(FixedWindows(10, 3), 12) == [IntervalWindow(3, 13)]
    assert assign(FixedWindows(10), -1) == [IntervalWindow(-10, 0)]


def test_sliding_windows_cover_each_timestamp_size_over_period_times():
    assert assign(SlidingWindows(30, 10), 25) == [IntervalWindow(0, 30), IntervalWindow(10, 40), IntervalWindow(20, 50)]


def test_sessions_merge_overlapping_but_not_touching_windows():
    merged = []

    class Context(WindowFn.MergeContext):
        def merge(self, to_be_merged, merge_result):
            merged.append((sorted(to_be_merged), merge_result))

    Sessions(10).merge(Context([IntervalWindow(0, 10), IntervalWindow(5, 15), IntervalWindow(15, 25)]))
    assert merged == [([IntervalWindow(0, 10), IntervalWindow(5, 15)], IntervalWindow(0, 15))]


def test_overlapping_window_rule_floor_is_the_previous_window_end():
    sliding = SlidingWindows(60, 20)
    assert sliding.overlap_output_floor(IntervalWindow(40, 100)) == Timestamp(80)
    assert SlidingWindows(20, 20).overlap_output_floor(IntervalWindow(40, 60)) is None
    assert FixedWindows(10).overlap_output_floor(IntervalWindow(0, 10)) is None


def test_global_window_hash_is_stable_across_processes():
    # Spark shuffles by hash in separate processes; an identity hash would scatter keys.
    assert hash(GlobalWindow()) == 0x9E3779B9
    assert hash(IntervalWindow(0, 10)) == hash(IntervalWindow(0, 10))
