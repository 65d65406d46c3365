"""Resuming a stream from its checkpoint: every unchanged pipeline resumes.

A custom WindowFn is recorded by its class and parameters, not by a repr with an address
(which differs in every run); the same holds for Beam's WindowFns through the Beam front end.
"""

from __future__ import annotations

import os

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.lowering.descriptions import describe
from sparkbeam.runners.core.lowering.ops import lower
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.runners.spark.checkpoints import CheckpointError, pipeline_shape
from sparkbeam.transforms import window
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.window import IntervalWindow

pytestmark = pytest.mark.timeout(300)


def write_lines(path: str, lines: list[str], mtime: int) -> None:
    temp = os.path.join(os.path.dirname(path), "." + os.path.basename(path))
    with open(temp, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.utime(temp, (mtime, mtime))
    os.replace(temp, path)


class Buckets(window.NonMergingWindowFn):
    """A user's WindowFn as a plain class: its default repr holds its address."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    def assign(self, context):
        size = self.seconds * 1_000_000
        start = context.timestamp.micros - context.timestamp.micros % size
        return [IntervalWindow(Timestamp.from_micros(start), Timestamp.from_micros(start + size))]


def test_a_plain_class_is_described_by_its_class_and_parameters():
    assert "0x" in repr(Buckets(10))
    assert describe(Buckets(10)) == describe(Buckets(10)) == "Buckets(seconds=10)"
    assert describe(Buckets(10)) != describe(Buckets(20))
    assert describe(window.FixedWindows(60)) == "FixedWindows(size=Duration(micros=60000000), offset=Timestamp(micros=0))"


def sums_per_bucket(p, directory: str, seconds: int):
    read = p | "Read" >> beam.io.ReadFromTextStream(
        directory, timestamp=lambda line: int(line.split(",")[1]), max_files_per_trigger=1
    )
    return beam.capture(
        read
        | "Key" >> beam.Map(lambda line: (line.split(",")[0], 1))
        | "Buckets" >> beam.WindowInto(Buckets(seconds))
        | "Count" >> beam.CombinePerKey(sum)
    )


@pytest.mark.spark
def test_a_stream_with_a_custom_windowfn_stops_and_resumes(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    for index in range(4):
        write_lines(str(directory / f"f{index}.txt"), [f"k,{index * 10 + j}" for j in range(3)], 1_700_000_000 + index)
    settings = {"step_interval": 0.2, "state_partitions": 2, "available_now": True, "checkpoint_interval": 1}
    checkpoint = str(tmp_path / "ck")

    first = beam.Pipeline(options=PipelineOptions(checkpoint_dir=checkpoint, max_steps=2, **settings))
    sums_per_bucket(first, str(directory), 10)
    assert first.run().watermarks().steps == 2

    second = beam.Pipeline(options=PipelineOptions(checkpoint_dir=checkpoint, **settings))
    counts = sums_per_bucket(second, str(directory), 10)
    result = second.run()  # refused before: the recorded shape held the WindowFn's address
    emitted = sorted((e.value, int(e.windows[0].start)) for e in result.emissions(counts))
    # what the second run emitted: every bucket once, those of the first run's files included
    # (the watermark had not passed them when it stopped)
    assert emitted == [(("k", 3), start) for start in (0, 10, 20, 30)]

    changed = beam.Pipeline(options=PipelineOptions(checkpoint_dir=checkpoint, **settings))
    sums_per_bucket(changed, str(directory), 20)
    with pytest.raises(CheckpointError, match=r"another shape(.|\n)*Buckets\(seconds=10\)(.|\n)*Buckets\(seconds=20\)"):
        changed.run()


def test_beams_custom_windowfn_gives_the_same_shape_in_every_build():
    """Beam's front end wraps a custom Beam WindowFn; two builds of the same pipeline (new
    objects, new addresses) record the same shape, and a changed parameter shows."""
    import apache_beam as ab
    from apache_beam.coders import coders as beam_coders
    from apache_beam.transforms import window as beam_window

    from sparkbeam.runners.beam.translate import translate

    class Halves(beam_window.NonMergingWindowFn):
        def __init__(self, seconds):
            self.seconds = seconds

        def assign(self, context):
            start = context.timestamp - context.timestamp % self.seconds
            return [beam_window.IntervalWindow(start, start + self.seconds)]

        def get_window_coder(self):
            return beam_coders.IntervalWindowCoder()

    def shape(seconds):
        p = ab.Pipeline()
        (
            p
            | ab.Create([("k", 1)])
            | ab.WindowInto(Halves(seconds))
            | ab.GroupByKey()
        )
        return pipeline_shape(plan_stages(translate(p)))

    assert shape(5) == shape(5)
    assert any("Halves(seconds=5)" in line for line in shape(5))
    assert not any("0x" in line for line in shape(5))
    assert shape(5) != shape(6)


def test_sparkbeams_pipeline_shape_names_no_address():
    p = beam.Pipeline()
    p | beam.Create([("k", 1)]) | beam.WindowInto(Buckets(5)) | beam.GroupByKey()
    lines = pipeline_shape(plan_stages(lower(p)))
    assert any("Buckets(seconds=5)" in line for line in lines)
    assert not any("0x" in line for line in lines)


@pytest.mark.spark
def test_a_changed_watermark_delay_applies_from_the_resume_on(spark, tmp_path, caplog):
    from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
    from sparkbeam.utils.timestamp import MAX_TIMESTAMP

    directory = tmp_path / "in"
    directory.mkdir()
    for index in range(5):
        write_lines(str(directory / f"f{index}.txt"), [f"k,{(index + 1) * 10}"], 1_700_000_000 + index)
    settings = {"step_interval": 0.2, "state_partitions": 2, "available_now": True, "checkpoint_interval": 1}

    def run(max_delay, first_step=0, **more):
        """The source's watermark after each step this run ran (the last one's is the end of time)."""
        p = beam.Pipeline(options=PipelineOptions(checkpoint_dir=str(tmp_path / "ck"), **settings, **more))
        p | "Read" >> beam.io.ReadFromTextStream(
            str(directory),
            timestamp=lambda line: int(line.split(",")[1]),
            max_files_per_trigger=1,
            watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=max_delay),
        )
        result = p.run()
        records = [r for r in result.watermarks().for_stage("Read/Read") if r.step >= first_step]
        return {r.step: r.output_watermark for r in records if r.output_watermark < MAX_TIMESTAMP.micros}

    # two steps: the first file, and the second unless that step found only an empty batch
    assert 10_000_000 in set(run(0, max_steps=2).values()) <= {10_000_000, 20_000_000}
    # the checkpoint's 0 s no longer wins: each file's time minus 5 s (the third's and the
    # fourth's at least: the run reads them, and the step that reads the last file may end
    # the input at once), never the time itself; a step that found only an empty batch keeps
    # the watermark it had (the checkpoint's, 10 or 20 s, at first)
    after = set(run(5, first_step=2).values())
    assert {25_000_000, 35_000_000} <= after <= {10_000_000, 15_000_000, 20_000_000, 25_000_000, 35_000_000, 45_000_000}
    assert "resumed with changed settings, applied from this step on: watermark" in caplog.text


@pytest.mark.spark
def test_available_now_on_a_finished_stream_reads_what_arrived_since(spark, tmp_path, capfd):
    """As Spark's availableNow on an existing checkpoint: the files added since the last run
    are read, each once; a run with nothing new runs no step. The first run ended its input,
    so its watermarks are at the end of time: the grouping counts the new line as late."""
    directory = tmp_path / "in"
    directory.mkdir()
    write_lines(str(directory / "f0.txt"), ["a,1", "b,2"], 1_700_000_000)
    settings = {"step_interval": 0.2, "state_partitions": 2, "available_now": True, "checkpoint_dir": str(tmp_path / "ck")}

    def run(after_step: int = -1):
        """What the run read and counted in its own steps (after ``after_step``), its
        records of those steps, and the last step it ran; what it said."""
        p = beam.Pipeline(options=PipelineOptions(**settings))
        lines = p | "Read" >> beam.io.ReadFromTextStream(str(directory), timestamp=lambda line: int(line.split(",")[1]))
        read = beam.capture(lines)
        counted = beam.capture(lines | "Key" >> beam.Map(lambda line: (line.split(",")[0], 1)) | "Count" >> beam.CombinePerKey(sum))
        result = p.run()
        records = [r for r in result.watermarks() if r.step > after_step]
        emitted = {name: sorted(e.value for e in result.emissions(pcoll) if e.step > after_step) for name, pcoll in (("read", read), ("counted", counted))}
        said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("sparkbeam:")]
        return emitted, records, max([r.step for r in result.watermarks()], default=-1), said

    emitted, _, last, _ = run()
    assert emitted == {"read": ["a,1", "b,2"], "counted": [("a", 1), ("b", 1)]}

    write_lines(str(directory / "f1.txt"), ["c,3"], 1_700_000_001)
    emitted, records, again, said = run(last)
    assert said == [
        f"sparkbeam: the stream in --checkpoint_dir={tmp_path / 'ck'} finished at step {last}; reading what arrived "
        "since: its watermarks are at the end of time, so windows and groupings count the new records as late data "
        "(element-wise steps and their sinks take them)"
    ]
    assert emitted == {"read": ["c,3"], "counted": []}  # read once; no new pane for a record after the end of time
    assert sum(r.elements_in for r in records if r.stage == "Read/Read") == 1
    assert sum(r.late_dropped for r in records) == 1

    emitted, records, _, said = run(again)  # nothing arrived since
    assert records == [] and emitted == {"read": [], "counted": []}
    assert said == [f"sparkbeam: the stream in --checkpoint_dir={tmp_path / 'ck'} finished at step {again}; nothing to do (give a new checkpoint directory to run it again)"]


@pytest.mark.spark
def test_keep_open_stops_undrained_and_the_next_run_fills_the_open_windows(spark, tmp_path, capfd):
    """``--available_now --keep_open`` stops as Spark's availableNow stops: the windows the
    events' watermark has passed fire, the others wait in the checkpoint, and the next run's
    records join them (without it the first run fires every window and the next run's
    record for an old window is late)."""
    directory = tmp_path / "in"
    directory.mkdir()
    write_lines(str(directory / "f0.txt"), ["a,1", "a,2", "b,25"], 1_700_000_000)
    settings = {
        "step_interval": 0.2,
        "state_partitions": 2,
        "available_now": True,
        "keep_open": True,
        "checkpoint_dir": str(tmp_path / "ck"),
    }

    def run(after_step: int = -1):
        p = beam.Pipeline(options=PipelineOptions(**settings))
        totals = (
            p
            | "Read" >> beam.io.ReadFromTextStream(str(directory), timestamp=lambda line: int(line.split(",")[1]))
            | "Key" >> beam.Map(lambda line: (line.split(",")[0], 1))
            | "Tens" >> beam.WindowInto(window.FixedWindows(10))
            | "Count" >> beam.CombinePerKey(sum)
        )
        counted = beam.capture(totals)
        result = p.run()
        emitted = sorted((e.value, e.windows[0].start.micros // 1_000_000) for e in result.emissions(counted) if e.step > after_step)
        said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("sparkbeam:")]
        return emitted, max([r.step for r in result.watermarks()], default=-1), said

    emitted, last, said = run()
    assert emitted == [(("a", 2), 0)]  # the watermark is at 25 s: [20, 30) stays open
    assert said and "stopped at step" in said[-1] and "--keep_open" in said[-1]

    write_lines(str(directory / "f1.txt"), ["b,27", "c,45"], 1_700_000_001)
    emitted, again, _ = run(last)
    assert emitted == [(("b", 2), 20)]  # b,25 from the first run and b,27 from this one

    emitted, _, said = run(again)  # nothing arrived since: no step, [40, 50) still open
    assert emitted == []
    assert said == [f"sparkbeam: nothing arrived since step {again} of the stream in --checkpoint_dir={tmp_path / 'ck'}; its windows stay open (--keep_open)"]


def test_keep_open_needs_available_now_and_a_checkpoint_directory(tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    for settings, problem in [
        ({"keep_open": True}, "give --available_now as well"),
        ({"keep_open": True, "available_now": True}, "give --checkpoint_dir=DIR"),
    ]:
        p = beam.Pipeline(options=PipelineOptions(**settings))
        _ = p | beam.io.ReadFromTextStream(str(directory)) | beam.Map(len)
        with pytest.raises(ValueError, match=problem):
            p.run()
