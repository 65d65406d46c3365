"""Keyed state in hash buckets (``runners/core/state/keyed_buckets.py``): a step reads only the
buckets whose keys receive elements or whose header says a timer is due, and computes what
a step over every key computes."""

from __future__ import annotations

import pickle
import random

import pytest

from sparkbeam.combine import CombineFn
from sparkbeam.runners.core.grouping.grouping import build_grouping_engine
from sparkbeam.runners.core.grouping.grouping_step import GroupingRun, group_partition
from sparkbeam.runners.core.grouping.records import (
    KeyedState,
    Pane,
    StateBucket,
    StateIndex,
    Summary,
)
from sparkbeam.runners.core.lowering.step_values import StepParams
from sparkbeam.runners.core.state import keyed_buckets
from sparkbeam.runners.core.state.keyed_buckets import MAX_KEYS, BucketedPartition
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import FixedWindows, IntervalWindow
from sparkbeam.windowing import Windowing

S = 1_000_000
DAY = IntervalWindow(0, 86400)


class Sum(CombineFn):
    def create_accumulator(self):
        return 0

    def add_input(self, accumulator, value):
        return accumulator + value

    def merge_accumulators(self, accumulators):
        return sum(accumulators)

    def extract_output(self, accumulator):
        return accumulator


def _engine():
    return build_grouping_engine(Windowing(FixedWindows(86400)), combine_fn=Sum())


def _params(step: int, old: int, new: int) -> StepParams:
    return StepParams(step=step, old_input_watermark=old, new_input_watermark=new, output_watermark=old, now=0, batch=False)


def _elements(keys, step):
    return [(key, WindowedValue(1, step * S, (DAY,))) for key in keys]


def _bucketed_step(records, params):
    """One step of a bucketed partition: its state records (buckets, then their index),
    panes and summary, and the partition."""
    partition = BucketedPartition(pickle.dumps, pickle.loads)
    partition.read(records)
    run = GroupingRun(_engine(), params)
    report = partition.run(params, run.run_keys)
    out = list(run.finish(report))
    panes = sorted(record.element.value for _, record in out if type(record) is Pane)
    (summary,) = [record.summary for _, record in out if type(record) is Summary]
    return [record for _, record in partition.records()], panes, summary, partition


def _buckets(records):
    return [record for record in records if type(record) is StateBucket]


def _whole_step(records, params):
    out = list(group_partition(_engine(), records, params))
    states = [(key, record) for key, record in out if type(record) is KeyedState]
    panes = sorted(record.element.value for _, record in out if type(record) is Pane)
    (summary,) = [record.summary for _, record in out if type(record) is Summary]
    return states, panes, summary


def test_a_step_reads_only_the_buckets_its_keys_fall_in_and_carries_the_others_as_they_came():
    keys = [f"user-{i}" for i in range(20_000)]
    state, _, summary, _ = _bucketed_step(_elements(keys, 1), _params(1, 0, 10 * S))
    buckets = _buckets(state)
    assert summary.state_keys == 20_000
    assert all(bucket.state_keys <= MAX_KEYS for bucket in buckets) and len(buckets) >= 20_000 // MAX_KEYS
    touched_keys = [*keys[:50], "new-1", "new-2"]
    again, _, summary, partition = _bucketed_step([(None, b) for b in state] + _elements(touched_keys, 2), _params(2, 10 * S, 20 * S))
    again = _buckets(again)
    assert summary.state_keys == 20_002 and summary.elements_in == 52
    assert partition.touched <= 52 and partition.keys_read <= 52 * MAX_KEYS
    # Of the keys read, only those with new elements run (nothing is due for the others).
    assert partition.keys_run == 52
    carried = {id(bucket) for bucket in buckets}
    assert sum(id(bucket) in carried for bucket in again) >= len(buckets) - 52


def test_bucketed_steps_compute_what_a_step_over_every_key_computes():
    rng = random.Random(7)
    keys = [f"k{i}" for i in range(3_000)]
    state: list = []
    whole: list = []
    for step in range(1, 6):
        chosen = rng.sample(keys, 400 if step > 1 else 3_000)
        new = _elements(chosen, step)
        # A last step whose watermark passes the day's end fires every key, from every bucket.
        params = _params(step, (step - 1) * 10 * S, step * 10 * S if step < 5 else 86400 * S)
        state, panes, summary, _ = _bucketed_step([(None, b) for b in state] + new, params)
        whole, whole_panes, whole_summary = _whole_step(whole + new, params)
        assert panes == whole_panes
        assert (summary.elements_in, summary.elements_out, summary.state_keys, summary.next_event_timer) == (
            whole_summary.elements_in,
            whole_summary.elements_out,
            whole_summary.state_keys,
            whole_summary.next_event_timer,
        )
        assert summary.earliest_hold == whole_summary.earliest_hold
    assert len(panes) == 3_000 and summary.state_keys == 0
    # The day's windows are gone: the empty buckets were merged back into one.
    buckets = _buckets(state)
    assert len(buckets) == 1 and buckets[0].depth == 0


def test_a_bucket_whose_timer_is_due_is_read_though_no_key_of_it_receives_elements():
    early = IntervalWindow(0, 10)
    records = [("a", WindowedValue(1, 1 * S, (early,))), *_elements([f"k{i}" for i in range(500)], 1)]
    state, _, _, _ = _bucketed_step(records, _params(1, 0, 5 * S))
    (holding,) = [bucket for bucket in _buckets(state) if bucket.next_event_timer == 10 * S]
    _, panes, summary, partition = _bucketed_step([(None, b) for b in state], _params(2, 5 * S, 10 * S))
    assert panes == [("a", 1)] and partition.touched == 1 and summary.state_keys == 500
    assert partition.keys_run == 1  # the key whose window ended, not its bucket's others
    assert holding.state_keys >= 1


def test_buckets_written_by_a_process_that_hashes_otherwise_have_every_key_placed_again(monkeypatch):
    buckets, _, _, _ = _bucketed_step(_elements([f"k{i}" for i in range(1_000)], 1), _params(1, 0, 10 * S))
    monkeypatch.setattr(keyed_buckets, "_SALT", 12345)  # another seed, as another run's workers might have
    again, _, summary, partition = _bucketed_step([(None, b) for b in buckets] + _elements(["k1"], 2), _params(2, 10 * S, 20 * S))
    assert summary.state_keys == 1_000 and partition.keys_read == 1_000
    assert all(bucket.probe == keyed_buckets.hash_probe() for bucket in _buckets(again))


def test_state_restored_per_key_goes_into_buckets():
    states, _, _ = _whole_step(_elements([f"k{i}" for i in range(300)], 1), _params(1, 0, 10 * S))
    state, _, summary, _ = _bucketed_step(states, _params(2, 10 * S, 20 * S))
    assert summary.state_keys == 300 and sum(bucket.state_keys for bucket in _buckets(state)) == 300
    # Buckets, then their index.
    assert [type(record) for record in state] == [StateBucket] * (len(state) - 1) + [StateIndex]


@pytest.mark.parametrize("field", ["depth", "payload", "state_keys"])
def test_a_bucket_pickles_as_its_class_and_fields_without_field_names(field):
    bucket = StateBucket(3, 5, 7, 10, "k", "w", 11, None, 2, 2, b"xyz")
    data = pickle.dumps(bucket)
    assert pickle.loads(data) == bucket
    assert field.encode() not in data


def test_a_stateful_dofn_in_buckets_runs_only_the_keys_with_elements_or_a_timer_due():
    import sparkbeam as beam
    from sparkbeam.options.pipeline_options import PipelineOptions
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.runners.core.state.stateful_step import StatefulRun
    from tests.core.test_user_state import CollectUntilEnd

    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    _ = p | beam.Create([("a", 1)]) | beam.WindowInto(FixedWindows(10)) | "Stateful" >> beam.ParDo(CollectUntilEnd())
    (stage,) = [stage for stage in plan_stages(lower(p)).stages if stage.grouping is not None]
    op = stage.grouping

    def step(records, params):
        partition = BucketedPartition(pickle.dumps, pickle.loads)
        partition.read(records)
        run = StatefulRun(op, params)
        with run.bundle():
            report = partition.run(params, run.run_keys)
        out = list(run.finish(report))
        (summary,) = [record.summary for _, record in out if type(record) is Summary]
        outputs = sorted(record.value for _, record in out if type(record) is WindowedValue)
        return [record for _, record in partition.records()], outputs, summary, partition

    early, late = IntervalWindow(0, 10), IntervalWindow(50, 60)
    records = [("a", WindowedValue(("a", 1), 1 * S, (early,)))]
    records += [(f"k{i}", WindowedValue((f"k{i}", i), 55 * S, (late,))) for i in range(500)]
    buckets, outputs, summary, _ = step(records, _params(1, 0, 5 * S))
    assert outputs == [] and summary.state_keys == 501 and summary.earliest_hold == 10 * S - 1
    # The watermark passes a's timer only: one bucket read, one key run, its bag flushed.
    buckets, outputs, summary, partition = step([(None, b) for b in buckets], _params(2, 5 * S, 10 * S))
    assert outputs == [("a", [1])] and partition.touched == 1 and partition.keys_run == 1
    assert summary.state_keys == 500 and summary.earliest_hold == 60 * S - 1
