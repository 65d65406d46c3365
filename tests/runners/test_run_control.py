"""Beam's run control: ``run()`` that returns at once (``--no_block_on_run``), ``state``,
``wait_until_finish(duration)`` in milliseconds, and ``cancel()`` stopping a stream at a
step boundary with a checkpoint, from which a restart resumes."""

from __future__ import annotations

import time

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runner import PipelineResult, PipelineState
from sparkbeam.runners.spark.checkpoints import CheckpointStore
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def rate_pipeline(checkpoint_dir, **settings):
    p = beam.Pipeline(
        options=PipelineOptions(step_interval=0.2, state_partitions=2, checkpoint_dir=str(checkpoint_dir), **settings)
    )
    values = beam.capture(p | "Rate" >> beam.io.ReadFromRate(rows_per_second=20))
    return p, values


def wait_for_output(result, values, timeout=120.0):
    """Until the stream has emitted something and run a few steps more."""
    deadline = time.monotonic() + timeout
    first_output_step = None
    while time.monotonic() < deadline:
        assert result.state == PipelineState.RUNNING, result.state
        emitted = result.emissions(values)
        if emitted and first_output_step is None:
            first_output_step = max(e.step for e in emitted)
        records = result.watermarks().records
        if first_output_step is not None and max(r.step for r in records) >= first_output_step + 2:
            return
        time.sleep(0.1)
    pytest.fail(f"the stream emitted nothing in {timeout}s")


def test_a_stream_runs_in_the_background_until_cancelled_and_resumes_from_its_checkpoint(spark_session_kind, tmp_path):
    checkpoint_dir = tmp_path / "ck"
    p, values = rate_pipeline(checkpoint_dir, block_on_run=False, checkpoint_interval=1000, **spark_session_kind)
    started = time.monotonic()
    result = p.run()
    assert result.state == PipelineState.RUNNING
    assert time.monotonic() - started < 30  # returned without waiting for an unbounded stream

    waited = time.monotonic()
    assert result.wait_until_finish(duration=300) == PipelineState.RUNNING  # milliseconds, as Beam's
    assert 0.3 <= time.monotonic() - waited < 30

    wait_for_output(result, values)
    assert result.cancel() == PipelineState.CANCELLED
    assert result.state == PipelineState.CANCELLED
    assert result.wait_until_finish() == PipelineState.CANCELLED
    assert result.cancel() == PipelineState.CANCELLED  # a finished run stays as it ended

    steps_run = max(r.step for r in result.watermarks().records) + 1
    first_values = sorted(e.value for e in result.emissions(values))
    # The cancel wrote a checkpoint at the step where the stream stopped (its interval of
    # 1000 steps would have written none).
    newest = CheckpointStore(str(checkpoint_dir), []).newest()
    assert newest is not None and newest["step"] == steps_run

    # A restart resumes at that step: the values read before and after, without a gap or
    # a repeat (the rate source counts 0, 1, 2, ...).
    p, values = rate_pipeline(checkpoint_dir, max_steps=steps_run + 3, **spark_session_kind)
    resumed = p.run()
    assert resumed.state == PipelineState.DONE
    assert min(r.step for r in resumed.watermarks().records if r.step >= steps_run) == steps_run
    all_values = sorted(e.value for e in resumed.emissions(values))
    assert all_values[: len(first_values)] == first_values
    assert all_values == list(range(len(all_values)))


def test_a_with_block_waits_even_without_blocking_run(spark):
    stream = (
        TestStream()
        .add_elements([window.TimestampedValue(("k", 1), 1)])
        .advance_watermark_to(20)
        .add_elements([window.TimestampedValue(("k", 2), 25)])
        .advance_watermark_to_infinity()
    )
    with beam.Pipeline(options=PipelineOptions(streaming=True, block_on_run=False)) as p:
        sums = beam.capture(p | stream | beam.WindowInto(window.FixedWindows(10)) | beam.CombinePerKey(sum))
    result = p._result
    assert result.state == PipelineState.DONE
    assert sorted(e.value for e in result.emissions(sums)) == [("k", 1), ("k", 2)]


class Boom(Exception):
    pass


def explode(x):
    raise Boom(f"cannot handle {x}")


def test_a_background_run_that_fails_raises_from_wait_until_finish(spark):
    p = beam.Pipeline(options=PipelineOptions(block_on_run=False))
    _ = p | beam.Create([1]) | "Explode" >> beam.Map(explode)
    result = p.run()
    with pytest.raises(Boom, match="cannot handle 1") as failure:
        result.wait_until_finish()
    assert "in transform 'Explode'" in " ".join(failure.value.__notes__)
    assert result.state == PipelineState.FAILED
    assert result.cancel() == PipelineState.FAILED


def test_a_blocking_run_is_over_when_run_returns(spark):
    p = beam.Pipeline()
    doubled = beam.capture(p | beam.Create([1, 2]) | beam.Map(lambda x: 2 * x))
    result = p.run()
    assert result.state == PipelineState.DONE
    assert result.seconds is not None
    assert result.wait_until_finish(duration=1) == PipelineState.DONE
    assert result.cancel() == PipelineState.DONE
    assert sorted(e.value for e in result.emissions(doubled)) == [2, 4]
    with pytest.raises(ValueError, match="wait_until_finish: duration is a number of milliseconds, got -5"):
        result.wait_until_finish(duration=-5)


def test_a_result_that_cannot_cancel_a_running_run_says_so():
    assert PipelineResult(PipelineState.DONE).cancel() == PipelineState.DONE
    with pytest.raises(NotImplementedError, match="PipelineResult cannot cancel a run in state RUNNING"):
        PipelineResult(PipelineState.RUNNING).cancel()
