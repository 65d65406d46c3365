"""What a stage's RDDs carry and what comes back to the driver, as functions Spark runs per
partition (``mapPartitions``) and the driver's sorting of a keyed stage's fetched records.

A keyed stage's step yields ``(where, record)`` pairs in one RDD: ``KeyedState`` (or its
pickled chunks) for the next step, the output elements tagged with their PCollection,
one ``Summary`` per partition and, for a stage with side inputs, ``Parked`` elements and
``ReleaseAt`` watermarks. The functions here pick each kind out of that RDD, so that the
backend (``backend.py``) runs one computation and reads it several ways.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import attrs
from pyspark.serializers import Serializer

from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.elements.gc_pause import gc_paused
from sparkbeam.runners.core.grouping.records import Parked, ReleaseAt, Summary
from sparkbeam.runners.core.lowering.step_values import StageSummary
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.spark.state_chunks import is_state
from sparkbeam.utils.timestamp import MAX_TIMESTAMP
from sparkbeam.utils.windowed_value import WindowedValue, new_windowed_value

__all__ = [
    "ElementsToTheDriver",
    "Handed",
    "as_plain_tuples",
    "materialise",
    "parked",
    "reports_and",
    "select",
    "select_tagged",
    "shippable",
    "sort_fetched",
    "stage_summaries",
    "strip_state",
    "summaries_and",
]

MAX = MAX_TIMESTAMP.micros


def shippable(stage: Stage) -> Stage:
    """The stage as executors need it: a source's content stays on the driver (a
    TestStream's script, Create's values), since each step ships only its own elements."""
    head = stage.head
    if head is None:
        return stage
    shipped = kind_of(head).for_executors(head)
    return stage if shipped is head else attrs.evolve(stage, head=shipped)


def strip_state(records: Any) -> Any:
    """A keyed stage's step's records with only its state kept (see ``Handed``)."""
    for key, record in records:
        if is_state(record):  # chunks pass as bytes: nothing is unpickled here
            yield key, record


def select(pcoll: int, records: Any) -> Any:
    for where, record in records:
        if where == pcoll and type(record) is WindowedValue:
            yield record


def select_tagged(pcoll: int, items: Any) -> Any:
    for tag, wv in items:
        if tag == pcoll:
            yield wv


def as_plain_tuples(elements: Any) -> Any:
    """Elements on their way to the driver as plain tuples: pickle writes a tuple in C, but
    a ``WindowedValue`` (a tuple subclass) through Python-level calls per element, about
    three times the cost. The driver rebuilds them (``SparkBackend.collect``)."""
    for wv in elements:
        yield tuple(wv)


class ElementsToTheDriver(Serializer):
    """How the elements collected from a stage (as ``as_plain_tuples`` sends them) travel:
    written by the workers with PySpark's serializer, read on the driver by the same, each
    made a ``WindowedValue`` again, with the cyclic GC paused while they arrive.

    Everything the driver collects lives on (captured, or a side input), so the GC's passes
    while it arrives free nothing; but each pass over the old generation rescans all of it,
    and the passes come more often the more arrives: 60,000 results cost about 0.3 s of
    them. Paused, the GC scans them once when it resumes.
    """

    def __init__(self, serializer: Serializer) -> None:
        self.serializer = serializer

    def dump_stream(self, iterator: Any, stream: Any) -> Any:
        return self.serializer.dump_stream(iterator, stream)

    def load_stream(self, stream: Any) -> Iterator[WindowedValue]:
        with gc_paused():
            yield from map(new_windowed_value, self.serializer.load_stream(stream))

    def __repr__(self) -> str:
        return f"ElementsToTheDriver({self.serializer!r})"


def parked(records: Any) -> Any:
    for key, record in records:
        if type(record) is Parked:
            yield key, record


def materialise(records: Any) -> Any:
    for _ in records:
        pass
    return iter(())


def reports_and(wanted: frozenset[int], records: Any) -> Any:
    """Summary and ReleaseAt per partition, and (pcoll, element) for the wanted outputs."""
    for where, record in records:
        kind = type(record)
        if kind is Summary or kind is ReleaseAt or (kind is WindowedValue and where in wanted):
            yield where, record


@attrs.frozen(slots=True)
class Handed:
    """How many records of a partition of a keyed stage's step are neither its state nor
    its summary (its outputs). With none in any partition, the next step reads the step's
    records as they are, its summary skipped (``BucketedPartition.read``), instead of a copy
    with only the state kept (``strip_state``): a pass of the whole state through Python less."""

    count: int


def summaries_and(wanted: frozenset[int], records: Any) -> Any:
    """Summary per partition, (pcoll, element) for the wanted outputs, and how many records
    are neither state nor summary (``Handed``)."""
    handed = 0
    for where, record in records:
        kind = type(record)
        if kind is Summary:
            yield where, record
            continue
        if kind is WindowedValue and where in wanted:
            yield where, record
        if not is_state(record):
            handed += 1
    yield None, Handed(handed)


def stage_summaries(stage_id: int, records: Any) -> Any:
    """(stage id, summary) for each partition's Summary record of a keyed stage's step, and
    (stage id, ``Handed``) for the records that are neither state nor summary."""
    handed = 0
    for _, record in records:
        if type(record) is Summary:
            yield stage_id, record.summary
        elif not is_state(record):
            handed += 1
    yield stage_id, Handed(handed)


def sort_fetched(fetched: list[Any], wanted: frozenset[int]) -> tuple[StageSummary, dict[int, list[WindowedValue]], dict[int, int]]:
    """The step's summary, the wanted outputs' elements and the release watermarks, from
    what a stage's job brought back to the driver."""
    parts = []
    collected: dict[int, list[WindowedValue]] = {pcoll: [] for pcoll in wanted}
    release: dict[int, int] = {}
    for where, record in fetched:
        kind = type(record)
        if kind is WindowedValue:
            collected[where].append(record)
        elif kind is Summary:
            parts.append(record.summary)
        elif kind is Handed:
            continue  # read by the keyed step (``keyed_stages.state_of``)
        else:
            for pcoll, watermark in record.watermarks:
                release[pcoll] = min(watermark, release.get(pcoll, MAX))
    return functools.reduce(StageSummary.merge, parts, StageSummary()), collected, release
