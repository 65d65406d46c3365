"""What a streaming step on Spark costs, shown by counting and identity rather than timing.

- keyed state is carried between steps as ``StateBucket`` records (hash buckets whose
  keys are pickled together, read only when touched), not one record per key
  (``runners/core/state/keyed_buckets.py``, ``runners/spark/state_chunks.py``);
- a step whose watermark moves without reaching any of a grouping's timers, with no new
  elements, runs no Spark job: the state RDD is carried as it is;
- a TestStream's elements go to Spark as plain tuples (pickled in C) and come back as
  WindowedValues.
"""

from __future__ import annotations

import os
import pickle

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.grouping.records import (
    KeyedState,
    StateBucket,
    StateChunk,
    StateIndex,
    Summary,
)
from sparkbeam.runners.core.grouping.window_state import KeyState, WindowState
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams, nothing_due
from sparkbeam.runners.spark import state_chunks
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.window import FixedWindows, IntervalWindow, TimestampedValue

S = 1_000_000


def _keyed(count: int) -> list[tuple[str, KeyedState]]:
    window = IntervalWindow(Timestamp.from_micros(0), Timestamp.from_micros(60 * S))
    return [(f"k{i}", KeyedState(KeyState({window: WindowState(contents=(i, i), pending=1, hold=60 * S - 1)}))) for i in range(count)]


def test_state_goes_into_chunks_of_at_most_chunk_records_keys_and_comes_back_in_order(monkeypatch):
    monkeypatch.setattr(state_chunks, "CHUNK_RECORDS", 3)
    summary = (None, Summary(StageSummary(elements_in=7)))
    records = [*_keyed(7), summary]
    packed = list(state_chunks.pack_state(records))
    assert [type(record) for _, record in packed] == [StateChunk, StateChunk, StateChunk, Summary]
    # What Spark moves between the steps' functions: each chunk is one bytes field.
    assert all(type(record.payload) is bytes for _, record in packed[:3])
    back = list(state_chunks.unpack_state(pickle.loads(pickle.dumps(packed))))
    assert [key for key, _ in back[:7]] == [f"k{i}" for i in range(7)]
    assert [state.state.windows for _, state in back[:7]] == [state.state.windows for _, state in records[:7]]
    assert back[7] == summary


def test_windows_shared_between_keys_stay_shared_within_a_chunk():
    (_, first), (_, second) = list(state_chunks.unpack_state(state_chunks.pack_state(_keyed(2))))
    (window_a,), (window_b,) = first.state.windows, second.state.windows
    assert window_a is window_b


def test_state_saved_per_key_by_earlier_versions_is_read_as_it_is():
    records = _keyed(2)
    assert list(state_chunks.unpack_state(records)) == records


def _params(old: int, new: int, now: int = 0) -> StepParams:
    return StepParams(step=1, old_input_watermark=old, new_input_watermark=new, output_watermark=old, now=now, batch=False)


def test_a_watermark_move_short_of_every_timer_is_a_step_with_nothing_due():
    state = StageSummary(state_keys=1, next_event_timer=60 * S)
    assert nothing_due(state, _params(0, 59 * S), has_state=True, side_inputs=False)
    assert not nothing_due(state, _params(0, 60 * S), has_state=True, side_inputs=False)
    # A stage reading side inputs runs whenever its watermark moves (a side window may be ready).
    assert not nothing_due(state, _params(0, 59 * S), has_state=True, side_inputs=True)
    # A processing-time timer that is due runs the step, whatever the watermark does.
    due = StageSummary(state_keys=1, next_event_timer=60 * S, next_processing_timer=5)
    assert not nothing_due(due, _params(0, 0, now=5), has_state=True, side_inputs=False)
    assert nothing_due(due, _params(0, 0, now=4), has_state=True, side_inputs=False)
    # No state at all, or state with no key: nothing can fire.
    assert nothing_due(None, _params(0, 59 * S), has_state=False, side_inputs=False)
    assert nothing_due(StageSummary(), _params(0, 59 * S), has_state=True, side_inputs=False)


@pytest.mark.spark
def test_a_streaming_grouping_keeps_bucketed_state_skips_steps_with_nothing_due_and_restores(spark, tmp_path, monkeypatch):
    from sparkbeam.runners.core.loop.clock import ManualClock
    from sparkbeam.runners.core.loop.steps import StepLoop
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.runners.spark.backend import SparkBackend

    stream = (
        TestStream()
        .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("b", 2), 2), TimestampedValue(("a", 3), 61)])
        .advance_watermark_to(20)  # inside [0, 60): nothing due
        .advance_watermark_to(40)  # still nothing due
        .advance_watermark_to(70)  # passes 60 s: the first window fires
        .advance_watermark_to_infinity()
    )
    p = beam.Pipeline()
    sums = p | stream | beam.WindowInto(FixedWindows(60)) | beam.CombinePerKey(sum)
    beam.capture(sums)
    plan = plan_stages(lower(p))
    (captured,) = plan.lowered.captured
    (grouping,) = [stage for stage in plan.stages if stage.grouping is not None]

    shipped: list[list] = []
    original_parallelize = spark.sparkContext.parallelize

    def parallelize(data, slices=None):
        shipped.append(list(data))
        return original_parallelize(data, slices)

    monkeypatch.setattr(spark.sparkContext, "parallelize", parallelize)
    backend = SparkBackend(spark)
    loop = StepLoop(plan, backend, ManualClock(), batch=False)
    loop.run_step()  # the elements
    (elements,) = shipped
    assert len(elements) == 3 and all(type(fields) is tuple for fields in elements)
    state = backend.states[grouping.id]
    # No pane fired: the next step reads the step's cached records as they are (no copy
    # keeping only the state), their summaries skipped (keyed_stages.state_of).
    assert state is backend.state_results[grouping.id]
    kinds = [type(record) for _, record in state.collect()]
    # Per partition that received a key: its bucket, then the index of its timers and holds.
    buckets = kinds.count(StateBucket)
    assert kinds.count(StateIndex) == buckets and 1 <= buckets <= backend.num_partitions
    assert kinds.count(Summary) == backend.num_partitions and len(kinds) == 2 * buckets + backend.num_partitions

    for _ in range(2):  # the watermark moves to 20 s, then 40 s: no job, the same state RDD
        loop.run_step()
        assert backend.states[grouping.id] is state

    sealer = Sealer(os.urandom(32), scope="test")
    saved = backend.save_state(str(tmp_path), sealer, loop.step)
    chains = backend.chains_after(loop.step, saved)  # a base: the stage's first checkpoint
    snapshot = {"loop": loop.snapshot(), "backend": backend.snapshot()}
    backend.close()
    resumed = SparkBackend(spark)
    again = StepLoop(plan, resumed, ManualClock(), batch=False)
    again.restore(snapshot["loop"])
    resumed.restore(snapshot["backend"], {}, chains, lambda _, name: str(tmp_path / name), sealer)
    again.run()
    resumed.close()
    fired = sorted((e.value, e.timestamp.micros, e.step) for e in again.history.emitted_rows(captured))
    assert fired == [(("a", 1), 60 * S - 1, 3), (("a", 3), 120 * S - 1, 4), (("b", 2), 60 * S - 1, 3)]
