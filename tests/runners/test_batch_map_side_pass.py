"""The batch grouping's map side run in the same pass as the upstream stage's fused body
(runners/spark/batch_grouping.py ``UpstreamBody``, ``MapSideTable.add_stamped``), without
Spark: a re-stamping Map into fixed windows fills the pre-combine table with no element
built, the step names and the flushes stay those of the separate passes, and the Spark
backend hands a grouping the body it alone reads.
"""

from __future__ import annotations

import pytest

from sparkbeam.metrics.execution import current_step, enter_step, leave_step
from sparkbeam.runners.core.elements.metrics import step_scoped
from sparkbeam.runners.core.grouping.holds import HoldPolicy
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.spark import batch_grouping
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import FixedWindows, IntervalWindow, TimestampCombiner, TimestampedValue
from tests.core.grouping_harness import CountingAccumulator, S, SumFn, sum_op


def _stamp_window_combine(combine_fn, stamp=lambda kv: TimestampedValue(kv, kv[1])):
    """``Create | Map(re-stamp) | WindowInto(FixedWindows(10)) | CombinePerKey`` planned:
    the upstream stage, the PCollection entering its body, and the grouping op."""
    import sparkbeam as beam
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages

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
    from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS
    from sparkbeam.utils.timestamp import MIN_TIMESTAMP

    return [WindowedValue(value, MIN_TIMESTAMP.micros, GLOBAL_WINDOWS) for value in values]


def _count_built_elements(monkeypatch) -> list:
    from sparkbeam.runners.core.elements import dofn_invoker, fast_paths

    built: list = []

    def counting(fields):
        built.append(fields)
        return WindowedValue(*fields)

    monkeypatch.setattr(dofn_invoker, "new_windowed_value", counting)
    monkeypatch.setattr(fast_paths, "new_windowed_value", counting)
    monkeypatch.setattr(batch_grouping, "new_windowed_value", counting)
    return built


def test_a_restamping_map_into_fixed_windows_fills_the_map_side_table_with_no_element_built(monkeypatch):
    from sparkbeam.runners.spark import worker

    upstream, source, op = _stamp_window_combine(SumFn())
    values = [("a", 1), ("b", 2), ("a", 3), ("a", 14), ("b", 15)]
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    built = _count_built_elements(monkeypatch)
    body_counters, counter = (CountingAccumulator(), CountingAccumulator()), CountingAccumulator()
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    fused = list(batch_grouping._precombine_body(upstream, None, body_counters, source, op, holder, holds, counter, False, _unwindowed(values)))
    assert built == []
    assert [body_counters[0].total, body_counters[1].total, counter.total] == [5, 5, 5]
    # The same records as the body's elements, built, then combined in a pass of their own.
    elements = worker.run_bare_body(upstream, None, None, source, _unwindowed(values))
    apart = list(batch_grouping._precombine(op, holder, holds, CountingAccumulator(), elements))
    assert len(built) == 5
    # Given as values alone (a text file's lines), not even the body's input is built.
    by_value = list(batch_grouping._precombine_body(upstream, None, None, source, op, holder, holds, CountingAccumulator(), True, values))
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
            seen.append(("combine", current_step()))
            return accumulator + element

    def stamp(kv):
        seen.append(("map", current_step()))
        return TimestampedValue(kv, kv[1])

    upstream, source, op = _stamp_window_combine(_Recording(), stamp)
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    caller = enter_step("outer")
    list(batch_grouping._precombine_body(upstream, None, None, source, op, holder, holds, CountingAccumulator(), True, [("a", 1), ("a", 2)]))
    assert seen == [("map", "Stamp"), ("combine", "Sum/Precombine")] * 2
    assert current_step() == "outer"
    leave_step(caller)


@pytest.mark.parametrize(
    ("value", "combiner", "windows"),
    [
        ("not a pair", TimestampCombiner.OUTPUT_AT_EOW, 1),
        (("a", 1), TimestampCombiner.OUTPUT_AT_EARLIEST, 1),  # holds read timestamps
        (("a", 1), TimestampCombiner.OUTPUT_AT_EOW, 2),
    ],
)
def test_what_the_stamped_path_does_not_take_goes_through_the_general_loop(value, combiner, windows):
    op = sum_op(SumFn(), combiner)
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


def test_a_keyed_stamped_adder_takes_pairs_of_its_key_type_alone_and_hands_on_the_rest():
    holder = batch_grouping._SetUpOnce(step_scoped(SumFn(), "Sum"))
    op = sum_op(SumFn())
    table = batch_grouping.MapSideTable(op, holder, HoldPolicy(op.windowing, overlapping_window_rule=True))
    others: list = []
    add = table.keyed_stamped_adder(str, lambda *parts: others.append(parts))
    window = (IntervalWindow(0, 10),)
    for value, windows in [(("a", 1), window), ((7, 2), window), ("no pair", window), (("a", 3), (IntervalWindow(0, 10), IntervalWindow(10, 20)))]:
        add(value, 1 * S, windows)
    assert table.drain() == [(("a", (0, 10 * S)), (1, None))]
    assert [parts[0] for parts in others] == [(7, 2), "no pair", ("a", 3)]
    # Holds that read timestamps: the table takes no parts at all.
    earliest = sum_op(SumFn(), TimestampCombiner.OUTPUT_AT_EARLIEST)
    reading = batch_grouping.MapSideTable(earliest, holder, HoldPolicy(earliest.windowing, overlapping_window_rule=True))
    assert reading.keyed_stamped_adder(str, print) is None


def test_a_full_table_flushes_from_the_stamped_path_too(monkeypatch):
    monkeypatch.setattr(batch_grouping, "MAX_TABLE_ENTRIES", 2)
    op = sum_op(SumFn())
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
    import sparkbeam as beam
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.lowering.settings import RunMode
    from sparkbeam.runners.core.lowering.step_values import StepParams
    from sparkbeam.runners.core.lowering.strategies import Strategy
    from sparkbeam.runners.core.plan.physical import plan_physical
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.runners.spark import element_stages
    from sparkbeam.runners.spark.backend import SPARK, SparkBackend
    from sparkbeam.runners.spark.datasets import Dataset, StageRun, step_facts
    from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

    class _Rdd:
        """Records nothing; stands in for every RDD the backend derives (no Spark)."""

        def persist(self, storageLevel=None):  # the backend names its level (backend.KEPT)
            return self

        def mapPartitions(self, function, preservesPartitioning=False):
            return self

        def setName(self, name):
            return self

    pipeline = beam.Pipeline()
    beam.capture(pipeline | beam.Create([("a", 1)]) | "Sum" >> beam.CombinePerKey(SumFn()))
    physical = plan_physical(plan_stages(lower(pipeline)), RunMode.BATCH, SPARK.capabilities(lazy=True))
    upstream, grouping = physical.stages
    assert (upstream.strategy, upstream.map_side_into) == (Strategy.MAP_SIDE_PASS, grouping.id)
    assert (grouping.strategy, grouping.map_side_of) == (Strategy.BATCH_COMBINE, upstream.id)
    backend = object.__new__(SparkBackend)
    backend.step_cache = []
    backend.sc = type("Context", (), {"accumulator": lambda self, value: CountingAccumulator()})()
    backend.num_partitions, backend.overlapping_window_rule = 2, True
    monkeypatch.setattr(SparkBackend, "channel", lambda self: None)
    params = StepParams(0, MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros, MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros, True)

    def run_of(planned, inputs):
        return StageRun(planned, inputs, params, {}, None, step_facts(planned, inputs, params))

    (head_output,) = upstream.stage.head.outputs
    (alone,) = element_stages.map_side_pass(backend, run_of(upstream, {head_output: Dataset(_Rdd())})).outputs.values()
    assert alone.upstream is not None and alone.upstream.pcoll == head_output
    # The same stage as a fused map (its output read by another reader too) runs apart.
    (apart,) = element_stages.fused_map(backend, run_of(upstream, {head_output: Dataset(_Rdd())})).outputs.values()
    assert apart.upstream is None
    handed = []
    monkeypatch.setattr(batch_grouping, "group", lambda *args: handed.append(args[-1]) or _Rdd())
    (pcoll,) = upstream.stage.outputs
    element_stages.batch_combine(backend, run_of(grouping, {pcoll: alone}))
    assert handed == [alone.upstream]


class _StepRecordingSumFn(SumFn):
    """A SumFn that notes the metrics step each ``add_input`` runs in."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def add_input(self, accumulator, element):
        self.steps.append(current_step())
        return super().add_input(accumulator, element)


def test_the_stamped_path_names_the_combine_step_and_restores_the_callers():
    import threading

    combine_fn = _StepRecordingSumFn()
    op = sum_op(combine_fn)
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    table = batch_grouping.MapSideTable(op, holder, holds)
    after: list[str] = []

    def add_in_a_fresh_thread() -> None:
        # A thread that never named a step: it reads the default before and after.
        table.add_stamped(("a", 1), 1 * S, (IntervalWindow(0, 10),))
        after.append(current_step())

    worker = threading.Thread(target=add_in_a_fresh_thread)
    worker.start()
    worker.join()
    outer = enter_step("Stamp")
    try:
        table.add_stamped(("a", 2), 2 * S, (IntervalWindow(0, 10),))
        table.add_stamped(("b", 3), 3 * S, (IntervalWindow(0, 10),))
        assert current_step() == "Stamp"
    finally:
        leave_step(outer)
    assert after == [""]
    assert combine_fn.steps == ["Sum/Precombine"] * 3
    assert table.seen == 3
    assert table.drain() == [(("a", (0, 10 * S)), (3, None)), (("b", (0, 10 * S)), (3, None))]
