"""Beam's batched DoFns (``process_batch``, ``@yields_batches``) and the DataFrame API built
on them, on Beam's runner and on sparkbeam's: same output.

No ``from __future__ import annotations`` here: Beam reads ``process_batch``'s batch types
off its annotations, which must be types, not strings.
"""

from collections.abc import Iterator

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.dataframe.convert import to_dataframe, to_pcollection

from tests.beam_frontend.pairs import assert_runners_agree

pytestmark = pytest.mark.spark


def test_a_dataframe_groupby_sum_equals_beams(spark):
    def build(ns, p):
        rows = p | beam.Create([beam.Row(team="red", score=3), beam.Row(team="blue", score=5), beam.Row(team="red", score=4)])
        totals = to_pcollection(to_dataframe(rows).groupby("team").sum(), include_indexes=True)
        return totals | beam.Map(lambda row: (row.team, int(row.score)))

    assert_runners_agree(build)


class Doubled(beam.DoFn):
    """Takes numpy batches only, yields batches."""

    def process_batch(self, batch: np.ndarray) -> Iterator[np.ndarray]:
        yield batch * 2

    def infer_output_type(self, input_element_type):
        return input_element_type


def test_a_process_batch_dofn_gets_batches_of_equal_windows_and_yields_elements_downstream(spark):
    def build(ns, p):
        return (
            p
            | beam.Create([(1, 1), (2, 2), (3, 12), (4, 13)])
            | beam.MapTuple(lambda value, at: beam.window.TimestampedValue(value, at)).with_output_types(np.int64)
            | beam.WindowInto(beam.window.FixedWindows(10))
            | beam.ParDo(Doubled())
            | beam.Map(int)
        )

    assert_runners_agree(build)
