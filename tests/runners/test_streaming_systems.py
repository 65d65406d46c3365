"""Streaming Systems, chapter 3, as a test: watermarks between stages and timestamp combiners.

The pipeline is ``sparkbeam.examples.streaming_systems``: two session stages (mobile and
console) flattened into 2-minute fixed windows and averaged. The engine alone runs both
combiners and the sliding-window example; Spark must reproduce the engine step by step.
"""

from __future__ import annotations

import pytest

import sparkbeam as beam
from sparkbeam.examples import streaming_systems as scenario
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.transforms.window import TimestampCombiner

EOW = TimestampCombiner.OUTPUT_AT_EOW
EARLIEST = TimestampCombiner.OUTPUT_AT_EARLIEST
SESSION_STAGES = ("mobileSessionTotals", "consoleSessionTotals")
AVERAGE_STAGE = "Average/CombinePerKey"


def run(combiner, *, on_spark=False):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    outputs = scenario.sessions_then_averages(p, combiner)
    result = p.run() if on_spark else run_in_memory(p, streaming=True)
    return result, outputs


def averages(result, outputs):
    return [(e.step, str(e.window), round(e.value, 6)) for e in result.emissions(outputs["averages"])]


@pytest.mark.parametrize("combiner", [EOW, EARLIEST])
def test_last_stage_input_watermark_is_the_min_of_the_session_stages(combiner):
    result, _ = run(combiner)
    timeline = result.watermarks()
    for step in range(timeline.steps):
        at = timeline.at_step(step)
        upstream = min(at[name].output_watermark for name in SESSION_STAGES)
        assert at[AVERAGE_STAGE].input_watermark == upstream, f"step {step}"


def open_session_starts(result, outputs, stage, tag, step):
    """The earliest element of each session the stage still holds after ``step``,
    worked out from the script and the sessions emitted so far (independently of the engine)."""
    seen = []
    steps_seen = 0
    for script_tag, scores, _watermark in scenario._SCRIPT:
        if script_tag == tag and scores:
            seen.append((steps_seen, scores))
        steps_seen += 2 if scores else 1  # add_elements and advance_watermark are a step each
    elements = [(user, second) for arrival, scores in seen if arrival <= step for second, user, _ in scores]
    emitted = [
        (e.value[0], e.window) for e in result.emissions(outputs[f"{tag}_sessions"]) if e.step <= step
    ]
    pending = [
        second
        for user, second in elements
        if not any(user == u and w.start.micros <= second * 1_000_000 < w.end.micros for u, w in emitted)
    ]
    return min(pending) if pending else None


def test_earliest_holds_session_stages_at_their_earliest_open_element():
    result, outputs = run(EARLIEST)
    timeline = result.watermarks()
    for tag, stage in zip((scenario.MOBILE, scenario.CONSOLE), SESSION_STAGES):
        for record in timeline.for_stage(stage):
            earliest = open_session_starts(result, outputs, stage, tag, record.step)
            if earliest is None:
                assert record.output_watermark == record.input_watermark
            else:
                assert record.earliest_hold == earliest * 1_000_000, (stage, record.step)
                assert record.output_watermark == min(record.input_watermark, earliest * 1_000_000)


def test_earliest_emits_averages_later_and_different_than_end_of_window():
    eow = averages(*run(EOW))
    earliest = averages(*run(EARLIEST))
    assert eow and earliest
    first_step = {window: step for step, window, _ in eow}
    assert all(step >= first_step.get(window, -1) for step, window, _ in earliest)
    assert any(step > first_step[window] for step, window, _ in earliest if window in first_step)
    assert {(w, v) for _, w, v in eow} != {(w, v) for _, w, v in earliest}


def emission_steps(combiner_rule_on):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    outputs = scenario.overlapping_windows(p)
    result = run_in_memory(p, streaming=True, overlapping_window_rule=combiner_rule_on)
    return sorted({e.step for e in result.emissions(outputs["second"])}), result, outputs


def test_chained_sliding_windows_emit_window_by_window_only_with_the_overlapping_rule():
    steps_on, _, _ = emission_steps(True)
    steps_off, result_off, _ = emission_steps(False)
    last_step = result_off.watermarks().steps - 1
    assert len(steps_on) > 3  # window by window as the watermark advances
    assert steps_off == [last_step]  # all at once, when the input ends


@pytest.mark.spark
@pytest.mark.parametrize("combiner", [EOW, EARLIEST])
def test_spark_reproduces_the_engine_step_by_step(spark, combiner):
    engine_result, engine_outputs = run(combiner)
    spark_result, spark_outputs = run(combiner, on_spark=True)
    assert averages(spark_result, spark_outputs) == averages(engine_result, engine_outputs)
    engine_marks = [(r.step, r.stage, r.input_watermark, r.output_watermark) for r in engine_result.watermarks()]
    spark_marks = [(r.step, r.stage, r.input_watermark, r.output_watermark) for r in spark_result.watermarks()]
    assert spark_marks == engine_marks
