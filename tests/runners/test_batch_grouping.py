"""The batch grouping's own map side (runners/spark/batch_grouping.py), without Spark.

The Spark runs are in test_batch_oracle.py; these check that the cheap path is the one
taken: compact (key, start, end) shuffle keys, one partial per key and window, no element
copied to take its key off, a bounded table whose early flushes the merge absorbs.
"""

from __future__ import annotations

import pytest

from sparkbeam.metrics.execution import _CURRENT
from sparkbeam.runners.core.errors import UserCodeError
from sparkbeam.runners.core.holds import HoldPolicy
from sparkbeam.runners.core.metrics import step_scoped
from sparkbeam.runners.core.ops import GroupOp
from sparkbeam.runners.core.records import group_key, window_of_group_key
from sparkbeam.runners.spark import batch_grouping
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import (
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    TimestampCombiner,
    TimestampedValue,
)
from sparkbeam.windowing import Windowing
from tests.core.grouping_harness import SumFn

S = 1_000_000


class _Counter:
    def __init__(self) -> None:
        self.total = 0

    def add(self, amount: int) -> None:
        self.total += amount


class _CountingWindow(IntervalWindow):
    """An interval window subclass that counts how often it is hashed (kept as an object)."""

    hashes = 0

    def __hash__(self) -> int:
        type(self).hashes += 1
        return super().__hash__()


def _op(combine_fn=None, combiner=TimestampCombiner.OUTPUT_AT_EOW) -> GroupOp:
    windowing = Windowing(FixedWindows(10), timestamp_combiner=combiner)
    return GroupOp(label="Sum", location="here.py:1", inputs=(1,), outputs=(2,), windowing=windowing, combine_fn=combine_fn)


def _elements():
    first, second = IntervalWindow(0, 10), IntervalWindow(10, 20)
    return [
        WindowedValue(("a", 1), 1 * S, (first,)),
        WindowedValue(("b", 2), 2 * S, (first,)),
        WindowedValue(("a", 3), 3 * S, (first,)),
        WindowedValue(("a", 4), 12 * S, (second,)),
        WindowedValue(("a", 5), 15 * S, (second,)),
    ]


def _precombined(op, elements, combiner=TimestampCombiner.OUTPUT_AT_EOW):
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label) if op.combine_fn else batch_grouping._ListCombineFn())
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    counter = _Counter()
    return list(batch_grouping._precombine(op, holder, holds, counter, elements)), counter, holder, holds


def test_the_map_side_yields_one_partial_per_key_and_window_under_compact_keys():
    elements = _elements()
    partials, counter, _, _ = _precombined(_op(SumFn()), elements)
    # END_OF_WINDOW holds need no timestamps: the pane takes the window's end (below).
    assert sorted(partials) == [
        (("a", (0, 10 * S)), (4, None)),
        (("a", (10 * S, 20 * S)), (9, None)),
        (("b", (0, 10 * S)), (2, None)),
    ]
    # Every shuffle key hashes in C: strings and integers only, no window objects; and
    # the bounds are the window's own tuple, which pickle writes once per batch.
    assert {(type(key), type(bounds)) for (key, bounds), _ in partials} == {(str, tuple)}
    first_window = elements[0].windows[0]
    assert all(bounds is first_window._bounds for (_, bounds), _ in partials if bounds[0] == 0)
    assert counter.total == 5


def test_holds_follow_the_timestamp_combiner_per_element():
    partials, _, _, _ = _precombined(_op(SumFn(), TimestampCombiner.OUTPUT_AT_EARLIEST), _elements())
    assert dict(partials)[("a", (0, 10 * S))] == (4, 1 * S)
    partials, _, _, _ = _precombined(_op(SumFn(), TimestampCombiner.OUTPUT_AT_LATEST), _elements())
    assert dict(partials)[("a", (10 * S, 20 * S))] == (9, 15 * S)


def test_the_map_side_leaves_nothing_for_the_cyclic_garbage_collector_to_track():
    import gc

    partials, _, _, _ = _precombined(_op(SumFn()), _elements())
    # Tuples of untracked values (strings, ints, None): the collector untracks them as it
    # passes (one level of nesting per pass), so a partition's partials do not pile up in its
    # oldest generation (a list per record would stay tracked there and set off full
    # collections of the worker's heap).
    for _ in range(3):
        gc.collect()
    assert not any(gc.is_tracked(record) for record in partials)


def test_a_window_that_is_not_a_plain_interval_window_stays_an_object_in_the_key():
    window = _CountingWindow(0, 10)
    elements = [WindowedValue(("a", n), n * S, (window,)) for n in range(4)]
    partials, _, _, _ = _precombined(_op(SumFn()), elements)
    assert partials == [(("a", window), (6, None))]
    assert group_key("a", GlobalWindow()) == ("a", GlobalWindow())
    assert window_of_group_key(("a", window), {}) is window


def test_compact_keys_give_back_each_window_once_per_partition():
    cache: dict = {}
    first = window_of_group_key(group_key("a", IntervalWindow(0, 10)), cache)
    again = window_of_group_key(group_key("b", IntervalWindow(0, 10)), cache)
    assert first == IntervalWindow(0, 10)
    assert again is first


def test_a_full_table_flushes_early_and_the_merge_absorbs_it(monkeypatch):
    monkeypatch.setattr(batch_grouping, "MAX_TABLE_ENTRIES", 2)
    op = _op(SumFn())
    partials, _, holder, holds = _precombined(op, _elements())
    # Three (key, window) groups through a table flushed at two: ("a", [0, 10)) and
    # ("a", [10, 20)) each cross the shuffle twice.
    assert len(partials) == 5
    merged = batch_grouping._merge_partials(op, holder, holds, 64, partials)
    panes = list(batch_grouping._panes(op, holder, holds, merged))
    assert sorted((wv.value, wv.windows, wv.timestamp_micros) for wv in panes) == [
        (("a", 4), (IntervalWindow(0, 10),), 10 * S - 1),
        (("a", 9), (IntervalWindow(10, 20),), 20 * S - 1),
        (("b", 2), (IntervalWindow(0, 10),), 10 * S - 1),
    ]


def test_a_group_by_key_table_counts_its_buffered_values(monkeypatch):
    monkeypatch.setattr(batch_grouping, "MAX_TABLE_ENTRIES", 3)
    op = _op(None)
    partials, _, _, _ = _precombined(op, _elements())
    # Values, not groups, fill a GroupByKey's table: flushed after three values.
    assert [accumulator for _, (accumulator, _) in partials] == [[1, 3], [2], [4, 5]]


def test_the_precombine_step_is_set_once_and_restored():
    seen = []

    class _Recording(SumFn):
        def add_input(self, accumulator, element):
            seen.append(_CURRENT.step)
            return accumulator + element

    _CURRENT.step = "outer"
    _precombined(_op(_Recording()), _elements())
    assert set(seen) == {"Sum/Precombine"}
    assert _CURRENT.step == "outer"


def test_an_element_that_is_not_a_pair_is_refused_naming_the_transform():
    with pytest.raises(UserCodeError, match=r"'Sum'.*groups \(key, value\) pairs"):
        _precombined(_op(SumFn()), [WindowedValue("oops", 0, (IntervalWindow(0, 10),))])


def test_add_input_returning_none_is_refused_naming_the_transform():
    class _Forgetful(SumFn):
        def add_input(self, accumulator, element):
            return None

    with pytest.raises(UserCodeError, match="add_input returned None"):
        _precombined(_op(_Forgetful()), _elements())


def _count_copies(monkeypatch) -> list:
    """Every WindowedValue the grouping modules build, recorded."""
    from sparkbeam.runners.core import grouping_step

    made: list = []

    def counting(*args):
        made.append(args)
        return WindowedValue(*args)

    monkeypatch.setattr(grouping_step, "WindowedValue", counting)
    monkeypatch.setattr(batch_grouping, "WindowedValue", counting)
    return made


def test_the_map_side_never_copies_an_element(monkeypatch):
    made = _count_copies(monkeypatch)
    _precombined(_op(SumFn()), _elements())
    assert made == []


def test_the_copy_counter_sees_a_copy(monkeypatch):
    # The check above can fail: taking the key off with key_element copies the element.
    from sparkbeam.runners.core.grouping_step import key_element

    made = _count_copies(monkeypatch)
    key_element(_op(SumFn()), _elements()[0])
    assert len(made) == 1


def test_elements_go_to_the_driver_as_plain_tuples_and_come_back_whole():
    import pickle

    from sparkbeam.runners.spark.stage_records import as_plain_tuples as _as_plain_tuples
    from sparkbeam.utils.windowed_value import new_windowed_value

    elements = _elements()
    sent = pickle.dumps(list(_as_plain_tuples(elements)))
    # No WindowedValue on the wire: pickle wrote plain tuples, in C.
    assert b"WindowedValue" not in sent
    back = [new_windowed_value(fields) for fields in pickle.loads(sent)]
    assert back == elements
    assert all(type(wv) is WindowedValue for wv in back)


def test_compact_keys_of_str_or_int_keys_and_interval_windows_hash_in_one_call(monkeypatch):
    calls = []

    def counting_portable_hash(value):
        calls.append(value)
        return 0

    monkeypatch.setattr(batch_grouping, "_HASH_SEEDED", True)
    monkeypatch.setattr(batch_grouping, "portable_hash", counting_portable_hash)
    for key in ("a", 7, b"b"):
        compact = group_key(key, IntervalWindow(0, 10))
        assert batch_grouping.compact_key_hash(compact) == hash(compact)
    assert calls == []
    # None (hashed by address before Python 3.12), tuples and windows kept as objects go to
    # PySpark's portable_hash, as does everything when no hash seed is set.
    for compact in ((None, (0, 10)), (("a", 1), (0, 10)), ("a", GlobalWindow())):
        batch_grouping.compact_key_hash(compact)
    monkeypatch.setattr(batch_grouping, "_HASH_SEEDED", False)
    batch_grouping.compact_key_hash(("a", (0, 10)))
    assert len(calls) == 4


def test_the_shuffle_is_partitioned_by_the_compact_key_hash():
    class _Conf:
        def get(self, name, default):
            return default

    class _FakeRdd:
        """Records what batch_grouping.group asks of an RDD (no Spark)."""

        partitioned_by: list = []
        context = type("Context", (), {"getConf": lambda self: _Conf()})()

        def mapPartitions(self, function, preservesPartitioning=False):
            return self

        def partitionBy(self, num_partitions, partition_fn):
            self.partitioned_by.append(partition_fn)
            return self

    batch_grouping.group(_FakeRdd(), _op(SumFn()), 2, True, _Counter(), None)
    assert _FakeRdd.partitioned_by == [batch_grouping.compact_key_hash]


class _Recorded:
    """Stands in for a Spark accumulator."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, amount: int) -> None:
        self.total += amount


def _stamp_window_combine(combine_fn, stamp=lambda kv: TimestampedValue(kv, kv[1])):
    """``Create | Map(re-stamp) | WindowInto(FixedWindows(10)) | CombinePerKey`` planned:
    the upstream stage, the PCollection entering its body, and the grouping op."""
    import sparkbeam as beam
    from sparkbeam.runners.core.ops import lower
    from sparkbeam.runners.core.plan import plan_stages

    pipeline = beam.Pipeline()
    beam.capture(
        pipeline
        | beam.Create([0])
        | "Stamp" >> beam.Map(stamp)
        | "Tens" >> beam.WindowInto(FixedWindows(10))
        | "Sum" >> beam.CombinePerKey(combine_fn)
    )
    upstream, grouping = plan_stages(lower(pipeline)).stages
    (source,) = upstream.head.outputs
    return upstream, source, grouping.grouping


def _unwindowed(values):
    from sparkbeam.runners.core.window_assignment import GLOBAL_WINDOWS
    from sparkbeam.utils.timestamp import MIN_TIMESTAMP

    return [WindowedValue(value, MIN_TIMESTAMP.micros, GLOBAL_WINDOWS) for value in values]


def _count_built_elements(monkeypatch) -> list:
    from sparkbeam.runners.core import dofn_invoker

    built: list = []

    def counting(fields):
        built.append(fields)
        return WindowedValue(*fields)

    monkeypatch.setattr(dofn_invoker, "new_windowed_value", counting)
    monkeypatch.setattr(batch_grouping, "new_windowed_value", counting)
    return built


def test_a_restamping_map_into_fixed_windows_fills_the_map_side_table_with_no_element_built(monkeypatch):
    from sparkbeam.runners.spark import worker

    upstream, source, op = _stamp_window_combine(SumFn())
    values = [("a", 1), ("b", 2), ("a", 3), ("a", 14), ("b", 15)]
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    built = _count_built_elements(monkeypatch)
    body_counters, counter = (_Recorded(), _Recorded()), _Recorded()
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    fused = list(batch_grouping._precombine_body(upstream, None, body_counters, source, op, holder, holds, counter, False, _unwindowed(values)))
    assert built == []
    assert [body_counters[0].total, body_counters[1].total, counter.total] == [5, 5, 5]
    # The same records as the body's elements, built, then combined in a pass of their own.
    elements = worker.run_bare_body(upstream, None, None, source, _unwindowed(values))
    apart = list(batch_grouping._precombine(op, holder, holds, _Recorded(), elements))
    assert len(built) == 5
    # Given as values alone (a text file's lines), not even the body's input is built.
    by_value = list(batch_grouping._precombine_body(upstream, None, None, source, op, holder, holds, _Recorded(), True, values))
    assert len(built) == 5
    assert sorted(by_value) == sorted(fused) == sorted(apart) == [
        (("a", (0, 10 * S)), (4, None)),
        (("a", (10 * S, 20 * S)), (14, None)),
        (("b", (0, 10 * S)), (2, None)),
        (("b", (10 * S, 20 * S)), (15, None)),
    ]


def test_the_fused_map_side_names_the_combines_step_and_gives_the_map_its_own_back():
    seen = []

    class _Recording(SumFn):
        def add_input(self, accumulator, element):
            seen.append(("combine", _CURRENT.step))
            return accumulator + element

    def stamp(kv):
        seen.append(("map", _CURRENT.step))
        return TimestampedValue(kv, kv[1])

    upstream, source, op = _stamp_window_combine(_Recording(), stamp)
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    _CURRENT.step = "outer"
    list(batch_grouping._precombine_body(upstream, None, None, source, op, holder, holds, _Recorded(), True, [("a", 1), ("a", 2)]))
    assert seen == [("map", "Stamp"), ("combine", "Sum/Precombine")] * 2
    assert _CURRENT.step == "outer"


@pytest.mark.parametrize(
    ("value", "combiner", "windows"),
    [
        ("not a pair", TimestampCombiner.OUTPUT_AT_EOW, 1),
        (("a", 1), TimestampCombiner.OUTPUT_AT_EARLIEST, 1),  # holds read timestamps
        (("a", 1), TimestampCombiner.OUTPUT_AT_EOW, 2),
    ],
)
def test_what_the_stamped_path_does_not_take_goes_through_the_general_loop(value, combiner, windows):
    op = _op(SumFn(), combiner)
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    in_windows = (IntervalWindow(0, 10), IntervalWindow(10, 20))[:windows]
    stamped, general = batch_grouping.MapSideTable(op, holder, holds), batch_grouping.MapSideTable(op, holder, holds)
    outcomes = []
    for add in (lambda: stamped.add_stamped(value, 3 * S, in_windows), lambda: general.add_elements([WindowedValue(value, 3 * S, in_windows)])):
        try:
            add()
            outcomes.append(None)
        except UserCodeError as error:
            outcomes.append(str(error).splitlines()[0])
    assert outcomes[0] == outcomes[1]
    assert stamped.drain() == general.drain()
    assert stamped.seen == general.seen == 1


def test_a_full_table_flushes_from_the_stamped_path_too(monkeypatch):
    monkeypatch.setattr(batch_grouping, "MAX_TABLE_ENTRIES", 2)
    op = _op(SumFn())
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    stamped, general = batch_grouping.MapSideTable(op, holder, holds), batch_grouping.MapSideTable(op, holder, holds)
    pairs = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("c", 5)]
    for key, n in pairs:
        stamped.add_stamped((key, n), n * S, (IntervalWindow(0, 10),))
    general.add_elements([WindowedValue((key, n), n * S, (IntervalWindow(0, 10),)) for key, n in pairs])
    in_window = (0, 10 * S)
    # Flushed as each second group came in; ("c", ...) is still in the table.
    assert stamped.take_flushed() == general.take_flushed() == [
        (("a", in_window), (1, None)),
        (("b", in_window), (2, None)),
        (("a", in_window), (3, None)),
        (("c", in_window), (4, None)),
    ]
    assert stamped.drain() == general.drain() == [(("c", in_window), (5, None))]


def test_the_spark_backend_hands_a_batch_grouping_the_body_it_alone_reads(monkeypatch):
    import attrs

    import sparkbeam as beam
    from sparkbeam.runners.core.ops import lower
    from sparkbeam.runners.core.plan import plan_stages
    from sparkbeam.runners.spark.backend import SparkBackend

    class _Rdd:
        """Records nothing; stands in for every RDD the backend derives (no Spark)."""

        def persist(self):
            return self

        def mapPartitions(self, function, preservesPartitioning=False):
            return self

    pipeline = beam.Pipeline()
    beam.capture(pipeline | beam.Create([("a", 1)]) | "Sum" >> beam.CombinePerKey(SumFn()))
    upstream, grouping = plan_stages(lower(pipeline)).stages
    backend = object.__new__(SparkBackend)
    backend.step_cache = []
    backend.sc = type("Context", (), {"accumulator": lambda self, value: _Counter()})()
    backend.num_partitions, backend.overlapping_window_rule = 2, True
    monkeypatch.setattr(SparkBackend, "_channel", lambda self: None)
    (pcoll,) = upstream.outputs
    body = batch_grouping.UpstreamBody(_Rdd(), upstream, None, None, pcoll)
    (alone,) = backend._bare_output(upstream, _Rdd(), False, frozenset(), body).values()
    assert alone.upstream is body
    # Read by another reader too (a collect counts): the body's output is kept, and run apart.
    shared = attrs.evolve(upstream, shared_outputs=(pcoll,))
    (kept,) = backend._bare_output(shared, _Rdd(), False, frozenset({pcoll}), body).values()
    assert kept.upstream is None
    handed = []
    monkeypatch.setattr(batch_grouping, "group", lambda *args: handed.append(args[-1]) or _Rdd())
    backend._run_batch_grouping(grouping, grouping.grouping, alone, None, frozenset())
    assert handed == [body]


def test_panes_of_a_window_share_one_windows_tuple_and_are_built_whole():
    op = _op(SumFn())
    partials, _, holder, holds = _precombined(op, _elements())
    merged = batch_grouping._merge_partials(op, holder, holds, 64, partials)
    panes = list(batch_grouping._panes(op, holder, holds, merged))
    first = [wv for wv in panes if wv.windows == (IntervalWindow(0, 10),)]
    assert sorted(wv.value for wv in first) == [("a", 4), ("b", 2)]
    # One tuple per window: pickled for the driver once per batch, held once there.
    assert first[0].windows is first[1].windows
    assert all(type(wv) is WindowedValue for wv in panes)


def test_a_window_subclass_keeps_its_own_windows_tuple():
    op = _op(SumFn())
    window = _CountingWindow(0, 10)
    elements = [WindowedValue(("a", 1), 1 * S, (window,)), WindowedValue(("b", 2), 2 * S, (window,))]
    partials, _, holder, holds = _precombined(op, elements)
    merged = batch_grouping._merge_partials(op, holder, holds, 64, partials)
    panes = list(batch_grouping._panes(op, holder, holds, merged))
    assert [wv.windows[0] for wv in panes] == [window, window]
    assert panes[0].windows is not panes[1].windows


def test_the_driver_reads_collected_elements_whole_with_the_gc_paused():
    import gc
    import io

    from pyspark.serializers import AutoBatchedSerializer, CPickleSerializer

    from sparkbeam.runners.spark.stage_records import ElementsToTheDriver, as_plain_tuples

    seen_enabled = []

    class Watching(AutoBatchedSerializer):
        def load_stream(self, stream):
            for item in super().load_stream(stream):
                seen_enabled.append(gc.isenabled())
                yield item

    serializer = ElementsToTheDriver(Watching(CPickleSerializer()))
    stream = io.BytesIO()
    serializer.dump_stream(as_plain_tuples(_elements()), stream)
    stream.seek(0)
    assert gc.isenabled()
    back = list(serializer.load_stream(stream))
    assert back == _elements() and all(type(wv) is WindowedValue for wv in back)
    assert seen_enabled == [False] * len(_elements())
    assert gc.isenabled()


def test_a_gc_pause_nests_and_leaves_a_disabled_gc_disabled():
    import gc

    from sparkbeam.runners.core.gc_pause import gc_paused

    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_panes_extract_in_their_step_without_the_scoped_wrapper(monkeypatch):
    from sparkbeam.runners.core.metrics import StepScopedCombineFn

    seen = []
    wrapped = []

    class _Recording(SumFn):
        def extract_output(self, accumulator):
            seen.append(_CURRENT.step)
            return accumulator

    monkeypatch.setattr(StepScopedCombineFn, "_in", lambda self, *args: wrapped.append(args) or args[1](*args[2:]))
    op = _op(_Recording())
    partials, _, holder, holds = _precombined(op, _elements())
    merged = list(batch_grouping._merge_partials(op, holder, holds, 64, partials))
    wrapped.clear()
    _CURRENT.step = "outer"
    steps_while_yielded = [_CURRENT.step for _ in batch_grouping._panes(op, holder, holds, merged)]
    assert seen == ["Sum/ExtractOutputs"] * 3 and wrapped == []
    # Between panes the step is the consumer's (the stage's body runs in its own).
    assert steps_while_yielded == ["outer"] * 3 and _CURRENT.step == "outer"


def test_the_merge_after_the_shuffle_runs_with_the_gc_paused():
    import gc

    paused = []

    class _Recording(SumFn):
        def merge_accumulators(self, accumulators):
            paused.append(not gc.isenabled())
            return super().merge_accumulators(accumulators)

    op = _op(_Recording())
    partials, _, holder, holds = _precombined(op, _elements())
    panes = list(batch_grouping._merge_partials(op, holder, holds, 64, partials + partials))
    assert sorted(accumulator for _, (accumulator, _) in panes) == [4, 8, 18]
    assert paused == [True] * 3 and gc.isenabled()


class _StepRecordingSumFn(SumFn):
    """A SumFn that notes the metrics step each ``add_input`` runs in."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def add_input(self, accumulator, element):
        self.steps.append(_CURRENT.step)
        return super().add_input(accumulator, element)


def test_the_stamped_path_names_the_combine_step_and_restores_the_callers():
    import threading

    combine_fn = _StepRecordingSumFn()
    op = _op(combine_fn)
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    table = batch_grouping.MapSideTable(op, holder, holds)
    after: list[str] = []

    def add_in_a_fresh_thread() -> None:
        # A thread that never named a step: it reads the default before and after.
        table.add_stamped(("a", 1), 1 * S, (IntervalWindow(0, 10),))
        after.append(_CURRENT.step)

    worker = threading.Thread(target=add_in_a_fresh_thread)
    worker.start()
    worker.join()
    outer = _CURRENT.step
    _CURRENT.step = "Stamp"
    try:
        table.add_stamped(("a", 2), 2 * S, (IntervalWindow(0, 10),))
        table.add_stamped(("b", 3), 3 * S, (IntervalWindow(0, 10),))
        assert _CURRENT.step == "Stamp"
    finally:
        _CURRENT.step = outer
    assert after == [""]
    assert combine_fn.steps == ["Sum/Precombine"] * 3
    assert table.seen == 3
    assert table.drain() == [(("a", (0, 10 * S)), (3, None)), (("b", (0, 10 * S)), (3, None))]
