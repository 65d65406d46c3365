"""Progress while a run goes on: a stream's line per step (live on a terminal, a log line at
most every few seconds otherwise), batch Spark stages named by transform labels, none with
--quiet."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.timeline import WatermarkRecord
from sparkbeam.runners.spark import progress as progress_module
from sparkbeam.runners.spark.progress import (
    ProgressLine,
    RunProgress,
    StepReport,
    _batch_text,
    format_lag,
)
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.utils.timestamp import MIN_TIMESTAMP

SECOND = 1_000_000
NOW = 1_700_000_000 * SECOND


def record(step, stage_id, stage, output_watermark, *, elements_in=0, late=0, dead=0) -> WatermarkRecord:
    return WatermarkRecord(
        step=step, processing_time=NOW + step * SECOND, stage=stage, stage_id=stage_id,
        input_watermark=output_watermark, output_watermark=output_watermark, earliest_hold=None,
        hold_key=None, hold_window=None, elements_in=elements_in, elements_out=0, late_dropped=late,
        closed_dropped=0, state_keys=0, state_windows=0, dead_letters=dead,
    )


class FakeClock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


class Hooks:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def before_step(self, step):
        self.calls.append(f"before {step}")

    def after_step(self, step):
        self.calls.append(f"after {step}")


def play(progress: RunProgress, steps: list[list[WatermarkRecord]], clock: FakeClock | None = None) -> None:
    for step, records in enumerate(steps):
        progress.before_step(step)
        for r in records:
            progress.on_record(r)
        progress.after_step(step)
        if clock is not None:
            clock.seconds += 3
    progress.close()


def two_stage_step(step, read, read_mark, sum_mark, late=0, dead=0):
    return [
        record(step, 0, "Read", read_mark, elements_in=read, dead=dead),
        record(step, 1, "Sum", sum_mark, elements_in=read, late=late),
    ]


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (3, "3s"), (59.6, "60s"), (125, "2m05s"), (3720, "1h02m"), (90000, "1d01h"), (-2, "0s")]
)
def test_lags_read_as_durations(seconds, text):
    assert format_lag(seconds) == text


def test_a_stream_on_a_terminal_rewrites_one_line_per_step_and_keeps_the_last():
    out = io.StringIO()
    hooks = Hooks()
    progress = RunProgress(ProgressLine(out, terminal=True), inner=hooks, source_stages=frozenset({0}))
    play(
        progress,
        [
            two_stage_step(0, 0, MIN_TIMESTAMP.micros, MIN_TIMESTAMP.micros),
            two_stage_step(1, 120, NOW - 2 * SECOND, NOW - 64 * SECOND, late=3, dead=1),
        ],
    )
    assert hooks.calls == ["before 0", "after 0", "before 1", "after 1"]  # the stream's own hooks run
    frames = out.getvalue().split("\r")[1:]
    assert [f.split(" | ")[:2] for f in frames] == [["step 0", "read 0"], ["step 1", "read 120"]]
    assert frames[0].split(" | ")[2] == "lag Read no watermark yet, Sum no watermark yet"
    assert frames[1].split(" | ")[2:5] == ["lag Read 3s, Sum 1m05s", "dropped 3", "dead letters 1"]
    assert frames[1].endswith("s\x1b[K\n")  # the step's time, and the last line stays


def test_a_stream_without_a_terminal_logs_a_summary_every_few_seconds(caplog):
    clock = FakeClock()
    progress = RunProgress(ProgressLine(io.StringIO(), terminal=False, log_every=10, clock=clock), source_stages=frozenset({0}))
    steps = [two_stage_step(s, 10, NOW + (s - 5) * SECOND, NOW + (s - 30) * SECOND) for s in range(10)]
    with caplog.at_level(logging.INFO, logger="sparkbeam.progress"):
        play(progress, steps, clock)  # a step every 3 s
    lines = [r.getMessage() for r in caplog.records if r.name == "sparkbeam.progress"]
    assert [line.split(" | ")[:2] for line in lines] == [
        ["steps 0-4", "read 50"],  # at 12 s: the first 10 s are over
        ["steps 5-8", "read 40"],  # at 24 s
        ["step 9", "read 10"],  # what was left when the run ended
    ]
    assert lines[-1].split(" | ")[2] == "lag Read 5s, Sum 30s"


def test_a_run_shorter_than_the_log_interval_logs_nothing(caplog):
    clock = FakeClock()
    progress = RunProgress(ProgressLine(io.StringIO(), terminal=False, log_every=10, clock=clock))
    with caplog.at_level(logging.INFO, logger="sparkbeam.progress"):
        play(progress, [two_stage_step(s, 1, NOW, NOW) for s in range(3)], clock)  # 9 s
    assert not [r for r in caplog.records if r.name == "sparkbeam.progress"]


def test_without_logging_configured_the_log_line_goes_to_stderr(monkeypatch):
    out = io.StringIO()
    line = ProgressLine(out, terminal=False)
    monkeypatch.setattr(logging.getLogger("sparkbeam.progress"), "hasHandlers", lambda: False)
    line.show("step 3 | read 1")
    assert out.getvalue().endswith(" sparkbeam progress: step 3 | read 1\n")


def test_a_report_of_a_test_stream_shows_watermarks_as_times():
    report = StepReport(4, 4, 2, 0, 0, 0.5, (("Sum", 10 * SECOND),), now=None)
    assert report.format() == "step 4 | read 2 | watermark Sum 10s | dropped 0 | 0.50s"


def windowed_sums(p):
    stream = TestStream().add_elements([window.TimestampedValue(("k", 1), 1)]).advance_watermark_to_infinity()
    return p | stream | beam.WindowInto(window.FixedWindows(10)) | "SumPerKey" >> beam.CombinePerKey(sum)


@pytest.mark.spark
def test_a_run_reports_its_steps_and_quiet_silences_it(spark, caplog, monkeypatch):
    monkeypatch.setattr(progress_module, "LOG_EVERY_SECONDS", 0)  # a line for every step
    with caplog.at_level(logging.INFO, logger="sparkbeam.progress"):
        p = beam.Pipeline(options=PipelineOptions(streaming=True))
        windowed_sums(p)
        p.run()
        said = [r.getMessage() for r in caplog.records if r.name == "sparkbeam.progress"]
        assert said and said[0].startswith("step 0 | read 1 | watermark ")
        caplog.clear()
        p = beam.Pipeline(options=PipelineOptions(streaming=True, quiet=True))
        windowed_sums(p)
        p.run()
        assert not [r for r in caplog.records if r.name == "sparkbeam.progress"]


@pytest.mark.spark
def test_spark_jobs_are_described_by_the_transforms_labels(spark):
    p = beam.Pipeline()
    p | beam.Create([("a", 1), ("b", 2)]) | "SumPerTeam" >> beam.CombinePerKey(sum) | "Show" >> beam.Map(str)
    p.run()
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    descriptions = {str(jobs.apply(i).description().get()) for i in range(jobs.size()) if jobs.apply(i).description().isDefined()}
    assert "SumPerTeam (step 0)" in descriptions  # as the Spark UI's job and stage pages show it


class FakeTracker:
    """Spark's status tracker for a run with one finished job and one running."""

    def getJobIdsForGroup(self, group):  # Spark's names
        return [1, 2] if group == "sparkbeam-run" else []

    def getJobInfo(self, job_id):
        return SimpleNamespace(status="SUCCEEDED" if job_id == 1 else "RUNNING", stageIds=[job_id * 10, job_id * 10 + 1])

    def getStageInfo(self, stage_id):
        started = stage_id != 21  # stage 21 waits for stage 20's shuffle
        return SimpleNamespace(numTasks=4, numActiveTasks=2 if started else 0, numCompletedTasks=1 if started else 0)


def test_a_batch_run_shows_its_stage_and_the_spark_stages_running():
    assert _batch_text(FakeTracker(), "sparkbeam-run", "SumPerTeam") == "batch | SumPerTeam | Spark stage 20: 1/4 tasks"
    assert _batch_text(FakeTracker(), "another-run", "SumPerTeam") is None
