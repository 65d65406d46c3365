"""Keys and combines of Beam's front end on the engine: a key that is its own encoding
(a ``str``) skips Beam's coder and groups apart from bytes as in Beam; a lifted Beam
``CombineFn`` is called as Beam calls it, with Beam's tracking in place once per task, and
its str-keyed pairs reach the batch map side with no element built. Checked on the engine
alone (no Spark). The plain Maps' lowering is in ``test_plain_lowering.py``."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window as beam_window

import sparkbeam
from sparkbeam.metrics.execution import MetricsContainer, MetricsEnvironment
from sparkbeam.metrics.metricbase import MetricName
from sparkbeam.runners.beam import grouping as beam_grouping
from sparkbeam.runners.beam.grouping import BeamCombineFn, KeyCodec
from sparkbeam.runners.beam.metrics import tracking_for_the_task, tracking_in_place
from tests.beam_frontend.engine import (
    emitted_values,
    op_labelled,
    plan_of,
    run_in_engine,
)


def beam_pipeline(*flags: str) -> beam.Pipeline:
    return beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions(list(flags)))


def test_a_plain_str_key_is_its_own_encoding_and_other_keys_are_encoded():
    codec = KeyCodec("G", beam.coders.FastPrimitivesCoder().as_deterministic_coder("G"))
    encode = codec.encoder()
    element = ("user1", 5)
    assert encode(element) is element  # no copy, no coder call
    assert codec.decode_key(element) is element
    assert encode((b"user1", 5)) == (codec.key_coder.encode(b"user1"), 5)
    assert encode((1, 5)) == (codec.key_coder.encode(1), 5)
    assert codec.decode_key(encode((1, 5))) == (1, 5)
    # A coder of the user's may encode strings its own way: every key is encoded then.
    assert not KeyCodec("G", beam.coders.PickleCoder()).str_keys_pass


def test_a_lifted_combines_str_keyed_pairs_pass_its_encode_key_with_no_call(monkeypatch):
    calls = []
    real = KeyCodec.encoder

    def counted(codec):
        code = real(codec)
        if codec.label != "CombinePerKey(sum)":
            return code  # Create's own Reshuffle
        return lambda element: calls.append(element) or code(element)

    monkeypatch.setattr(KeyCodec, "encoder", counted)
    p = beam_pipeline()
    totals = p | beam.Create([("a", 1), ("a", 2), (b"a", 4), (1, 8)]) | beam.CombinePerKey(sum)
    sparkbeam.capture(totals)
    plan, loop = run_in_engine(p)
    assert op_labelled(plan, "CombinePerKey(sum)/EncodeKey").str_pairs_pass
    assert sorted(emitted_values(plan, loop, totals), key=repr) == [("a", 3), (1, 8), (b"a", 4)]
    assert calls == [(b"a", 4), (1, 8)]  # the str-keyed pairs went on with no call
    assert not KeyCodec("G", beam.coders.StrUtf8Coder(), beam.coders.StrUtf8Coder()).str_pairs_pass  # values to encode


def test_str_keys_group_apart_from_bytes_and_other_keys_as_in_beam():
    p = beam_pipeline()
    grouped = (
        p
        | beam.Create([("1", "str"), (b"1", "bytes"), (1, "int"), ("1", "str again"), (True, "bool")])
        | beam.GroupByKey()
        | beam.MapTuple(lambda key, values: (repr(key), sorted(values)))
    )
    totals = p | "Pairs" >> beam.Create([("a", 1), ("a", 2), (b"a", 4)]) | beam.CombinePerKey(sum)
    sparkbeam.capture(grouped)
    sparkbeam.capture(totals)
    plan, loop = run_in_engine(p)
    assert sorted(emitted_values(plan, loop, grouped)) == [("'1'", ["str", "str again"]), ("1", ["int"]), ("True", ["bool"]), ("b'1'", ["bytes"])]
    assert sorted(emitted_values(plan, loop, totals), key=repr) == [("a", 3), (b"a", 4)]


class Counting(beam.CombineFn):
    """A sum that counts its accumulators and inputs in Beam's metrics."""

    def create_accumulator(self):
        Metrics.counter("combine", "created").inc()
        return 0

    def add_input(self, total, x):
        Metrics.counter("combine", "added").inc()
        return total + x

    def merge_accumulators(self, totals):
        return sum(totals)

    def extract_output(self, total):
        Metrics.counter("combine", "extracted").inc()
        return total


def test_a_lifted_beam_combine_fn_is_called_as_it_is_where_the_tasks_tracking_is_in_place(monkeypatch):
    wrapped = []
    real = beam_grouping.beam_metrics
    monkeypatch.setattr(beam_grouping, "beam_metrics", lambda call, *args: wrapped.append(call) or real(call, *args))
    fn = BeamCombineFn(Counting())
    container = MetricsContainer()
    with MetricsEnvironment.container_scope(container), MetricsEnvironment.step_scope("Sum"):
        assert fn.add_input(0, 1) == 1 and len(wrapped) == 1  # no tracking: Beam's tracker set for the call
        assert fn.create_accumulator() == 0 and len(wrapped) == 2
        stop = tracking_for_the_task()
        try:
            assert fn.add_input(1, 2) == 3 and len(wrapped) == 2  # tracking in place: a plain call
            assert fn.create_accumulator() == 0 and len(wrapped) == 2
        finally:
            stop()
    assert container.counters == {("Sum", MetricName("combine", "added")): 2, ("Sum", MetricName("combine", "created")): 2}


def test_a_batch_grouping_calls_a_beam_combine_fn_itself_with_beams_tracking_set_once(monkeypatch):
    from sparkbeam.runners.core.elements.metrics import step_scoped
    from sparkbeam.runners.core.grouping.holds import HoldPolicy
    from sparkbeam.runners.spark import batch_grouping
    from sparkbeam.utils.windowed_value import WindowedValue
    from sparkbeam.window import IntervalWindow
    from tests.core.grouping_harness import CountingAccumulator, sum_op

    wrapper_calls = []
    for name in ("add_input", "create_accumulator", "extract_output"):
        real = getattr(BeamCombineFn, name)
        monkeypatch.setattr(BeamCombineFn, name, lambda self, *args, real=real, name=name: wrapper_calls.append(name) or real(self, *args))
    op = sum_op(BeamCombineFn(Counting()))
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=True)
    window = (IntervalWindow(0, 10),)
    elements = [WindowedValue(pair, 1_000_000, window) for pair in [("a", 1), ("b", 2), ("a", 3)]]
    container = MetricsContainer()
    with MetricsEnvironment.container_scope(container):
        assert not tracking_in_place()
        records = list(batch_grouping._precombine(op, holder, holds, CountingAccumulator(), elements))
        assert not tracking_in_place()  # ended with the table
        panes = list(batch_grouping._panes(op, holder, holds, records))
        assert not tracking_in_place()  # ended with the panes
    assert sorted(records) == [(("a", (0, 10_000_000)), (4, None)), (("b", (0, 10_000_000)), (2, None))]
    assert sorted(pane.value for pane in panes) == [("a", 4), ("b", 2)]
    assert wrapper_calls == []  # Beam's own methods, with no check per call
    precombine = "Sum/Precombine"
    assert container.counters == {
        (precombine, MetricName("combine", "added")): 3,
        (precombine, MetricName("combine", "created")): 2,
        ("Sum/ExtractOutputs", MetricName("combine", "extracted")): 2,
    }


def _map_side_of_a_lifted_beam_combine(monkeypatch, values):
    """Runs the batch map side of ``Create(values) | Map(re-stamp at the value's [1]) |
    WindowInto(FixedWindows(10)) | CombinePerKey(Counting())`` (the upstream body in its
    pass, ``_precombine_body``); (its records, the elements built in interval windows, the
    values EncodeKey's code was called with, the metrics container)."""
    from sparkbeam.runners.core.elements import dofn_invoker
    from sparkbeam.runners.core.elements.metrics import step_scoped
    from sparkbeam.runners.core.grouping.holds import HoldPolicy
    from sparkbeam.runners.spark import batch_grouping
    from sparkbeam.utils.windowed_value import WindowedValue, new_windowed_value
    from sparkbeam.window import IntervalWindow
    from tests.core.grouping_harness import CountingAccumulator

    built, encoded = [], []

    def counted_build(fields):
        if type(fields[2][0]) is IntervalWindow:
            built.append(fields[0])
        return new_windowed_value(fields)

    def counted_encoder(codec):
        code = real_encoder(codec)
        return lambda element: encoded.append(element) or code(element)

    for module in (dofn_invoker, batch_grouping, beam_grouping):
        monkeypatch.setattr(module, "new_windowed_value", counted_build, raising=False)
    real_encoder = KeyCodec.encoder
    monkeypatch.setattr(KeyCodec, "encoder", counted_encoder)
    p = beam_pipeline()
    _ = (
        p
        | beam.Create(values, reshuffle=False)
        | "Stamp" >> beam.Map(lambda kv: beam_window.TimestampedValue(kv, kv[1] if isinstance(kv, tuple) else 0))
        | "Tens" >> beam.WindowInto(beam_window.FixedWindows(10))
        | "Sum" >> beam.CombinePerKey(Counting())
    )
    upstream, grouping = plan_of(p).stages
    op = grouping.grouping
    (impulse,) = upstream.head.outputs
    holder = batch_grouping._SetUpOnce(step_scoped(op.combine_fn, op.label))
    holds = HoldPolicy(op.windowing, overlapping_window_rule=False)
    container = MetricsContainer()
    with MetricsEnvironment.container_scope(container):
        elements = [WindowedValue(b"", beam_window.MIN_TIMESTAMP.micros, (beam_window.GlobalWindow(),))]
        records = list(batch_grouping._precombine_body(upstream, None, None, impulse, op, holder, holds, CountingAccumulator(), False, elements))
    return records, built, encoded, container


def test_a_lifted_beam_combines_str_keyed_pairs_reach_the_batch_map_side_with_no_element_built(monkeypatch):
    records, built, encoded, container = _map_side_of_a_lifted_beam_combine(monkeypatch, [("a", 1), ("b", 12), ("a", 3), (7, 4)])
    seven = beam.coders.FastPrimitivesCoder().as_deterministic_coder("Sum").encode(7)
    tens = [(0, 10_000_000), (10_000_000, 20_000_000)]
    assert sorted(records, key=repr) == sorted([(("a", tens[0]), (4, None)), (("b", tens[1]), (12, None)), ((seven, tens[0]), (4, None))], key=repr)
    # The int key alone is built and encoded, as before; the str-keyed pairs pass as they are.
    assert built == [(7, 4)]
    assert encoded == [(7, 4)]
    assert container.counters[("Sum/Precombine", MetricName("combine", "added"))] == 4


def test_a_non_pair_on_the_stamped_way_to_a_lifted_beam_combine_fails_as_on_the_general_way(monkeypatch):
    from sparkbeam.runners.core.lowering.errors import UserCodeError

    with pytest.raises(UserCodeError, match="'Sum/EncodeKey'") as raised:
        _map_side_of_a_lifted_beam_combine(monkeypatch, ["x"])
    assert "'Sum' groups (key, value) pairs, but got 'x'" in str(raised.value)
