"""A stream's bounded history: its last steps in memory, every step in the logs, with no Spark."""

from __future__ import annotations

import json
import pickle

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.history import RunHistory, emission_json
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.runners.core.loop.timeline import (
    Emission,
    StepEmissions,
    TrimmedHistoryError,
    WatermarkRecord,
)
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue

S = 1_000_000
BATCHES = 8


def summing_stream(options: PipelineOptions, log: str | None = None):
    """A TestStream of BATCHES bundles, each followed by a watermark that closes its window."""
    stream = TestStream()
    for batch in range(BATCHES):
        stream = stream.add_elements([beam.TimestampedValue(("k", batch), batch * 10 + 1)])
        stream = stream.advance_watermark_to(batch * 10 + 10)
    p = beam.Pipeline(options=options)
    sums = beam.capture(
        p | stream | beam.WindowInto(window.FixedWindows(10)) | "Sum" >> beam.CombinePerKey(sum), log=log
    )
    return p, sums


def read_lines(path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def test_a_stream_keeps_its_last_steps_in_memory_and_every_step_in_the_logs(tmp_path):
    timeline_log, capture_log = str(tmp_path / "timeline.jsonl"), str(tmp_path / "sums.jsonl")
    options = PipelineOptions(timeline_retention_steps=3, timeline_log=timeline_log)
    p, sums = summing_stream(options, capture_log)
    result = run_in_memory(p)

    timeline = result.watermarks()
    steps = timeline.steps
    assert steps > 2 * BATCHES  # each bundle and each watermark is a step
    assert timeline.trimmed and timeline.first_step == steps - 3
    assert sorted({r.step for r in timeline}) == [steps - 3, steps - 2, steps - 1]
    logged = read_lines(timeline_log)
    assert sorted({r["step"] for r in logged}) == list(range(steps))
    assert len(logged) == steps * len(timeline.stage_names)
    with pytest.raises(TrimmedHistoryError, match=rf"step 0: steps before {steps - 3} are no longer in memory.*{timeline_log}"):
        timeline.at_step(0)
    assert set(timeline.at_step(steps - 1)) == set(timeline.stage_names)
    assert timeline.format().splitlines()[0] == f"({timeline.history_note()})"
    assert "older ones trimmed" in repr(timeline)

    emitted = result.emissions(sums)
    assert emitted.trimmed and emitted.first_step == steps - 3
    assert all(e.step >= steps - 3 for e in emitted)
    with pytest.raises(TrimmedHistoryError, match=rf"Sum\S*, step 2: .*{capture_log}"):
        emitted.at_step(2)
    # every window's sum once, in the capture's log, with its step, time, window and pane
    lines = read_lines(capture_log)
    assert [line["value"] for line in lines] == [["k", batch] for batch in range(BATCHES)]
    assert [line["windows"] for line in lines] == [[f"[{b * 10}.0, {b * 10 + 10}.0)"] for b in range(BATCHES)]
    assert lines[0]["timestamp"] == 10 * S - 1 and lines[0]["pane"]["timing"] == "ON_TIME"
    assert [line["step"] for line in lines] == sorted(line["step"] for line in lines)


def test_without_a_log_the_trimmed_history_says_how_to_keep_it():
    p, sums = summing_stream(PipelineOptions(timeline_retention_steps=2))
    result = run_in_memory(p)
    with pytest.raises(TrimmedHistoryError, match=r"give --timeline_log=path to keep the full history"):
        result.watermarks().at_step(0)
    with pytest.raises(TrimmedHistoryError, match=r"give sparkbeam.capture\(pcoll, log=path\) to keep"):
        result.emissions(sums).at_step(0)


def test_the_default_retention_keeps_a_short_stream_whole():
    p, sums = summing_stream(PipelineOptions())
    result = run_in_memory(p)
    assert not result.watermarks().trimmed and result.watermarks().history_note() is None
    assert result.watermarks().at_step(0)
    assert [e.value for e in result.emissions(sums)] == [("k", batch) for batch in range(BATCHES)]


def test_a_batch_run_is_one_step_and_is_not_trimmed():
    p = beam.Pipeline(options=PipelineOptions(timeline_retention_steps=1))
    sums = beam.capture(p | beam.Create([("k", 1), ("k", 2)]) | beam.CombinePerKey(sum))
    result = run_in_memory(p)
    assert not result.watermarks().trimmed
    assert [e.value for e in result.emissions(sums)] == [("k", 3)]


def record(step: int) -> WatermarkRecord:
    return WatermarkRecord(step, step * S, "Sum", 0, step, step, None, None, None, 1, 1, 0, 0, 1, 1)


def emission(step: int, value) -> Emission:
    return Emission(value, Timestamp.from_micros(step * S), (window.GlobalWindow(),), PANE_INFO_UNKNOWN, step, step * S)


def run_steps(history: RunHistory, steps: range) -> None:
    for step in steps:
        history.add_record(record(step))
        history.add_emissions(7, step, [emission(step, f"v{step}")])
        history.end_step(step)


def test_a_checkpoint_holds_the_kept_steps_and_a_resumed_run_logs_each_emission_once(tmp_path):
    log = str(tmp_path / "out" / "values.jsonl")  # its directory is made
    history = RunHistory([7], retention_steps=2, capture_logs={7: log})
    run_steps(history, range(4))
    saved = pickle.loads(pickle.dumps(history.snapshot()))  # as a checkpoint holds it
    assert [step for step, _ in saved["records"]] == [2, 3]
    assert [step for step, _ in saved["emissions"][7]] == [2, 3]
    run_steps(history, range(4, 6))  # written, then the process dies before the next checkpoint

    resumed = RunHistory([7], retention_steps=2, capture_logs={7: log})
    resumed.restore(saved)
    assert resumed.first_step == 2 and [r.step for r in resumed.records()] == [2, 3]
    run_steps(resumed, range(4, 7))  # the replayed steps and one more
    assert [line["value"] for line in read_lines(log)] == [f"v{step}" for step in range(7)]
    assert [e.step for e in resumed.emitted_rows(7)] == [5, 6]


def test_a_fresh_run_starts_its_capture_log_empty(tmp_path):
    log = tmp_path / "values.jsonl"
    log.write_text('{"step": 0, "value": "from an earlier run"}\n')
    history = RunHistory([7], retention_steps=5, capture_logs={7: str(log)})
    run_steps(history, range(2))
    assert [line["value"] for line in read_lines(log)] == ["v0", "v1"]


def test_values_json_cannot_hold_are_logged_as_their_repr():
    class Point:
        def __repr__(self):
            return "Point(1, 2)"

    assert json.loads(emission_json(emission(3, {"at": Point()})))["value"] == {"at": "Point(1, 2)"}
    assert json.loads(emission_json(emission(3, {(1, 2): "tuple key"})))["value"] == "{(1, 2): 'tuple key'}"
    line = json.loads(emission_json(emission(3, ("k", 1.5))))
    assert line == {
        "step": 3,
        "processing_time": 3 * S,
        "value": ["k", 1.5],
        "timestamp": 3 * S,
        "windows": ["GlobalWindow"],
        "pane": {"is_first": True, "is_last": True, "timing": "UNKNOWN", "index": 0, "nonspeculative_index": 0},
    }


def test_bad_retention_and_capture_logs_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"timeline_retention_steps.*positive integer, got '0'"):
        PipelineOptions(["--timeline_retention_steps=0"])
    p = beam.Pipeline()
    first, second = p | "A" >> beam.Create([1]), p | "B" >> beam.Create([2])
    beam.capture(first, log=str(tmp_path / "a.jsonl"))
    with pytest.raises(ValueError, match=r"capture\(B\): log=.*a.jsonl' is already the log of A"):
        beam.capture(second, log=str(tmp_path / "a.jsonl"))
    with pytest.raises(ValueError, match=r"capture\(A\): already captured with log="):
        beam.capture(first, log=str(tmp_path / "other.jsonl"))
    with pytest.raises(TypeError, match=r"capture\(B\): log must be a file path, got 3"):
        beam.capture(second, log=3)


def _step_elements(step: int) -> list[WindowedValue]:
    minute = window.IntervalWindow(0, 60)
    return [WindowedValue((f"k{n}", n), 60 * S - 1, (minute,)) for n in range(3)]


def test_a_steps_emissions_are_held_as_its_elements_and_made_when_read(monkeypatch):
    made = []
    history = RunHistory([7])
    elements = _step_elements(2)
    history.add_emissions(7, 2, StepEmissions(elements, 2, 5 * S))
    eager = [Emission(wv.value, wv.timestamp, wv.windows, wv.pane_info, 2, 5 * S) for wv in elements]

    original = Emission.__init__

    def counting(self, *args):
        made.append(args[0])
        original(self, *args)

    monkeypatch.setattr(Emission, "__init__", counting)
    emissions = history.emitted({7: "Sum"})[7]
    assert len(emissions) == 3 and emissions.values() == [wv.value for wv in elements]
    assert made == []  # nothing made until read
    assert list(emissions) == eager and emissions.at_step(2) == eager and emissions.at_step(1) == []
    assert emissions.rows == eager and list(emissions) == eager
    # Read as they are made: the distinct timestamp is one object.
    assert len({id(e.timestamp) for e in emissions}) == 1
    assert repr(emissions) == "<Emissions of Sum: 3 elements>"


def test_a_steps_emissions_collected_twice_are_joined_and_survive_a_checkpoint():
    history = RunHistory([7])
    history.add_emissions(7, 2, StepEmissions(_step_elements(2), 2, 5 * S))
    history.add_emissions(7, 2, StepEmissions(_step_elements(2)[:1], 2, 5 * S))
    history.add_emissions(7, 3, [emission(3, "v3")])
    history.add_emissions(7, 3, StepEmissions(_step_elements(3)[:1], 3, 3 * S))
    saved = pickle.loads(pickle.dumps(history.snapshot()))
    resumed = RunHistory([7])
    resumed.restore(saved)
    rows = resumed.emitted_rows(7)
    assert [(e.value, e.step) for e in rows] == [(("k0", 0), 2), (("k1", 1), 2), (("k2", 2), 2), (("k0", 0), 2), ("v3", 3), (("k0", 0), 3)]
    assert [type(kept) for _, kept in saved["emissions"][7]] == [StepEmissions, list]
    assert StepEmissions(_step_elements(2), 2, 0)[1:] == [StepEmissions(_step_elements(2), 2, 0)[n] for n in (1, 2)]
