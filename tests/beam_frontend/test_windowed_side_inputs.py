"""A Beam ParDo reading a side input windowed like its main input, on the engine (no Spark).

The shape of Nexmark's query 7: a combine per fixed window read back as a singleton by a
ParDo over the same windows. Each main-input window must find its side-input values by
window, not by a pass over every window's values (which grows as the square of the
windows: 4 times the import swap's time at 10,000 windows).
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window as beam_window

import sparkbeam
from tests.beam_frontend.engine import emitted_values, run_in_engine
from tests.beam_frontend.pairs import sparkbeam_flags

WINDOWS = 300


def bids() -> list[tuple[int, int]]:
    """(window index, price): three bids a window, the highest in the middle."""
    return [(w, price) for w in range(WINDOWS) for price in (w % 7, 100 + w, w % 5)]


class SelectMax(beam.DoFn):
    def process(self, element: tuple[int, int], highest: int) -> Any:
        if element[1] == highest:
            yield element


def highest_bids(pipeline: Any) -> Any:
    windowed = (
        pipeline
        | beam.Create(bids())
        | beam.Map(lambda bid: beam_window.TimestampedValue(bid, bid[0] * 10 + 1))
        | beam.WindowInto(beam_window.FixedWindows(10))
    )
    highest = windowed | beam.Map(lambda bid: bid[1]) | beam.CombineGlobally(max).without_defaults()
    return windowed | "Select" >> beam.ParDo(SelectMax(), beam.pvalue.AsSingleton(highest))


@pytest.fixture
def window_comparisons(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the comparisons of Beam's interval windows (a pass over a side input's
    values compares each value's windows with the window looked up)."""
    count = [0]
    compare = beam_window.IntervalWindow.__eq__

    def counted(self: Any, other: Any) -> Any:
        count[0] += 1
        return compare(self, other)

    monkeypatch.setattr(beam_window.IntervalWindow, "__eq__", counted)
    return count


def test_a_windowed_side_input_is_found_by_window(window_comparisons: list[int]) -> None:
    pipeline = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions(sparkbeam_flags()))
    output = sparkbeam.capture(highest_bids(pipeline))
    plan, loop = run_in_engine(pipeline)

    assert sorted(emitted_values(plan, loop, output)) == [(w, 100 + w) for w in range(WINDOWS)]
    # A pass over every window's values per window was WINDOWS x WINDOWS comparisons (90,000
    # here); found by window, a few per window.
    assert window_comparisons[0] < 5 * WINDOWS


def test_side_input_views_by_window_are_beams() -> None:
    """Each of Beam's views over a side input windowed otherwise than its main input (the
    window mapping), with windows that have no side-input values, as Beam's runner gives them."""
    from tests.beam_frontend.pairs import assert_runners_agree

    class Views(beam.DoFn):
        def process(self, element: int, single: Any, listed: Any, iterated: Any, mapped: Any, multi: Any) -> Any:
            # iterated twice: a view's iterable can be read again; a multimap is read by key
            yield (element, single, sorted(listed), sorted(iterated), sorted(iterated), sorted(mapped.items()),
                   sorted(multi[0]), sorted(multi[1]))

    def build(ns: Any, pipeline: Any) -> Any:
        def stamped(label: str, values: list[int]) -> Any:
            return (
                pipeline
                | f"{label}Create" >> beam.Create(values)
                | f"{label}Stamp" >> beam.Map(lambda x: beam_window.TimestampedValue(x, x))
            )

        side = stamped("Side", [1, 2, 3, 11, 12, 31]) | "SideWindows" >> beam.WindowInto(beam_window.FixedWindows(10))
        main = stamped("Main", [5, 15, 25, 35, 45]) | "MainWindows" >> beam.WindowInto(beam_window.SlidingWindows(20, 10))
        count = side | beam.combiners.Count.Globally().without_defaults()
        pairs = side | "Pairs" >> beam.Map(lambda x: (x % 2, x))
        return main | beam.ParDo(
            Views(),
            beam.pvalue.AsSingleton(count, default_value=0),
            beam.pvalue.AsList(side),
            beam.pvalue.AsIter(side),
            beam.pvalue.AsDict(side | "Keyed" >> beam.Map(lambda x: (x, -x))),
            beam.pvalue.AsMultiMap(pairs),
        )

    assert_runners_agree(build)
