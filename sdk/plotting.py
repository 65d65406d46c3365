"""Watermark plots: every stage's input and output watermark per step, with the panes emitted.

In the style of *Streaming Systems*: processing time (the step) runs along the x axis and
event time up the y axis; each stage gets its own panel with its input watermark (dashed)
and output watermark (solid), and each pane a captured PCollection emitted is a dot at its
event timestamp and the step that emitted it, coloured by timing (EARLY, ON_TIME, LATE).
Where a hold keeps the output watermark below the input watermark the gap is shaded, the
stage's earliest hold is a dotted line, and steps that dropped data (late, for a closed
window, ...) are marked.

>>> fig = plot_watermarks(result, panes={"totals": totals})     # doctest: +SKIP
>>> fig.savefig("watermarks.png")                               # doctest: +SKIP

Two runs of a pipeline side by side, on the same axes limits::

    compare_watermarks({"END_OF_WINDOW": (eow_result, eow_panes),
                        "EARLIEST": (earliest_result, earliest_panes)})

matplotlib is an optional extra: ``pip install 'sparkbeam[plot]'``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.window import GlobalWindow

__all__ = ["TIMING_COLOURS", "compare_watermarks", "plot_watermarks"]

TIMING_COLOURS = {"EARLY": "#f2a541", "ON_TIME": "#2a9d8f", "LATE": "#e63946", "UNKNOWN": "#8d99ae"}
INPUT_COLOUR = "#1d3557"
OUTPUT_COLOUR = "#f4845f"
HOLD_COLOUR = "#6c757d"
DROP_COLOUR = "#b5179e"
# Panes of the global window carry its end, which would flatten every other time on the axis.
_END_OF_GLOBAL_WINDOW = GlobalWindow().max_timestamp().micros
# One marker shape per captured PCollection drawn in the same panel.
_PANE_MARKERS = ("o", "s", "^", "D", "v", "P")


def _seconds(micros: int | None) -> float:
    """Seconds, with the ends of time (and the global window's end) as infinities."""
    if micros is None or micros <= MIN_TIMESTAMP.micros:
        return -math.inf
    if micros >= _END_OF_GLOBAL_WINDOW:
        return math.inf
    return micros / 1_000_000


class _Run:
    """One result prepared for drawing: its timeline, the panes to draw, the stages to show."""

    def __init__(self, result: Any, panes: Mapping[str, Any] | Sequence[Any] | None, stages: Sequence[str] | None) -> None:
        self.timeline = result.watermarks()
        if self.timeline.steps < 2:
            msg = (
                "this run has a single step (a batch run), so its watermarks jump from -inf to "
                "+inf and there is nothing to plot; run with --streaming or from a TestStream "
                "to see watermarks move step by step"
            )
            raise ValueError(msg)
        self.emitted: dict[str, tuple[Any, str]] = {}
        for name, pcoll in _named_panes(panes).items():
            try:
                rows = result.emissions(pcoll)
                producer = result.plan.stage_of(result.plan.lowered.id_of(pcoll)).name
            except KeyError as error:
                msg = f"cannot plot the panes of {name!r}: {error.args[0]}"
                raise ValueError(msg) from None
            self.emitted[name] = (rows, producer)
        if stages is None:
            grouping = [s.name for s in result.plan.stages if s.grouping is not None]
            stages = grouping or list(self.timeline.stage_names)
        names = self.timeline.stage_names
        # As Timeline.for_stage: a stage's name, or a prefix that names one stage.
        resolved = {s: [n for n in names if n == s] or [n for n in names if n.startswith(s)] for s in stages}
        unknown = [s for s, found in resolved.items() if len(found) != 1]
        if unknown:
            msg = f"no stage named {unknown}; the stages are {names}"
            raise ValueError(msg)
        self.stages = [resolved[s][0] for s in stages]

    def step_axis_label(self) -> str:
        """The x axis's label; it says so when a long stream kept only its recent steps."""
        if self.timeline.trimmed:
            return f"processing time (step; steps before {self.timeline.first_step} no longer kept)"
        return "processing time (step)"

    def finite_times(self) -> list[float]:
        """Every finite event time drawn: watermarks and holds of the shown stages, pane timestamps."""
        times = [
            value
            for stage in self.stages
            for r in self.timeline.for_stage(stage)
            for value in (_seconds(r.input_watermark), _seconds(r.output_watermark), _seconds(r.earliest_hold))
            if math.isfinite(value)
        ]
        times += [
            _seconds(e.timestamp.micros)
            for rows, producer in self.emitted.values()
            if producer in self.stages
            for e in rows
            if math.isfinite(_seconds(e.timestamp.micros))
        ]
        return times


def _limits(runs: Sequence[_Run], ylim: tuple[float, float] | None) -> tuple[float, float]:
    if ylim is not None:
        return (float(ylim[0]), float(ylim[1]))
    finite = [t for run in runs for t in run.finite_times()]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    margin = max(1.0, (high - low) * 0.08)
    return (low - margin, high + margin)


def _draw_stage(
    ax: Any, run: _Run, stage: str, limits: tuple[float, float], show_holds: bool, label_panes: bool
) -> None:
    """One panel: a stage's watermarks (±inf drawn at the panel's edges), holds, drops and panes."""
    bottom, top = limits
    records = run.timeline.for_stage(stage)
    # Each value holds until the next step: one more point draws the last step's too.
    steps = [r.step for r in records] + [records[-1].step + 1]
    lasting = [*records, records[-1]]

    def clipped(values: list[float]) -> list[float]:
        return [min(max(v, bottom), top) for v in values]

    inputs = clipped([_seconds(r.input_watermark) for r in lasting])
    outputs = clipped([_seconds(r.output_watermark) for r in lasting])
    ax.step(steps, outputs, "-", where="post", color=OUTPUT_COLOUR, linewidth=2.4, label="output watermark", zorder=2)
    ax.step(steps, inputs, "--", where="post", color=INPUT_COLOUR, linewidth=1.3, label="input watermark", zorder=2.5)
    if show_holds:
        held = [o < i for i, o in zip(inputs, outputs)]
        if any(held):
            ax.fill_between(
                steps, outputs, inputs, where=held, step="post", color=HOLD_COLOUR, alpha=0.18,
                linewidth=0, label="held back by a hold",
            )
        holds = [_seconds(r.earliest_hold) if r.earliest_hold is not None else math.nan for r in lasting]
        if any(math.isfinite(h) for h in holds):
            ax.step(steps, holds, ":", where="post", color=HOLD_COLOUR, linewidth=1.4, label="earliest hold", zorder=1.5)
    dropped = [(r.step, r.dropped) for r in records if r.dropped]
    if dropped:
        # Dropped elements are only counted, so they are marked along the panel's bottom edge.
        xs = [step for step, _ in dropped]
        ax.scatter(
            xs, [0.04] * len(xs), transform=ax.get_xaxis_transform(), marker="X", s=70,
            color=DROP_COLOUR, zorder=4, label="data dropped", clip_on=False,
        )
        for step, count in dropped:
            ax.annotate(
                f"{count} dropped", (step, 0.04), xycoords=ax.get_xaxis_transform(), xytext=(6, -3),
                textcoords="offset points", fontsize=7, color=DROP_COLOUR,
            )
    producers = [name for name, (_, producer) in run.emitted.items() if producer == stage]
    for marker, name in zip(_PANE_MARKERS * 4, producers):
        rows, _ = run.emitted[name]
        prefix = f"{name}: " if len(producers) > 1 else ""
        for timing, colour in TIMING_COLOURS.items():
            points = [e for e in rows if e.pane.timing.name == timing]
            if not points:
                continue
            ax.scatter(
                [e.step for e in points], clipped([_seconds(e.timestamp.micros) for e in points]), s=40, marker=marker,
                color=colour, edgecolor="black", linewidth=0.5, zorder=3, label=f"{prefix}{timing} pane",
            )
            if label_panes:
                for e in points:
                    ax.annotate(
                        _short(e.value), (e.step, clipped([_seconds(e.timestamp.micros)])[0]), xytext=(5, 4),
                        textcoords="offset points", fontsize=7, color="#333333",
                    )
    ax.set_ylim(bottom, top)
    ax.set_xlim(steps[0] - 0.5, steps[-1] - 0.3)
    ax.grid(alpha=0.3)


def _short(value: Any) -> str:
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 18 else text[:17] + "…"


def _integer_steps(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_watermarks(
    result: Any,
    panes: Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    stages: Sequence[str] | None = None,
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
    ylim: tuple[float, float] | None = None,
    show_holds: bool = True,
    label_panes: bool = False,
) -> Any:
    """A matplotlib Figure of ``result``'s watermark timeline.

    ``panes`` maps a legend name to a captured PCollection (or is a list of them); each
    pane it emitted is drawn in the panel of the stage that produced it. ``stages`` picks
    and orders the panels by stage name (the transform label, or a prefix naming one
    stage); by default every stage that groups, or all stages if none does. ``ylim`` fixes
    the event-time axis (seconds); ``show_holds`` shades where a hold keeps the output
    watermark below the input and draws the earliest hold; ``label_panes`` writes each
    pane's value by its dot. Steps that dropped data (any reason) are marked along the bottom
    edge, with the count. Watermarks at -inf and +inf are drawn along the bottom and top
    edges.
    """
    run = _Run(result, panes, stages)
    plt = _pyplot()
    fig, axes = plt.subplots(
        len(run.stages), 1, sharex=True, squeeze=False, figsize=figsize or (9, 2.6 * len(run.stages) + 0.8)
    )
    limits = _limits([run], ylim)
    for ax, stage in zip(axes[:, 0], run.stages):
        _draw_stage(ax, run, stage, limits, show_holds, label_panes)
        ax.set_ylabel("event time (s)")
        ax.set_title(stage, fontsize=10, loc="left")
        ax.legend(fontsize=7, loc="upper left")
        _integer_steps(ax)
    axes[-1, 0].set_xlabel(run.step_axis_label())
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def compare_watermarks(
    runs: Mapping[str, Any],
    *,
    stages: Sequence[str] | None = None,
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
    ylim: tuple[float, float] | None = None,
    show_holds: bool = True,
    label_panes: bool = False,
) -> Any:
    """Several runs side by side: one column per run, one row per stage, the same axes limits.

    ``runs`` maps a column title to ``(result, panes)`` (or to a result alone); the other
    arguments are those of ``plot_watermarks``. Stages are matched by name across runs, so
    the runs are usually one pipeline under different settings.
    """
    if not runs:
        msg = "compare_watermarks needs at least one run: {'title': (result, panes)}"
        raise ValueError(msg)
    prepared = {}
    for name, entry in runs.items():
        result, panes = entry if isinstance(entry, tuple) else (entry, None)
        prepared[name] = _Run(result, panes, stages)
    first = next(iter(prepared.values()))
    for name, run in prepared.items():
        if run.stages != first.stages:
            msg = f"the runs show different stages ({name!r}: {run.stages}, not {first.stages}); pass stages=[...]"
            raise ValueError(msg)
    plt = _pyplot()
    rows, columns = len(first.stages), len(prepared)
    fig, axes = plt.subplots(
        rows, columns, sharex=True, sharey=True, squeeze=False,
        figsize=figsize or (5.2 * columns + 0.6, 2.5 * rows + 1.4),
    )
    limits = _limits(list(prepared.values()), ylim)
    legend: dict[str, Any] = {}
    for column, (name, run) in enumerate(prepared.items()):
        for row, stage in enumerate(run.stages):
            ax = axes[row, column]
            _draw_stage(ax, run, stage, limits, show_holds, label_panes)
            _integer_steps(ax)
            if row == 0:
                ax.set_title(name, fontsize=11, fontweight="bold")
            if column == 0:
                ax.set_ylabel(f"{stage}\nevent time (s)", fontsize=9)
            for handle, label in zip(*ax.get_legend_handles_labels()):
                legend.setdefault(label, handle)
        axes[-1, column].set_xlabel(run.step_axis_label())
    fig.legend(
        list(legend.values()), list(legend.keys()), loc="lower center", ncol=min(len(legend), 5), fontsize=8,
        frameon=False,
    )
    if title:
        fig.suptitle(title)
    # Leave room below the x labels for the figure legend (about a quarter inch per row).
    legend_inches = 0.15 + 0.22 * math.ceil(len(legend) / 5)
    fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 1))
    return fig


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        msg = "plot_watermarks needs matplotlib: pip install 'sparkbeam[plot]'"
        raise ImportError(msg) from None
    return plt


def _named_panes(panes: Mapping[str, Any] | Sequence[Any] | None) -> dict[str, Any]:
    if panes is None:
        return {}
    if isinstance(panes, Mapping):
        return dict(panes)
    return {getattr(pcoll, "label", f"pcoll{index}"): pcoll for index, pcoll in enumerate(panes)}
