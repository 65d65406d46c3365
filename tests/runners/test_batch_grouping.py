"""The batch grouping's own map side (runners/spark/batch_grouping.py), without Spark.

The Spark runs are in test_batch_oracle.py; these check that the cheap path is the one
taken: compact (key, start, end) shuffle keys, one partial per key and window, no element
copied to take its key off, a bounded table whose early flushes the merge absorbs.
"""

from __future__ import annotations

import pytest

from sparkbeam.metrics.execution import current_step, enter_step, leave_step
from sparkbeam.runners.core.elements.metrics import step_scoped
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.grouping.records import group_key, window_of_group_key
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.spark import batch_grouping
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import (
    GlobalWindow,
    IntervalWindow,
    TimestampCombiner,
)
from tests.core.grouping_harness import CountingAccumulator, S, SumFn, sum_op


class _CountingWindow(IntervalWindow):
    """An interval window subclass that counts how often it is hashed (kept as an object)."""

    hashes = 0

    def __hash__(self) -> int:
        type(self).hashes += 1
        return super().__hash__()


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
    counter = CountingAccumulator()
    return list(batch_grouping._precombine(op, holder, holds, counter, elements)), counter, holder, holds


def test_the_map_side_yields_one_partial_per_key_and_window_under_compact_keys():
    elements = _elements()
    partials, counter, _, _ = _precombined(sum_op(SumFn()), elements)
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
    partials, _, _, _ = _precombined(sum_op(SumFn(), TimestampCombiner.OUTPUT_AT_EARLIEST), _elements())
    assert dict(partials)[("a", (0, 10 * S))] == (4, 1 * S)
    partials, _, _, _ = _precombined(sum_op(SumFn(), TimestampCombiner.OUTPUT_AT_LATEST), _elements())
    assert dict(partials)[("a", (10 * S, 20 * S))] == (9, 15 * S)


def test_the_map_side_leaves_nothing_for_the_cyclic_garbage_collector_to_track():
    import gc

    partials, _, _, _ = _precombined(sum_op(SumFn()), _elements())
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
    partials, _, _, _ = _precombined(sum_op(SumFn()), elements)
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
    op = sum_op(SumFn())
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
    op = sum_op(None)
    partials, _, _, _ = _precombined(op, _elements())
    # Values, not groups, fill a GroupByKey's table: flushed after three values.
    assert [accumulator for _, (accumulator, _) in partials] == [[1, 3], [2], [4, 5]]


def test_the_precombine_step_is_set_once_and_restored():
    seen = []

    class _Recording(SumFn):
        def add_input(self, accumulator, element):
            seen.append(current_step())
            return accumulator + element

    caller = enter_step("outer")
    _precombined(sum_op(_Recording()), _elements())
    assert set(seen) == {"Sum/Precombine"}
    assert current_step() == "outer"
    leave_step(caller)


def test_an_element_that_is_not_a_pair_is_refused_naming_the_transform():
    with pytest.raises(UserCodeError, match=r"'Sum'.*groups \(key, value\) pairs"):
        _precombined(sum_op(SumFn()), [WindowedValue("oops", 0, (IntervalWindow(0, 10),))])


def test_add_input_returning_none_is_refused_naming_the_transform():
    class _Forgetful(SumFn):
        def add_input(self, accumulator, element):
            return None

    with pytest.raises(UserCodeError, match="add_input returned None"):
        _precombined(sum_op(_Forgetful()), _elements())


def _count_copies(monkeypatch) -> list:
    """Every WindowedValue the grouping modules build, recorded."""
    from sparkbeam.runners.core.grouping import grouping_step

    made: list = []

    def counting(*args):
        made.append(args)
        return WindowedValue(*args)

    monkeypatch.setattr(grouping_step, "WindowedValue", counting)
    monkeypatch.setattr(batch_grouping, "WindowedValue", counting)
    return made


def test_the_map_side_never_copies_an_element(monkeypatch):
    made = _count_copies(monkeypatch)
    _precombined(sum_op(SumFn()), _elements())
    assert made == []


def test_the_copy_counter_sees_a_copy(monkeypatch):
    # The check above can fail: taking the key off with key_element copies the element.
    from sparkbeam.runners.core.grouping.grouping_step import key_element

    made = _count_copies(monkeypatch)
    key_element(sum_op(SumFn()), _elements()[0])
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

    batch_grouping.group(_FakeRdd(), sum_op(SumFn()), 2, True, CountingAccumulator(), None)
    assert _FakeRdd.partitioned_by == [batch_grouping.compact_key_hash]


def test_panes_of_a_window_share_one_windows_tuple_and_are_built_whole():
    op = sum_op(SumFn())
    partials, _, holder, holds = _precombined(op, _elements())
    merged = batch_grouping._merge_partials(op, holder, holds, 64, partials)
    panes = list(batch_grouping._panes(op, holder, holds, merged))
    first = [wv for wv in panes if wv.windows == (IntervalWindow(0, 10),)]
    assert sorted(wv.value for wv in first) == [("a", 4), ("b", 2)]
    # One tuple per window: pickled for the driver once per batch, held once there.
    assert first[0].windows is first[1].windows
    assert all(type(wv) is WindowedValue for wv in panes)


def test_a_window_subclass_keeps_its_own_windows_tuple():
    op = sum_op(SumFn())
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

    from sparkbeam.runners.core.elements.gc_pause import gc_paused

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
    from sparkbeam.runners.core.elements.metrics import StepScopedCombineFn

    seen = []
    wrapped = []

    class _Recording(SumFn):
        def extract_output(self, accumulator):
            seen.append(current_step())
            return accumulator

    monkeypatch.setattr(StepScopedCombineFn, "_in", lambda self, *args: wrapped.append(args) or args[1](*args[2:]))
    op = sum_op(_Recording())
    partials, _, holder, holds = _precombined(op, _elements())
    merged = list(batch_grouping._merge_partials(op, holder, holds, 64, partials))
    wrapped.clear()
    caller = enter_step("outer")
    steps_while_yielded = [current_step() for _ in batch_grouping._panes(op, holder, holds, merged)]
    assert seen == ["Sum/ExtractOutputs"] * 3 and wrapped == []
    # Between panes the step is the consumer's (the stage's body runs in its own).
    assert steps_while_yielded == ["outer"] * 3 and current_step() == "outer"
    leave_step(caller)


def test_the_merge_after_the_shuffle_runs_with_the_gc_paused():
    import gc

    paused = []

    class _Recording(SumFn):
        def merge_accumulators(self, accumulators):
            paused.append(not gc.isenabled())
            return super().merge_accumulators(accumulators)

    op = sum_op(_Recording())
    partials, _, holder, holds = _precombined(op, _elements())
    panes = list(batch_grouping._merge_partials(op, holder, holds, 64, partials + partials))
    assert sorted(accumulator for _, (accumulator, _) in panes) == [4, 8, 18]
    assert paused == [True] * 3 and gc.isenabled()
