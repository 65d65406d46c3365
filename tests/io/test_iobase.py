"""iobase: Read(BoundedSource) split into bundles, one Spark partition each, compared with
apache_beam reading the same source; range trackers as Beam's; Write(Sink)."""

from __future__ import annotations

import collections
import itertools
import os

import attrs
import pytest
from apache_beam.io import iobase as beam_iobase
from apache_beam.io import range_trackers as beam_trackers

import sparkbeam as beam
from sparkbeam.io import iobase, range_trackers
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN
from sparkbeam.window import GlobalWindow
from tests.oracle import assert_same_as_beam


class _NumbersLogic:
    """0..count-1 (each 8 bytes), split at multiples of the desired size; ``fixed_bundles``
    splits into that many bundles whatever size is asked for."""

    trackers = None

    def __init__(self, count, fixed_bundles=None, stamped=False):
        self.count = count
        self.fixed_bundles = fixed_bundles
        self.stamped = stamped

    def estimate_size(self):
        return self.count * 8

    def get_range_tracker(self, start, stop):
        return self.trackers.OffsetRangeTracker(0 if start is None else start, self.count if stop is None else stop)

    def split(self, desired_bundle_size, start_position=None, stop_position=None):
        start = 0 if start_position is None else start_position
        stop = self.count if stop_position is None else stop_position
        step = -(-(stop - start) // self.fixed_bundles) if self.fixed_bundles else max(1, desired_bundle_size // 8)
        for low in range(start, stop, step):
            high = min(stop, low + step)
            yield self.bundle_type(high - low, self, low, high)

    def read(self, tracker):
        position = tracker.start_position()
        while tracker.try_claim(position):
            yield self.timestamped(position, position) if self.stamped else position
            position += 1


class BeamNumbers(_NumbersLogic, beam_iobase.BoundedSource):
    trackers = beam_trackers
    bundle_type = beam_iobase.SourceBundle

    @staticmethod
    def timestamped(value, seconds):
        from apache_beam.transforms.window import TimestampedValue

        return TimestampedValue(value, seconds)


class OurNumbers(_NumbersLogic, iobase.BoundedSource):
    trackers = range_trackers
    bundle_type = iobase.SourceBundle

    @staticmethod
    def timestamped(value, seconds):
        from sparkbeam.window import TimestampedValue

        return TimestampedValue(value, seconds)


def numbers(ns, *args, **kwargs):
    return (BeamNumbers if ns.beam.__name__ == "apache_beam" else OurNumbers)(*args, **kwargs)


def test_read_of_a_bounded_source_as_beam_reads_it(spark):
    assert_same_as_beam(lambda ns, p: p | ns.beam.io.Read(numbers(ns, 200)) | ns.beam.Map(lambda x: x * x))


def test_timestamps_a_source_yields_are_kept_as_in_beam(spark):
    def build(ns, p):
        return (
            p
            | ns.beam.io.Read(numbers(ns, 40, stamped=True))
            | ns.beam.WindowInto(ns.window.FixedWindows(10))
            | ns.beam.Map(lambda x: ("k", x))
            | ns.beam.CombinePerKey(sum)
        )

    assert_same_as_beam(build)


def _partition_of(value):
    from pyspark import TaskContext

    return TaskContext.get().partitionId(), value


def test_each_bundle_is_one_spark_partition(spark):
    p = beam.Pipeline()
    tagged = beam.capture(p | beam.io.Read(OurNumbers(50, fixed_bundles=5)) | beam.Map(_partition_of))
    by_partition = collections.defaultdict(list)
    for element in p.run().emissions(tagged):
        partition, value = element.value
        by_partition[partition].append(value)
    assert sorted(sorted(values) for values in by_partition.values()) == [list(range(low, low + 10)) for low in range(0, 50, 10)]


def test_the_desired_bundle_size_follows_the_sessions_parallelism(spark):
    parallelism = spark.sparkContext.defaultParallelism
    source = OurNumbers(100)
    assert iobase.desired_bundle_size(source, parallelism) == -(-800 // parallelism)
    assert len(iobase.split_source(source, parallelism, "here")) == parallelism
    p = beam.Pipeline()
    tagged = beam.capture(p | beam.io.Read(source) | beam.Map(_partition_of))
    partitions = {element.value[0] for element in p.run().emissions(tagged)}
    assert len(partitions) == parallelism


def test_the_engine_alone_reads_a_source_in_bundles_too():
    p = beam.Pipeline()
    out = beam.capture(p | "ReadNumbers" >> beam.io.Read(OurNumbers(25)))
    assert sorted(e.value for e in run_in_memory(p).emissions(out)) == list(range(25))


class Failing(OurNumbers):
    def read(self, tracker):
        yield from super().read(tracker)
        msg = "the disk is on fire"
        raise OSError(msg)


@pytest.mark.parametrize("backend", ["memory", "spark"])
def test_a_failing_read_names_the_transform(request, backend):
    p = beam.Pipeline()
    beam.capture(p | "ReadBroken" >> beam.io.Read(Failing(4)))
    with pytest.raises(OSError, match="the disk is on fire") as failure:
        if backend == "spark":
            request.getfixturevalue("spark")
            p.run()
        else:
            run_in_memory(p)
    assert "ReadBroken" in "\n".join(getattr(failure.value, "__notes__", [])) + str(failure.value)


class PlainNumbers(OurNumbers):
    yields_plain_values = True


class StampedAtLast(OurNumbers):
    """Plain values, then one TimestampedValue a few chunks in."""

    def read(self, tracker):
        from sparkbeam.window import TimestampedValue

        for value in super().read(tracker):
            yield TimestampedValue(value, 5) if value == 600 else value


def test_a_sources_records_are_elements_in_the_global_window_and_keep_the_times_it_gives():
    bundle = iobase.SourceBundle(1, StampedAtLast(700), 0, 700)  # chunks of plain values, one not
    elements = list(iobase.read_bundle(bundle))
    assert [wv.value for wv in elements] == list(range(700))
    assert {(wv.timestamp_micros, wv.windows, wv.pane_info) for wv in elements if wv.value != 600} == {
        (MIN_TIMESTAMP.micros, (GlobalWindow(),), PANE_INFO_UNKNOWN)
    }
    assert elements[600].timestamp_micros == 5_000_000


def test_a_source_of_plain_values_is_read_as_its_values_and_one_that_is_not_fails_naming_it():
    plain = iobase.SourceBundle(1, PlainNumbers(600), 0, 600)
    values = iobase.read_bundle_values(plain)
    assert type(values) is itertools.chain  # handed on from lists, with no Python frame per value
    assert list(values) == list(range(600)) == [wv.value for wv in iobase.read_bundle(plain)]

    class Lying(StampedAtLast):
        yields_plain_values = True

    lying = iobase.SourceBundle(1, Lying(700), 0, 700)
    for read in (iobase.read_bundle_values, iobase.read_bundle):  # on every backend
        with pytest.raises(TypeError, match=r"Lying says it yields plain values.*TimestampedValue"):
            list(read(lying))


def test_spark_reads_a_source_of_plain_values_as_its_values_too(spark):
    from sparkbeam.runners.core.lowering.ops import BoundedSourceReadOp
    from sparkbeam.runners.spark.bounded_reads import read_bounded_source

    op = BoundedSourceReadOp(label="ReadPlain", location="here", inputs=(), outputs=(), source=PlainNumbers(30, fixed_bundles=3))
    elements, empty, values = read_bounded_source(spark.sparkContext, op)
    assert not empty
    assert sorted(values.collect()) == list(range(30))  # what a stage taking values reads
    assert sorted((wv.value, wv.timestamp_micros) for wv in elements.collect()) == [(v, MIN_TIMESTAMP.micros) for v in range(30)]
    assert read_bounded_source(spark.sparkContext, attrs.evolve(op, source=OurNumbers(30)))[2] is None


def test_what_read_cannot_read_is_refused_at_construction():
    class Endless(iobase.SourceBase):
        def is_bounded(self):
            return False

    with pytest.raises(NotImplementedError, match="unbounded source"):
        beam.io.Read(Endless())
    with pytest.raises(TypeError, match="BoundedSource"):
        beam.io.Read([1, 2, 3])
    p = beam.Pipeline()
    out = beam.capture(p | beam.io.Read(beam.Create([1, 2])))  # a transform in place of a source
    assert sorted(e.value for e in run_in_memory(p).emissions(out)) == [1, 2]


def test_beams_snippets_import_iobase_at_module_level():
    import sparkbeam.io.iobase as imported

    assert beam.io.iobase is imported
    assert imported.BoundedSource is iobase.BoundedSource and beam.io.Read is iobase.Read
    with pytest.raises(NotImplementedError, match="RestrictionTracker"):
        imported.RestrictionTracker  # noqa: B018


# -- range trackers, step by step beside Beam's ---------------------------------------------


def _drive(module, tracker_args, steps):
    tracker = module.OffsetRangeTracker(*tracker_args)
    out = []
    for method, *args in steps:
        try:
            result = getattr(tracker, method)(*args)
        except ValueError as error:
            result = ("ValueError", type(error).__name__)
        out.append(result)
    consumed, remaining = tracker.split_points()
    unknown = module.OffsetRangeTracker.SPLIT_POINTS_UNKNOWN
    out.append((tracker.start_position(), tracker.stop_position(), tracker.fraction_consumed(), consumed, remaining is unknown))
    return out


OFFSET_SCRIPTS = [
    ((0, 10), [("try_claim", 0), ("try_claim", 3), ("try_split", 5), ("try_claim", 4), ("try_claim", 5), ("try_claim", 6)]),
    ((0, 10), [("try_split", 5), ("try_claim", 2), ("try_split", 2), ("try_split", 11), ("position_at_fraction", 0.5)]),
    ((5, 5), [("try_claim", 5)]),
    ((0, 10), [("set_current_position", 1)]),
    ((0, 10), [("try_claim", 2), ("set_current_position", 3), ("try_claim", 2), ("try_claim", 9), ("try_claim", 10)]),
]


@pytest.mark.parametrize(("args", "steps"), OFFSET_SCRIPTS)
def test_offset_range_tracker_answers_as_beams(args, steps):
    assert _drive(range_trackers, args, steps) == _drive(beam_trackers, args, steps)


@pytest.mark.parametrize(
    ("start", "end"), [(b"", b""), (b"a", b"b"), (b"abc", b"abd"), (b"\x00\x01", b"\xff"), ("a", "z"), (b"a", None)]
)
def test_lexicographic_key_fractions_are_beams(start, end):
    ours, theirs = range_trackers.LexicographicKeyRangeTracker, beam_trackers.LexicographicKeyRangeTracker
    for fraction in (0, 0.001, 0.25, 0.5, 0.999, 1):
        if end is None and fraction == 1:
            continue
        position = theirs.fraction_to_position(fraction, start or None, end or None)
        assert ours.fraction_to_position(fraction, start or None, end or None) == position
        if position:
            assert ours.position_to_fraction(position, start or None, end or None) == theirs.position_to_fraction(position, start or None, end or None)


def test_unsplittable_and_ordered_trackers():
    tracker = range_trackers.UnsplittableRangeTracker(range_trackers.OffsetRangeTracker(0, 4))
    assert tracker.try_claim(0) and tracker.try_split(2) is None and tracker.split_points() == (0, 1)
    keys = range_trackers.LexicographicKeyRangeTracker(b"a", b"c")
    assert keys.try_claim(b"a") and keys.try_split(b"b") == (b"b", 0.5) and not keys.try_claim(b"b")
    with pytest.raises(ValueError, match="claimed in order"):
        keys.try_claim(b"0")


# -- Write(Sink) --------------------------------------------------------------------------------


class _LinesSinkLogic:
    """Each writer writes its elements to ``folder/<uid>``; finalize lists the files."""

    def __init__(self, folder, num_shards=0):
        self.folder = folder
        self.num_shards = num_shards

    def initialize_write(self):
        os.makedirs(self.folder, exist_ok=True)
        return self.folder

    def open_writer(self, init_result, uid):
        return self.writer_type(os.path.join(init_result, uid))

    def pre_finalize(self, init_result, writer_results):
        return [len(list(writer_results))]  # an iterable of one, as Beam's protocol has it

    def finalize_write(self, init_result, writer_results, pre_finalize_result):
        names = sorted(writer_results)
        assert len(names) == pre_finalize_result or self.num_shards  # Beam pads shards after pre_finalize
        yield from names


class _LinesWriterLogic:
    def __init__(self, path):
        self.path = path
        self.lines = []

    def write(self, value):
        self.lines.append(str(value))

    def close(self):
        with open(self.path, "w") as handle:
            handle.write("".join(line + "\n" for line in self.lines))
        return self.path


class BeamLinesWriter(_LinesWriterLogic, beam_iobase.Writer):
    pass


class OurLinesWriter(_LinesWriterLogic, iobase.Writer):
    pass


class BeamLinesSink(_LinesSinkLogic, beam_iobase.Sink):
    writer_type = BeamLinesWriter


class OurLinesSink(_LinesSinkLogic, iobase.Sink):
    writer_type = OurLinesWriter


@pytest.mark.parametrize("num_shards", [0, 3])
def test_write_to_a_sink_writes_what_beam_writes(spark, tmp_path, num_shards):
    def build(ns, p):
        side = "beam" if ns.beam.__name__ == "apache_beam" else "ours"
        sink = (BeamLinesSink if side == "beam" else OurLinesSink)(str(tmp_path / side), num_shards)
        return p | ns.beam.Create(list(range(30))) | ns.beam.io.Write(sink) | ns.beam.Map(lambda path: os.path.basename(os.path.dirname(path)))

    # Beam stamps the outputs MAX_TIMESTAMP, sparkbeam the global window's last moment: values only.
    from tests.oracle import run_beam, run_sparkbeam

    theirs = collections.Counter(value for value, *_ in run_beam(build).elements())
    ours = collections.Counter(value for value, *_ in run_sparkbeam(build).elements())
    assert set(theirs) == {"beam"} and set(ours) == {"ours"}
    if num_shards:  # one file per shard on both; per bundle otherwise, and bundles differ between runners
        assert theirs["beam"] == ours["ours"] == num_shards
    contents = {
        side: sorted(line for name in os.listdir(tmp_path / side) for line in (tmp_path / side / name).read_text().split())
        for side in ("beam", "ours")
    }
    assert contents["beam"] == contents["ours"] == sorted(str(i) for i in range(30))
