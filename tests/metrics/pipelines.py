"""Pipelines that update metrics, written once for apache_beam and for sparkbeam, and
Beam's query results reduced to comparable rows."""

from __future__ import annotations

from typing import Any


def make_fns(beam: Any, metrics_module: Any) -> dict[str, Any]:
    """A DoFn and a CombineFn built on ``beam`` (apache_beam or sparkbeam) that update every
    kind of metric, deterministically (gauges are set to one value)."""
    Metrics = metrics_module.Metrics

    class ParseWords(beam.DoFn):
        def __init__(self) -> None:
            self.lines = Metrics.counter(self.__class__, "lines")
            self.empty = Metrics.counter(self.__class__, "empty_lines")
            self.lengths = Metrics.distribution("wordcount", "word_lengths")
            self.widest = Metrics.gauge("wordcount", "constant_gauge")
            self.firsts = Metrics.string_set("wordcount", "first_letters")

        def process(self, line: str) -> Any:
            self.lines.inc()
            self.widest.set(7)
            if not line.strip():
                self.empty.inc()
            for word in line.split():
                self.lengths.update(len(word))
                self.firsts.add(word[0])
                yield (word, 1)

    class CountingSum(beam.CombineFn):
        def create_accumulator(self) -> int:
            return 0

        def add_input(self, accumulator: int, value: int) -> int:
            Metrics.counter("combine", "added").inc()
            return accumulator + value

        def merge_accumulators(self, accumulators: Any) -> int:
            return sum(accumulators)

        def extract_output(self, accumulator: int) -> int:
            Metrics.counter("combine", "extracted").inc()
            Metrics.distribution("combine", "totals").update(accumulator)
            return accumulator

    class Words(beam.PTransform):
        def expand(self, lines: Any) -> Any:
            return lines | "Parse" >> beam.ParDo(ParseWords())

    def value_of(pair: Any) -> Any:
        # A metric in a Map's function (the Beam front end runs plain Maps on the engine's
        # own DoFnRunner, not Beam's).
        Metrics.counter("map", "values").inc()
        return pair[1]

    return {"ParseWords": ParseWords, "CountingSum": CountingSum, "Words": Words, "value_of": value_of}


LINES = ["a bb ccc", "", "bb a", "dddd ccc a", "  ", "eeeee"]


def build_batch(beam: Any, metrics_module: Any, p: Any) -> Any:
    fns = make_fns(beam, metrics_module)
    pairs = p | "Lines" >> beam.Create(LINES) | "Words" >> fns["Words"]()
    counts = pairs | "Count" >> beam.CombinePerKey(fns["CountingSum"]())
    total = pairs | "Values" >> beam.Map(fns["value_of"]) | "Total" >> beam.CombineGlobally(fns["CountingSum"]())
    return counts, total


def rows(query: dict[str, list]) -> dict[tuple, tuple]:
    """{(kind, step, namespace, name): (committed, attempted)} with plain values."""

    def plain(kind: str, value: Any) -> Any:
        if value is None:
            return None
        if kind == "distributions":
            return (value.sum, value.count, value.min, value.max)
        if kind == "gauges":
            return value.value
        if kind == "string_sets":
            return frozenset(value)
        return value

    return {
        (kind, result.key.step, result.key.metric.namespace, result.key.metric.name): (
            plain(kind, result.committed),
            plain(kind, result.attempted),
        )
        for kind, results in query.items()
        for result in results
    }
