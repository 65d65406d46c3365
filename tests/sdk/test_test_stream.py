"""TestStream: Beam's API, and bad scripts rejected at construction naming the value."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.testing.test_stream import (
    ElementEvent,
    ProcessingTimeEvent,
    TestStream,
    WatermarkEvent,
)
from sparkbeam.transforms.window import MAX_TIMESTAMP, TimestampedValue


def test_script_records_events_in_order_and_stamps_plain_values_at_the_watermark():
    stream = TestStream().advance_watermark_to(5).add_elements(["a", TimestampedValue("b", 7)]).advance_processing_time(3)
    kinds = [type(event) for event in stream.events]
    assert kinds == [WatermarkEvent, ElementEvent, ProcessingTimeEvent]
    assert [tv.timestamp for tv in stream.events[1].timestamped_values] == [5, 7]


def test_watermark_must_move_forward():
    with pytest.raises(ValueError, match=r"watermark must move forward.*advance_watermark_to\(Timestamp\(5\)\) follows Timestamp\(10\)"):
        TestStream().advance_watermark_to(10).advance_watermark_to(5)


def test_element_timestamp_must_be_in_range():
    with pytest.raises(ValueError, match=r"element 'late' has timestamp Timestamp\(9223372036854\.775000\)"):
        TestStream().add_elements([TimestampedValue("late", MAX_TIMESTAMP)])


def test_processing_time_must_advance():
    with pytest.raises(ValueError, match="positive duration"):
        TestStream().advance_processing_time(0)


def test_tagged_outputs_are_separate_pcollections_with_their_own_watermarks():
    stream = (
        TestStream()
        .add_elements([TimestampedValue(1, 1)], tag="left")
        .add_elements([TimestampedValue(2, 2)], tag="right")
        .advance_watermark_to(10, tag="left")
        .advance_watermark_to_infinity(tag="left")
        .advance_watermark_to_infinity(tag="right")
    )
    p = beam.Pipeline()
    outputs = p | stream
    left = beam.capture(outputs["left"])
    right = beam.capture(outputs["right"])
    result = run_in_memory(p)
    assert result.emissions(left).values() == [1]
    assert result.emissions(right).values() == [2]
    left_marks = [r.output_watermark for r in result.watermarks().for_stage("TestStream[left]")]
    right_marks = [r.output_watermark for r in result.watermarks().for_stage("TestStream[right]")]
    assert left_marks != right_marks


def test_a_dofn_output_timestamp_out_of_range_names_the_transform():
    p = beam.Pipeline()
    p | beam.Create([1]) | "Restamp" >> beam.Map(lambda x: TimestampedValue(x, MAX_TIMESTAMP))
    with pytest.raises(ValueError, match=r"'Restamp'.*outside \[MIN_TIMESTAMP, MAX_TIMESTAMP\)"):
        run_in_memory(p)
