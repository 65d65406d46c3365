"""What a stream keeps on the driver does not grow with its steps (Spark-backed; the bounded
timeline and emissions are tested without Spark in tests/core/test_history.py)."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window

pytestmark = pytest.mark.spark


def test_a_stream_leaves_no_accumulator_behind_whatever_its_steps(spark):
    from pyspark.accumulators import _accumulatorRegistry

    batches = 6
    stream = TestStream()
    for batch in range(batches):
        stream = stream.add_elements([beam.TimestampedValue(("k", batch), batch * 10 + 1)])
        stream = stream.advance_watermark_to(batch * 10 + 10)
    p = beam.Pipeline(options=PipelineOptions(streaming=True, state_partitions=2))
    doubled = p | "Source" >> stream | "Double" >> beam.Map(lambda kv: (kv[0], 2 * kv[1]))
    sums = beam.capture(doubled | beam.WindowInto(window.FixedWindows(10)) | "Sum" >> beam.CombinePerKey(sum))
    before = len(_accumulatorRegistry)
    result = p.run()
    assert sorted(result.emissions(sums).values()) == [("k", 2 * batch) for batch in range(batches)]
    # each step's counters were read (the source stage's elements in and out) ...
    source = result.watermarks().for_stage("Source")
    assert sum(r.elements_in for r in source) == sum(r.elements_out for r in source) == batches
    assert len(source) > batches
    # ... and then handed back: PySpark's registry is as it was
    assert len(_accumulatorRegistry) == before
