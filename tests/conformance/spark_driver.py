"""Transcripts through the Spark runner: a TestStream pipeline, then a replay of its panes.

A transcript becomes one TestStream (each ``input`` bundle, watermark move and clock move
is one event, so one step), windowed as the case says and aggregated twice in the same
pipeline, by GroupByKey and by CombinePerKey(concatenate), as Beam's harness does. Each
order-agnostic case also feeds every bundling under its own key in the same stream. After
the run, the panes each step emitted are replayed, action by action, through the same
matcher as the engine's transcripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.utils.timestamp import Duration, Timestamp
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import TimestampedValue

from .engine_driver import ConcatCombineFn
from .transcripts import (
    StateExpectation,
    Transcript,
    batch_final_panes,
    check_final_panes,
    pane_info_dict,
    run_transcript,
    split_bundles,
)

AGGREGATIONS = ("group", "combine")


def _windowed(case: Transcript, pcoll: Any) -> Any:
    return pcoll | "Window" >> beam.WindowInto(
        case.window_fn,
        trigger=case.trigger_fn,
        accumulation_mode=case.accumulation_mode,
        timestamp_combiner=case.timestamp_combiner,
        allowed_lateness=Duration(micros=case.allowed_lateness.micros),
    )


def _aggregate(windowed: Any) -> dict[str, Any]:
    return {
        "group": beam.capture(windowed | "Group" >> beam.GroupByKey()),
        "combine": beam.capture(windowed | "Combine" >> beam.CombinePerKey(ConcatCombineFn())),
    }


class _Replay:
    """A transcript driver answering each action with the panes its steps emitted."""

    def __init__(self, panes_per_action: list[list[WindowedValue]]) -> None:
        self._answers = iter(panes_per_action)

    def _next(self, *_: Any) -> list[WindowedValue]:
        return next(self._answers)

    add_input = advance_watermark = advance_clock = _next

    def check_state(self, expectation: StateExpectation) -> None:  # state is not observable here
        return None


def run_streaming(case: Transcript, variants: Sequence[tuple[str, int]], session: dict[str, Any] | None = None) -> dict[tuple[str, str], _Replay]:
    """Run ``case`` once on Spark (``session``: the options of the kind of Spark session,
    ``spark_session_kind``'s); a replay driver per (aggregation, bundling key)."""
    stream = TestStream()
    steps_of_action: list[list[int]] = []
    event = 0
    for step in case.steps:
        if step.action == "input":
            bundles = {bundling: split_bundles(step.params, bundling, seed) for bundling, seed in variants}
            mine = []
            for position in range(max(len(b) for b in bundles.values())):
                stream.add_elements(
                    [
                        TimestampedValue((bundling, value), Timestamp.from_micros(ts))
                        for bundling, cut in bundles.items()
                        if position < len(cut)
                        for value, ts in cut[position]
                    ]
                )
                mine.append(event)
                event += 1
            steps_of_action.append(mine)
        elif step.action == "watermark":
            stream.advance_watermark_to(Timestamp.from_micros(step.params))
            steps_of_action.append([event])
            event += 1
        elif step.action == "clock":
            stream.advance_processing_time(Duration(micros=step.params))
            steps_of_action.append([event])
            event += 1
    stream.advance_watermark_to_infinity()
    p = beam.Pipeline(
        options=PipelineOptions(streaming=True, overlapping_window_rule=case.overlapping_window_rule, **(session or {}))
    )
    outputs = _aggregate(_windowed(case, p | "Stream" >> stream))
    result = p.run()
    replays = {}
    for aggregation, pcoll in outputs.items():
        emitted = result.emissions(pcoll)
        for bundling, _seed in variants:
            by_step: dict[int, list[WindowedValue]] = {}
            for e in emitted:
                if e.value[0] == bundling:
                    by_step.setdefault(e.step, []).append(
                        WindowedValue(e.value, e.timestamp.micros, e.windows, e.pane)
                    )
            answers = [[pane for s in steps for pane in by_step.get(s, [])] for steps in steps_of_action]
            replays[(aggregation, bundling)] = _Replay(answers)
    return replays


def play_streaming(case: Transcript, variants: Sequence[tuple[str, int]], session: dict[str, Any] | None = None) -> None:
    for replay in run_streaming(case, variants, session).values():
        run_transcript(case, replay, check_state=False)


def play_batch(case: Transcript, finals: list[dict]) -> None:
    p = beam.Pipeline(options=PipelineOptions(overlapping_window_rule=case.overlapping_window_rule))
    created = (
        p
        | "Create" >> beam.Create(case.inputs())
        | "Stamp" >> beam.Map(lambda e: TimestampedValue(("key", e[0]), Timestamp.from_micros(e[1])))
    )
    outputs = _aggregate(_windowed(case, created))
    result = p.run()
    for pcoll in outputs.values():
        infos = [pane_info_dict(WindowedValue(e.value, e.timestamp.micros, e.windows, e.pane)) for e in result.emissions(pcoll)]
        check_final_panes(infos, finals)


# ---------------------------------------------------------------------------- pytest parameters


def spark_streaming_params(cases: Sequence[Transcript]) -> list[Any]:
    """One pytest param per case. A case that must fail on a ``state`` claim is skipped:
    window state is not observable through Spark's outputs, so on Spark it would pass."""
    return [
        pytest.param(
            case,
            id=case.name,
            marks=[pytest.mark.skip(reason="a state claim: window state is not observable through Spark's outputs")]
            if case.error and "State" in case.error
            else [],
        )
        for case in cases
    ]


def spark_batch_params(cases: Sequence[Transcript]) -> list[Any]:
    """One pytest param per case, with its final panes (skipped as Beam's BatchTranscriptTest
    skips it)."""
    params = []
    for case in cases:
        finals = batch_final_panes(case)
        marks = [pytest.mark.skip(reason=finals)] if isinstance(finals, str) else []
        params.append(pytest.param(case, finals, id=case.name, marks=marks))
    return params
