"""A stage whose output several stages read runs its DoFns once per step, not once per reader."""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions

pytestmark = pytest.mark.spark


def test_output_read_by_two_groupings_is_computed_once(spark):
    p = beam.Pipeline(options=PipelineOptions(state_partitions=2))
    keyed = p | "Create" >> beam.Create([("a", 1), ("b", 2), ("a", 3)]) | "Key" >> beam.Map(lambda kv: kv)
    sums = beam.capture(keyed | "Sum" >> beam.CombinePerKey(sum))
    counts = beam.capture(keyed | "Count" >> beam.combiners.Count.PerKey())
    result = p.run()
    assert sorted(result.emissions(sums).values()) == [("a", 4), ("b", 2)]
    assert sorted(result.emissions(counts).values()) == [("a", 2), ("b", 1)]
    (create,) = result.watermarks().for_stage("Create")
    assert create.elements_in == 3  # 6 if each grouping recomputed the stage


def test_an_output_only_collected_is_not_persisted_and_one_also_read_downstream_is(spark, monkeypatch):
    from pyspark import RDD

    persisted = []
    persist = RDD.persist

    def counting(self, *args, **kwargs):
        persisted.append(self.name())
        return persist(self, *args, **kwargs)

    monkeypatch.setattr(RDD, "persist", counting)
    p = beam.Pipeline(options=PipelineOptions(state_partitions=2))
    keyed = beam.capture(p | "Create" >> beam.Create([("a", 1), ("b", 2), ("a", 3)]) | "Key" >> beam.Map(lambda kv: kv))
    sums = beam.capture(keyed | "Sum" >> beam.CombinePerKey(sum))
    result = p.run()
    assert sorted(result.emissions(sums).values()) == [("a", 4), ("b", 2)]
    assert sorted(result.emissions(keyed).values()) == [("a", 1), ("a", 3), ("b", 2)]
    # The Create stage's output is collected and grouped: kept, so that its DoFns run once.
    # The grouping's is only collected: one job reads it, and nothing is stored.
    assert len(persisted) == 1
    (create,) = result.watermarks().for_stage("Create")
    (summed,) = result.watermarks().for_stage("Sum")
    assert (create.elements_in, summed.elements_out) == (3, 2)
