"""Splittable DoFns on sparkbeam's Beam runner: the same output as Beam's local runner.

Each builder is written once against apache_beam and run unchanged on Beam's FnApiRunner
and with ``--runner=sparkbeam.SparkRunner`` (``tests.beam_frontend.pairs``). The DoFns
live at module level so that Spark's workers import them by name.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse, RebaseMode
from apache_beam.utils.timestamp import MAX_TIMESTAMP

from sparkbeam.runners.beam.splittable import BeamSplittableParDoOp
from sparkbeam.runners.beam.translate import translate
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from tests.beam_frontend.pairs import assert_runners_agree


class CountUpTo(beam.RestrictionProvider):
    """(name, n) -> positions [0, n), split in chunks of three."""

    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    def split(self, element, restriction):
        return restriction.split(3)


#: a DoFn's restriction parameter (one object, as ruff's B008 asks for argument defaults)
COUNT_UP_TO = beam.DoFn.RestrictionParam(CountUpTo())


class EmitPositions(beam.DoFn):
    """Each claimed position as (name, position), stamped at the position's second."""

    def process(self, element, window=beam.DoFn.WindowParam, tracker=COUNT_UP_TO):
        name, _ = element
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield beam.window.TimestampedValue((name, position, str(window)), window.start + position)
            position += 1


class EmitTwoAtATime(beam.DoFn):
    """Claims two positions, then checkpoints itself: the runner resumes the rest."""

    def process(self, element, tracker=COUNT_UP_TO):
        name, _ = element
        restriction = tracker.current_restriction()
        for position in range(restriction.start, min(restriction.start + 2, restriction.stop)):
            if not tracker.try_claim(position):
                return
            yield name, position
        if restriction.start + 2 < restriction.stop:
            tracker.defer_remainder()


class WordsTracker(beam.io.iobase.RestrictionTracker):
    """A tracker of the user's own over a (start, stop) pair of word indices."""

    def __init__(self, restriction):
        self.start, self.stop = restriction
        self.claimed = self.start - 1

    def current_restriction(self):
        return (self.start, self.stop)

    def try_claim(self, position):
        if position >= self.stop:
            return False
        self.claimed = position
        return True

    def try_split(self, fraction_of_remainder):
        split_at = self.claimed + 1 + int((self.stop - self.claimed - 1) * fraction_of_remainder)
        if split_at >= self.stop:
            return None
        primary, residual = (self.start, split_at), (split_at, self.stop)
        self.stop = split_at
        return primary, residual

    def check_done(self):
        if self.claimed != self.stop - 1 and self.start < self.stop:
            msg = f"words {self.claimed + 1}..{self.stop} were not claimed"
            raise ValueError(msg)

    def current_progress(self):
        done = self.claimed + 1 - self.start
        return beam.io.iobase.RestrictionProgress(completed=done, remaining=self.stop - self.start - done)

    def is_bounded(self):
        return True


class Words(beam.RestrictionProvider):
    def initial_restriction(self, line):
        return (0, len(line.split()))

    def create_tracker(self, restriction):
        return WordsTracker(restriction)

    def restriction_size(self, line, restriction):
        return restriction[1] - restriction[0]

    def split(self, line, restriction):
        start, stop = restriction
        middle = (start + stop) // 2
        return [(start, middle), (middle, stop)] if start < middle < stop else [restriction]


WORDS = beam.DoFn.RestrictionParam(Words())


class SplitWords(beam.DoFn):
    """Each word of a line, with the line's side-input suffix, a word at a time."""

    def process(self, line, suffix, tracker=WORDS):
        words = line.split()
        start, _ = tracker.current_restriction()
        position = start
        while tracker.try_claim(position):
            yield words[position] + suffix
            position += 1
            if position - start == 1:
                tracker.defer_remainder(beam.utils.timestamp.Duration(micros=1000))
                return


def offsets_in_windows(ns, p):
    return (
        p
        | ns.beam.Create([("a", 7), ("b", 4), ("c", 0)])
        | ns.beam.Map(lambda kv: ns.TimestampedValue(kv, 20 if kv[0] == "b" else 5))
        | ns.beam.WindowInto(ns.window.FixedWindows(10))
        | ns.beam.ParDo(EmitPositions())
        | ns.beam.Map(lambda row: (row[0], row[1]))
        | ns.beam.CombinePerKey(sum)
    )


@pytest.mark.spark
def test_an_offset_range_sdf_split_in_parts_gives_beams_output(spark):
    assert_runners_agree(offsets_in_windows, state_partitions=2)


@pytest.mark.spark
def test_a_self_checkpointing_sdf_resumes_until_its_restriction_is_done(spark):
    def build(ns, p):
        return p | ns.beam.Create([("x", 5), ("y", 1), ("z", 8)]) | ns.beam.ParDo(EmitTwoAtATime())

    assert_runners_agree(build, state_partitions=2)


@pytest.mark.spark
def test_a_custom_tracker_with_a_side_input_and_a_timed_checkpoint(spark):
    def build(ns, p):
        suffix = p | "Suffix" >> ns.beam.Create(["!"])
        lines = p | "Lines" >> ns.beam.Create(["to be or not", "to be", ""])
        return lines | ns.beam.ParDo(SplitWords(), ns.pvalue.AsSingleton(suffix))

    assert_runners_agree(build, state_partitions=2)


@pytest.mark.spark
@pytest.mark.parametrize("path", ["ReadFromText", "SDFBoundedSourceReader"])
def test_text_of_several_files_read_whole_or_through_beams_splittable_dofn(spark, tmp_path, path):
    # ReadFromText is translated whole (split before the run); Beam's own splittable DoFn
    # for bounded sources runs as any splittable DoFn does.
    for index in range(3):
        (tmp_path / f"part-{index}.txt").write_text("".join(f"{index}:{line}\n" for line in range(40)))
    pattern = str(tmp_path / "part-*.txt")

    def build(ns, p):
        if path == "ReadFromText":
            lines = p | ns.beam.io.ReadFromText(pattern)
        else:
            source = ns.beam.io.ReadFromText(pattern)._source
            lines = p | ns.beam.Impulse() | ns.beam.Map(lambda _: source) | ns.beam.io.iobase.SDFBoundedSourceReader()
        return lines | ns.beam.Map(lambda line: line.split(":")[0]) | ns.beam.combiners.Count.PerElement()

    assert_runners_agree(build, state_partitions=2)


def _lowered(build):
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=sparkbeam.SparkRunner"]))
    build(pipeline)
    return translate(pipeline)


def test_a_splittable_pardo_is_split_redistributed_and_processed_under_its_label():
    lowered = _lowered(lambda p: p | beam.Create([("a", 3)]) | "Emit" >> beam.ParDo(EmitPositions()))
    labels = [op.label for op in lowered.ops]
    assert labels[-6:] == [
        "Emit/SplitRestrictions",
        "Emit/Redistribute/Scatter",
        "Emit/Redistribute/InGlobalWindow",
        "Emit/Redistribute/Group",
        "Emit/Redistribute/Gather",
        "Emit",
    ]
    assert isinstance(lowered.ops[-1], BeamSplittableParDoOp)


class Forever(beam.DoFn):
    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=COUNT_UP_TO):
        yield from ()


def test_an_unbounded_splittable_dofn_is_refused_in_a_stream_naming_the_transform():
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=sparkbeam.SparkRunner", "--streaming"]))
    _ = pipeline | beam.Create([("a", 3)]) | "Endless" >> beam.ParDo(Forever())
    with pytest.raises(UnsupportedError, match=r"'Endless' .*unbounded splittable DoFn"):
        translate(pipeline, streaming=True)


def test_a_periodic_impulse_without_a_stop_is_refused_and_with_one_is_translated():
    with pytest.raises(UnsupportedError, match=r"'Ticks/GenSequence' .*never ends"):
        _lowered(lambda p: p | "Ticks" >> PeriodicImpulse(start_timestamp=0, fire_interval=1))
    lowered = _lowered(lambda p: p | "Ticks" >> PeriodicImpulse(start_timestamp=0, stop_timestamp=3, fire_interval=1))
    assert any(op.label == "Ticks/GenSequence" and isinstance(op, BeamSplittableParDoOp) for op in lowered.ops)


@pytest.mark.parametrize("rebase", [RebaseMode.REBASE_NONE, RebaseMode.REBASE_START])
def test_a_periodic_impulse_without_a_stop_is_refused_after_beams_round_trip_too(rebase):
    # TestPipeline's runner-API round trip leaves no PeriodicImpulse, only its parts.
    def round_tripped(stop):
        pipeline = beam.Pipeline(options=PipelineOptions(["--runner=sparkbeam.SparkRunner"]))
        _ = pipeline | "Ticks" >> PeriodicImpulse(start_timestamp=0, stop_timestamp=stop, fire_interval=1, rebase=rebase)
        return beam.Pipeline.from_runner_api(pipeline.to_runner_api(), pipeline.runner, pipeline._options)

    with pytest.raises(UnsupportedError, match=r"'Ticks/GenSequence' .*never ends"):
        translate(round_tripped(MAX_TIMESTAMP))
    lowered = translate(round_tripped(3))
    assert any(op.label == "Ticks/GenSequence" and isinstance(op, BeamSplittableParDoOp) for op in lowered.ops)
