"""Failures reach the user as their own exceptions, naming the transform and the line."""

from __future__ import annotations

import threading

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.testing.util import BeamAssertException, assert_that, equal_to

pytestmark = pytest.mark.spark


class Boom(Exception):
    pass


def explode(x):
    if x == 3:
        raise Boom(f"cannot handle {x}")
    return x


def test_exception_in_user_code_is_the_users_exception_with_label_and_line(spark):
    p = beam.Pipeline()
    p | beam.Create([1, 2, 3]) | "Explode" >> beam.Map(explode)
    with pytest.raises(Boom, match="cannot handle 3") as error:
        p.run()
    notes = " ".join(getattr(error.value, "__notes__", []))
    assert "in transform 'Explode'" in notes
    assert "test_errors.py:" in notes
    assert "while processing 3" in notes


def test_exception_in_a_combine_fn_names_the_combine(spark):
    def bad_sum(values):
        raise ZeroDivisionError("no sums today")

    p = beam.Pipeline()
    p | beam.Create([("a", 1)]) | "Total" >> beam.CombinePerKey(bad_sum)
    with pytest.raises(ZeroDivisionError) as error:
        p.run()
    assert "in transform 'Total'" in " ".join(error.value.__notes__)


def test_group_by_key_on_non_pairs_names_the_transform_and_element(spark):
    p = beam.Pipeline()
    # A lambda's output type is unknown (Any), so only the run can tell; Create([1, 2])
    # directly into a GroupByKey fails at construction, as in Beam (tests/sdk/test_typehints.py).
    p | beam.Create([1, 2]) | beam.Map(lambda x: x) | "Group" >> beam.GroupByKey()
    with pytest.raises(TransformError, match=r"'Group'.*groups \(key, value\) pairs, but got [12]"):
        p.run()


def test_unpicklable_dofn_fails_before_spark_runs_anything(spark):
    class Holder(beam.DoFn):
        def __init__(self):
            self.lock = threading.Lock()

        def process(self, element):
            yield element

    p = beam.Pipeline()
    p | beam.Create([1]) | "Hold" >> beam.ParDo(Holder())
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(TypeError, match=r"DoFn of 'Hold'.*cannot be pickled.*DoFn\.setup"):
        p.run()
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before


def test_failed_assert_that_raises_beam_assert_exception(spark):
    with pytest.raises(BeamAssertException, match=r"unexpected elements \[3\]"), beam.Pipeline() as p:
        assert_that(p | beam.Create([1, 2, 3]), equal_to([1, 2]))


def test_undeclared_tag_is_an_error_naming_it(spark):
    p = beam.Pipeline()
    p | beam.Create([1]) | "Tagger" >> beam.FlatMap(lambda x: [beam.pvalue.TaggedOutput("side", x)])
    with pytest.raises(Exception, match="output to tag 'side', which was not declared"):
        p.run()


def test_a_captured_pcollection_that_feeds_a_later_stage_runs_its_dofns_once(spark, tmp_path):
    log = tmp_path / "calls.txt"

    def record(x, path=str(log)):
        with open(path, "a") as handle:  # executors are processes: count calls through a file
            handle.write(f"{x}\n")
        return ("k", x)

    p = beam.Pipeline()
    keyed = beam.capture(p | beam.Create(range(20)) | "Record" >> beam.Map(record))
    keyed | beam.CombinePerKey(sum)
    p.run()
    assert sorted(int(line) for line in log.read_text().split()) == list(range(20))
