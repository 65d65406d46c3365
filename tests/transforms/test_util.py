"""Beam's utility transforms against Beam: every transform in ``util`` as an oracle pair.

Branches of one pipeline are tagged with the transform's name and flattened (one pipeline
per windowing, since Flatten needs one window fn), so a failure lists the differing
outputs by transform. Batching within a bundle depends on how the input is split, so those
transforms are compared through the elements they batch and checked for their bounds.
"""

from __future__ import annotations

import itertools
import re

import pytest

import sparkbeam
from sparkbeam.transforms import util
from sparkbeam.transforms._batching import _BatchSizer
from tests.oracle import assert_same_as_beam

pytestmark = pytest.mark.spark

KEYED = [("a", 1), ("b", 2), ("a", 3), ("c", None), (None, 4), ("a", 1)]
# (key, value, event time in seconds), across two fixed windows of 60 s.
STAMPED = [("a", 1, 5.0), ("b", 2, 65.0), ("a", 3, 30.0), ("a", 4, 70.0), ("c", 5, 119.0), ("b", 6, 61.0), ("a", 1, 5.0)]


def tag(ns, name, pcoll):
    return pcoll | f"Tag[{name}]" >> ns.beam.Map(lambda value, name=name: (name, value))


def stamped(ns, p, rows=STAMPED):
    return p | "Stamped" >> ns.beam.Create(rows) | "Time" >> ns.beam.Map(lambda e: ns.TimestampedValue((e[0], e[1]), e[2]))


def plain(value):
    """Timestamps, windows and TimestampedValues of either SDK as plain tuples."""
    kind = type(value).__name__
    if kind == "Timestamp":
        return ("ts", value.micros)
    if kind == "GlobalWindow":
        return ("window", "global")
    if kind == "IntervalWindow":
        return ("window", value.start.micros, value.end.micros)
    if kind == "TimestampedValue":
        return ("tv", plain(value.value), value.timestamp.micros)
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


# -- element-wise -------------------------------------------------------------------------------


def test_keys_values_swap_with_keys_and_to_string(spark):
    def build(ns, p):
        beam = ns.beam
        keyed = p | "Keyed" >> beam.Create(KEYED)
        words = p | "Words" >> beam.Create(["fig", "apple", None])
        lengths = p | "Lengths" >> beam.Create([(3, "short"), (5, "long")])
        branches = [
            tag(ns, "Keys", keyed | beam.Keys()),
            tag(ns, "Values", keyed | beam.Values()),
            tag(ns, "KvSwap", keyed | beam.KvSwap()),
            tag(ns, "WithKeysConstant", words | "Constant" >> beam.WithKeys("k")),
            tag(ns, "WithKeysNone", words | "NoneKey" >> beam.WithKeys(None)),
            tag(ns, "WithKeysFn", words | "Fn" >> beam.WithKeys(lambda w: w[0] if w else "?")),
            tag(ns, "WithKeysArgs", words | "Args" >> beam.WithKeys(lambda w, n, suffix="": str(w)[:n] + suffix, 2, suffix="!")),
            tag(ns, "WithKeysSide", words | "Side" >> beam.WithKeys(lambda w, names: names.get(len(w or ""), "none"), ns.pvalue.AsDict(lengths))),
            tag(ns, "Element", keyed | beam.ToString.Element()),
            tag(ns, "Kvs", keyed | "Kvs" >> beam.ToString.Kvs()),
            tag(ns, "KvsDelimiter", keyed | "KvsDelimiter" >> beam.ToString.Kvs("\t")),
            tag(ns, "KvsEmptyDelimiter", keyed | "KvsEmpty" >> beam.ToString.Kvs("")),
            tag(ns, "Iterables", p | "Lists" >> beam.Create([[1, 2, 3], [], ["x"]]) | beam.ToString.Iterables(";")),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build)


def test_regex(spark):
    def build(ns, p):
        beam, Regex = ns.beam, ns.beam.Regex
        lines = p | beam.Create(["aj", "xj", "yj zj", "b", "key1=v1 key2=v2", "", "a  b"])
        compiled = re.compile(r"(?P<letter>[xyz])j")
        branches = [
            tag(ns, "matches", lines | "m" >> Regex.matches("[a-z]j")),
            tag(ns, "matchesGroup", lines | "mg" >> Regex.matches("([a-z])j", group=1)),
            tag(ns, "matchesName", lines | "mn" >> Regex.matches(compiled, group="letter")),
            tag(ns, "matchesWhole", lines | "mw" >> Regex.matches("[a-z]j$")),
            tag(ns, "allMatches", lines | "am" >> Regex.all_matches(r"(\w+)=(\w+)")),
            tag(ns, "matchesKv", lines | "mkv" >> Regex.matches_kv(r"(\w+)=(\w+)", 1, 2)),
            tag(ns, "find", lines | "f" >> Regex.find("[xyz]")),
            tag(ns, "findName", lines | "fn" >> Regex.find(compiled, group="letter")),
            tag(ns, "findAll", lines | "fa" >> Regex.find_all(r"\w*")),
            tag(ns, "findAllNoEmpty", lines | "fae" >> Regex.find_all(r"\w*", outputEmpty=False)),
            tag(ns, "findAllGroups", lines | "fag" >> Regex.find_all(r"(\w+)=\w+", group=Regex.ALL)),
            tag(ns, "findKv", lines | "fkv" >> Regex.find_kv(r"(\w+)=(\w+)", 1, 2)),
            tag(ns, "replaceAll", lines | "ra" >> Regex.replace_all(r"(\w+)=(\w+)", r"\2:\1")),
            tag(ns, "replaceFirst", lines | "rf" >> Regex.replace_first("j", "J")),
            tag(ns, "split", lines | "s" >> Regex.split(" ")),
            tag(ns, "splitEmpty", lines | "se" >> Regex.split(" ", outputEmpty=True)),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build)


def test_flatmap_and_filter_accept_any_iterable_and_any_truth_value(spark):
    def build(ns, p):
        beam = ns.beam
        words = p | beam.Create(["ab", "", "c"])
        branches = [
            tag(ns, "generator", words | "gen" >> beam.FlatMap(lambda w: (ch for ch in w))),
            tag(ns, "string", words | "str" >> beam.FlatMap(lambda w: w)),
            tag(ns, "set", words | "set" >> beam.FlatMap(lambda w: set(w))),
            tag(ns, "tuple", words | "tuple" >> beam.FlatMap(lambda w: (w, len(w)))),
            tag(ns, "dict", words | "dict" >> beam.FlatMap(lambda w: {w: 1})),
            tag(ns, "range", words | "range" >> beam.FlatMap(lambda w: range(len(w)))),
            tag(ns, "none", words | "none" >> beam.FlatMap(lambda w: None)),
            tag(ns, "identity", p | "Lists" >> beam.Create([[1, 2], [], (3,)]) | "flatten" >> beam.FlatMap()),
            tag(ns, "filterTruthy", words | "truthy" >> beam.Filter(lambda w: w)),
            tag(ns, "filterLength", words | "length" >> beam.Filter(len)),
            tag(ns, "filterArgs", words | "args" >> beam.Filter(lambda w, bad: w not in bad, ["c"])),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build)


def test_reify_log_elements_tee_and_wait_on(spark):
    def build(ns, p):
        beam = ns.beam
        windowed = stamped(ns, p) | beam.WindowInto(ns.window.FixedWindows(60))
        values = windowed | "Values" >> beam.Values()
        branches = [
            tag(ns, "Timestamp", values | beam.Reify.Timestamp()),
            tag(ns, "Window", values | beam.Reify.Window() | "PlainW" >> beam.Map(plain)),
            tag(ns, "TimestampInValue", windowed | beam.Reify.TimestampInValue() | "PlainTV" >> beam.Map(plain)),
            tag(ns, "WindowInValue", windowed | beam.Reify.WindowInValue() | "PlainWV" >> beam.Map(plain)),
            tag(ns, "LogElements", values | beam.LogElements(prefix="seen ", with_timestamp=True, with_window=True, level=10)),
            tag(ns, "Tee", values | beam.Tee(beam.Map(str), lambda pc: pc | "Double" >> beam.Map(lambda v: 2 * v))),
            tag(ns, "WaitOn", values | beam.WaitOn(windowed | "Signal" >> beam.Map(str))),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build)


# -- grouping ----------------------------------------------------------------------------------


class ByParity:
    """A PartitionFn with a side input, built on either SDK's PartitionFn."""

    @staticmethod
    def make(ns):
        class Parity(ns.beam.PartitionFn):
            def partition_for(self, element, num_partitions, offset):
                return (element + offset) % num_partitions

        return Parity()


def tags_by_repr(element):
    # Tags of mixed types (333 next to "keyed") cannot be sorted to compare; their reprs can.
    key, grouped = element
    return (key, [(repr(tag), values) for tag, values in grouped.items()])


def test_grouping_in_the_global_window(spark):
    def build(ns, p):
        beam = ns.beam
        keyed = p | "Keyed" >> beam.Create(KEYED)
        other = p | "Other" >> beam.Create([("a", "x"), ("d", "y"), (None, "z")])
        empty = p | "Empty" >> beam.Create([])
        numbers = p | "Numbers" >> beam.Create(range(10))
        offset = p | "Offset" >> beam.Create([1])
        by_fn = numbers | "ByFn" >> beam.Partition(lambda n, count: n % count, 3)
        by_class = numbers | "ByClass" >> beam.Partition(ByParity.make(ns), 2, ns.pvalue.AsSingleton(offset))
        unused = numbers | "Unused" >> beam.Partition(lambda n, count: 0, 3)
        branches = [
            tag(ns, "CoGroupDict", {"keyed": keyed, "other": other, 333: empty} | "CoGroupDict" >> beam.CoGroupByKey() | "ByRepr1" >> beam.Map(tags_by_repr)),
            tag(ns, "CoGroupTupleKeys", {("t", 1): keyed, "o": other} | "CoGroupTupleKeys" >> beam.CoGroupByKey() | "ByRepr2" >> beam.Map(tags_by_repr)),
            tag(ns, "CoGroupTuple", (keyed, other) | "CoGroupTuple" >> beam.CoGroupByKey()),
            tag(ns, "CoGroupList", [other] | "CoGroupList" >> beam.CoGroupByKey()),
            tag(ns, "CoGroupEmpty", (empty, empty) | "CoGroupEmpty" >> beam.CoGroupByKey()),
            tag(ns, "Distinct", keyed | "Distinct" >> beam.Distinct()),
            tag(ns, "DistinctNone", p | "Nones" >> beam.Create([None, 1, None]) | "DistinctNone" >> beam.Distinct()),
            tag(ns, "RemoveDuplicates", keyed | beam.RemoveDuplicates()),
            tag(ns, "Reshuffle", keyed | "Reshuffle" >> beam.Reshuffle(num_buckets=2)),
            tag(ns, "ReshufflePerKey", keyed | ns.util.ReshufflePerKey()),
            tag(ns, "Partition0", by_fn[0]),
            tag(ns, "Partition2", by_fn[2]),
            tag(ns, "PartitionSide1", by_class[1]),
            tag(ns, "PartitionEmpty", unused[2]),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build)


def test_grouping_in_fixed_windows(spark):
    def build(ns, p):
        beam = ns.beam
        windowed = stamped(ns, p) | beam.WindowInto(ns.window.FixedWindows(60))
        swapped = windowed | "Swap" >> beam.KvSwap()
        evens, odds = windowed | "Values" >> beam.Values() | beam.Partition(lambda v, n: v % n, 2)
        branches = [
            tag(ns, "CoGroupByKey", {"kv": windowed, "vk": swapped} | beam.CoGroupByKey()),
            tag(ns, "Distinct", windowed | beam.Distinct()),
            tag(ns, "Reshuffle", windowed | beam.Reshuffle()),
            tag(ns, "ReshuffleThenGroup", windowed | "Again" >> beam.Reshuffle() | beam.GroupByKey()),
            tag(ns, "GroupIntoBatches", windowed | beam.GroupIntoBatches(2) | "Sizes" >> beam.MapTuple(lambda k, b: (k, len(b)))),
            tag(ns, "Evens", evens),
            tag(ns, "Odds", odds),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build)


def test_reshuffle_keeps_sliding_windows_and_session_merging(spark):
    def build(ns, p):
        beam = ns.beam
        sliding = stamped(ns, p) | beam.WindowInto(ns.window.SlidingWindows(60, 30)) | beam.Reshuffle()
        return sliding | beam.GroupByKey()

    assert_same_as_beam(build)

    def build_sessions(ns, p):
        beam = ns.beam
        sessions = stamped(ns, p) | beam.WindowInto(ns.window.Sessions(30)) | beam.Reshuffle()
        return sessions | beam.GroupByKey()

    assert_same_as_beam(build_sessions)


def test_reshuffle_in_a_stream_does_not_wait_for_the_end_of_the_global_window(spark):
    # Streaming runs every stage once per step, so this pipeline is kept small.
    def build(ns, p):
        beam, tv = ns.beam, ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv(("a", 3), 1), tv(("b", 5), 2), tv(("a", 2), 12)])
            .advance_watermark_to(10)
            .add_elements([tv(("b", 1), 14)])
            .advance_watermark_to_infinity()
        )
        return p | stream | beam.WindowInto(ns.window.FixedWindows(10)) | beam.Reshuffle() | beam.GroupByKey()

    assert_same_as_beam(build, streaming=True)


def test_group_into_batches_stamps_as_beam(spark):
    # Each key's values share one timestamp, so which value closes a batch does not matter.
    rows = [("a", i, 10.0) for i in range(5)] + [("b", 9, 70.0), ("c", 1, 80.0), ("c", 2, 80.0)]

    def build_windowed(ns, p):
        return stamped(ns, p, rows) | ns.beam.WindowInto(ns.window.FixedWindows(60)) | ns.beam.GroupIntoBatches(2)

    assert_same_as_beam(build_windowed)

    # A hot key and keys with fewer values than a batch. (Beam's stateful version cannot
    # key its timers by None, and fails when fused with much else: a pipeline of its own.)
    def build_global(ns, p):
        beam = ns.beam
        hot = p | "Hot" >> beam.Create([("hot", i) for i in range(23)] + [("cold", 0)])
        keyed = p | "Keyed" >> beam.Create([kv for kv in KEYED if kv[0] is not None])
        branches = [
            tag(ns, "Hot", hot | "Batches" >> beam.GroupIntoBatches(10) | "Sizes" >> beam.MapTuple(lambda k, b: (k, len(b)))),
            tag(ns, "Few", keyed | "BatchesAll" >> beam.GroupIntoBatches(5)),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build_global)


# -- batching within a bundle ---------------------------------------------------------------------


def test_batch_elements_and_sort_and_batch_elements(spark):
    # Batch boundaries depend on bundles; compare what was batched and check the bounds.
    words = ["x" * (i % 7 + 1) for i in range(40)]

    def build(ns, p):
        beam = ns.beam
        numbers = p | "Numbers" >> beam.Create(range(35))
        texts = p | "Texts" >> beam.Create(words)
        fixed = numbers | "Stamp" >> beam.Map(lambda n: ns.TimestampedValue(n, n)) | beam.WindowInto(ns.window.FixedWindows(10))
        batched = numbers | "Batch" >> beam.BatchElements(min_batch_size=3, max_batch_size=4)
        sized = texts | "Sized" >> beam.BatchElements(min_batch_size=2, max_batch_size=8, element_size_fn=len)
        sorted_batches = texts | "SortAndBatch" >> beam.SortAndBatchElements(1, 5, 12)
        windowed_batches = fixed | "WindowedBatch" >> beam.BatchElements(2, 2)
        branches = [
            tag(ns, "Batched", batched | "Flat1" >> beam.FlatMap(lambda b: b)),
            # The number of batches depends on bundles: only violations are compared (none).
            tag(ns, "BatchTooLarge", batched | "Bad1" >> beam.Filter(lambda b: not 1 <= len(b) <= 4)),
            tag(ns, "Sized", sized | "Flat2" >> beam.FlatMap(lambda b: b)),
            tag(ns, "SizedTooLarge", sized | "Bad2" >> beam.Filter(lambda b: len(b) > 1 and sum(map(len, b)) > 8)),
            tag(ns, "SortedBatches", sorted_batches | "Flat3" >> beam.FlatMap(lambda b: b)),
            tag(ns, "SortedBadly", sorted_batches | "Bad3" >> beam.Filter(lambda b: b != sorted(b, key=len) or len(b) > 5 or (len(b) > 1 and sum(map(len, b)) >= 12))),
            tag(ns, "Windowed", windowed_batches | "Flat4" >> beam.FlatMap(lambda b: b) | "Rewindow" >> beam.WindowInto(ns.window.GlobalWindows())),
        ]
        return branches | beam.Flatten()

    assert_same_as_beam(build)

    def build_windowed(ns, p):
        beam = ns.beam
        fixed = p | beam.Create(range(30)) | "Stamp" >> beam.Map(lambda n: ns.TimestampedValue(n, n)) | beam.WindowInto(ns.window.FixedWindows(10))
        return fixed | beam.SortAndBatchElements(1, 100, 1000) | beam.FlatMap(lambda b: b)

    assert_same_as_beam(build_windowed)


def test_batch_sizer_grows_to_the_largest_size_the_targets_allow():
    clock = itertools.count().__next__  # one "second" per reading: cost = 1 s per batch
    sizer = _BatchSizer(1, 50, 0.05, 10, None, 0, clock)
    sizes = []
    for _ in range(9):
        size = sizer.next_size()
        sizes.append(size)
        with sizer.timing(size):
            pass
    assert sizes[:3] == [1, 2, 4]
    assert sizes == sorted(sizes) and sizes[-1] == 50
    assert _BatchSizer(7, 7, 0.05, 10, None, 0, clock).next_size() == 7


def test_reshuffle_spreads_elements(spark):
    p = sparkbeam.Pipeline()
    out = sparkbeam.capture(p | sparkbeam.Create(range(200)) | sparkbeam.Reshuffle() | sparkbeam.Map(lambda x: x))
    result = p.run()
    assert sorted(e.value for e in result.emissions(out)) == list(range(200))


def test_reshuffle_in_a_stream_keeps_no_key_state_after_its_step(spark):
    """Every element gets a key of its own: none may stay in the keyed state once its pane
    fired, while the stream goes on (not only when the global window ends)."""
    from sparkbeam.options.pipeline_options import PipelineOptions
    from sparkbeam.testing.test_stream import TestStream

    stream = TestStream()
    for batch in range(4):
        stream = stream.add_elements([sparkbeam.TimestampedValue(f"e{batch}-{i}", batch * 10 + i) for i in range(6)])
        stream = stream.advance_watermark_to(batch * 10 + 9)
    p = sparkbeam.Pipeline(options=PipelineOptions(streaming=True))
    out = sparkbeam.capture(p | stream | "Spread" >> sparkbeam.Reshuffle())
    result = p.run()
    assert sorted(e.value for e in result.emissions(out)) == sorted(f"e{b}-{i}" for b in range(4) for i in range(6))
    records = result.watermarks().for_stage("Spread/ReshufflePerKey/GroupByKey")
    assert sum(r.elements_in for r in records) == 24
    # elements came in steps long before the end of the global window ...
    assert [r.step for r in records if r.elements_in] and all(
        r.input_watermark < 40_000_000 for r in records if r.elements_in
    )
    # ... and after every step no key was left in the grouping's state
    assert [r.state_keys for r in records] == [0] * len(records)


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("partition_fn", "shown"),
    [(lambda x, n: 5, "returned 5"), (lambda x, n: -1, "returned -1"), (lambda x, n: True, "returned True"), (lambda x, n: "0", "returned '0'")],
    ids=["too-large", "negative", "bool", "str"],
)
def test_a_partition_out_of_range_names_the_transform_and_the_element(spark, partition_fn, shown):
    p = sparkbeam.Pipeline()
    p | sparkbeam.Create(["elem"]) | "Split" >> sparkbeam.Partition(partition_fn, 2)
    with pytest.raises(ValueError, match=rf"Partition 'Split' .*{re.escape(shown)} for the element 'elem'.*\[0, 2\)") as error:
        p.run()
    assert "test_util.py" in str(error.value)


def test_bad_arguments_are_refused_when_the_transform_is_built():
    with pytest.raises(ValueError, match="positive int"):
        sparkbeam.Partition(lambda x, n: 0, 0)
    with pytest.raises(TypeError, match="PartitionFn instance"):
        sparkbeam.Partition(sparkbeam.PartitionFn, 2)
    with pytest.raises(ValueError, match="num_buckets"):
        sparkbeam.Reshuffle(num_buckets=0)
    with pytest.raises(ValueError, match="batch_size"):
        sparkbeam.GroupIntoBatches(0)
    with pytest.raises(ValueError, match="min_batch_size"):
        sparkbeam.BatchElements(min_batch_size=5, max_batch_size=2)
    with pytest.raises(ValueError, match="min_batch_size must be >= 1"):
        sparkbeam.SortAndBatchElements(0, 10, 100)
    with pytest.raises(ValueError, match="needs the pipeline"):
        {} | sparkbeam.CoGroupByKey()
    p = sparkbeam.Pipeline()
    with pytest.raises(TypeError, match=r"expects \(key, value\) pairs|dict or a tuple"):
        p | sparkbeam.Create([1]) | sparkbeam.CoGroupByKey()


def test_empty_co_group_by_key_with_the_pipeline_gives_nothing(spark):
    p = sparkbeam.Pipeline()
    out = sparkbeam.capture({} | sparkbeam.CoGroupByKey(pipeline=p))
    assert list(p.run().emissions(out)) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: util.GroupByEncryptedKey(None),
        lambda: util.Secret(),
        lambda: util.GcpSecret("projects/x/secrets/y"),
        lambda: util.GcpHsmGeneratedSecret("p", "l", "r", "k", "j"),
    ],
    ids=["GroupByEncryptedKey", "Secret", "GcpSecret", "GcpHsmGeneratedSecret"],
)
def test_what_is_not_built_says_so_by_name(make):
    with pytest.raises(NotImplementedError, match=r"GroupByEncryptedKey|Secret"):
        make()


def test_util_names_are_where_beam_has_them():
    import apache_beam
    from apache_beam.transforms import util as beam_util

    for name in beam_util.__all__:
        if name in util.__all__:
            if hasattr(apache_beam, name):
                assert hasattr(sparkbeam, name), name
            continue
        # The rest say they are not supported, where Beam has them (sparkbeam.beam_surface).
        with pytest.raises(NotImplementedError, match=name):
            getattr(util, name)
        if hasattr(apache_beam, name):
            with pytest.raises(NotImplementedError, match=name):
                getattr(sparkbeam, name)
    assert sparkbeam.Partition is sparkbeam.transforms.Partition
    assert sparkbeam.transforms.util is util
