"""Watermark plots: a clear message for what cannot be plotted, a panel per grouping stage for
what can. Runs in memory (``run_in_memory``), so no Spark."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.plotting import compare_watermarks, plot_watermarks
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def scores() -> TestStream:
    return (
        TestStream()
        .add_elements([window.TimestampedValue(("a", 1), 10), window.TimestampedValue(("b", 2), 20)])
        .advance_watermark_to(70)
        .add_elements([window.TimestampedValue(("a", 3), 80)])
        .advance_watermark_to(130)
        .add_elements([window.TimestampedValue(("a", 4), 30)])  # too late: dropped
        .advance_watermark_to_infinity()
    )


def two_grouping_stages():
    """Per-key sums per minute, then the sum of those per minute: two grouping stages."""
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    per_key = beam.capture(
        p
        | "Scores" >> scores()
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "PerKey" >> beam.CombinePerKey(sum)
    )
    overall = beam.capture(
        per_key | "Values" >> beam.Map(lambda kv: kv[1]) | "Overall" >> beam.CombineGlobally(sum).without_defaults()
    )
    return run_in_memory(p, streaming=True), per_key, overall


def pane_dots(ax) -> int:
    return sum(len(c.get_offsets()) for c in ax.collections if c.get_label().endswith(" pane"))


def test_plotting_a_batch_run_says_to_run_it_streaming():
    p = beam.Pipeline()
    totals = beam.capture(p | beam.Create([("a", 1), ("a", 2)]) | beam.CombinePerKey(sum))
    result = run_in_memory(p, streaming=False)
    with pytest.raises(ValueError, match=r"single step \(a batch run\).*run with --streaming or from a TestStream"):
        plot_watermarks(result, panes={"totals": totals})


def test_plotting_the_panes_of_an_uncaptured_pcollection_says_to_capture_it():
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    sums = p | "Scores" >> scores() | "Minutes" >> beam.WindowInto(window.FixedWindows(60)) | "Sums" >> beam.CombinePerKey(sum)
    result = run_in_memory(p, streaming=True)
    with pytest.raises(ValueError, match=r"cannot plot the panes of 'sums': .*was not captured: call sparkbeam\.capture\(pcoll\)"):
        plot_watermarks(result, panes={"sums": sums})


def test_plotting_an_unknown_stage_lists_the_stages():
    result, _, _ = two_grouping_stages()
    with pytest.raises(ValueError, match=r"no stage named \['Nope'\]; the stages are .*'PerKey'"):
        plot_watermarks(result, stages=["Nope"])


def test_stages_are_picked_by_name_or_prefix_in_the_order_given():
    result, _, _ = two_grouping_stages()
    overall = next(stage.name for stage in result.plan.stages if stage.name.startswith("Overall"))
    fig = plot_watermarks(result, stages=["Overall", "Scores", "PerKey"])
    assert [ax.get_title(loc="left") for ax in fig.axes] == [overall, "Scores", "PerKey"]


def test_plot_has_one_axes_per_grouping_stage_with_a_dot_per_pane():
    result, per_key, overall = two_grouping_stages()
    grouping = [stage.name for stage in result.plan.stages if stage.grouping is not None]
    assert len(grouping) == 2

    fig = plot_watermarks(result, panes={"per key": per_key, "overall": overall}, title="two stages")

    assert [ax.get_title(loc="left") for ax in fig.axes] == grouping
    assert [pane_dots(ax) for ax in fig.axes] == [len(result.emissions(per_key)), len(result.emissions(overall))]
    assert all(pane_dots(ax) > 0 for ax in fig.axes)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert {"input watermark", "output watermark", "ON_TIME pane", "data dropped"} <= set(labels)


def test_a_plot_of_a_trimmed_timeline_says_which_steps_it_no_longer_has():
    p = beam.Pipeline(options=PipelineOptions(streaming=True, timeline_retention_steps=3))
    per_key = beam.capture(
        p | "Scores" >> scores() | "Minutes" >> beam.WindowInto(window.FixedWindows(60)) | "PerKey" >> beam.CombinePerKey(sum)
    )
    result = run_in_memory(p, streaming=True)
    first = result.watermarks().first_step
    assert first > 0
    fig = plot_watermarks(result, panes={"per key": per_key})
    assert fig.axes[-1].get_xlabel() == f"processing time (step; steps before {first} no longer kept)"
    assert pane_dots(fig.axes[0]) == len(result.emissions(per_key))


def test_compare_puts_runs_side_by_side_on_one_event_time_axis():
    first, per_key, _ = two_grouping_stages()
    second, _, overall = two_grouping_stages()

    fig = compare_watermarks({"first": (first, {"per key": per_key}), "second": (second, [overall])})

    axes = fig.axes
    assert len(axes) == 4  # two stages x two runs
    assert [ax.get_title() for ax in axes[:2]] == ["first", "second"]
    assert len({ax.get_ylim() for ax in axes}) == 1
    assert [pane_dots(ax) for ax in axes] == [len(first.emissions(per_key)), 0, 0, len(second.emissions(overall))]
