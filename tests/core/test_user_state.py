"""Stateful DoFns on the engine alone: cells, timers, holds, garbage collection, drops, errors.

The engine's answers that Beam's runners cannot check (late drops, holds in the timeline,
GC at the window's expiry) are pinned here; tests/conformance/test_stateful_oracle.py pairs
the rest with apache_beam.
"""


from __future__ import annotations

import pickle

import pytest

import sparkbeam as beam
from sparkbeam.coders import PickleCoder, VarIntCoder
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.clock import ManualClock
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.runners.core.state.user_state import (
    CellForm,
    KeyStore,
    WindowCells,
    register_state_spec,
    runtime_state,
)
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window
from sparkbeam.transforms.userstate import (
    BagStateSpec,
    CombiningValueStateSpec,
    OrderedListStateSpec,
    ReadModifyWriteStateSpec,
    SetStateSpec,
    TimeDomain,
    TimerSpec,
    on_timer,
)
from sparkbeam.utils.timestamp import Timestamp

TV = window.TimestampedValue


class CollectUntilEnd(beam.DoFn):
    """Bag state flushed by an event-time timer at the window's end."""

    ITEMS = BagStateSpec("items", PickleCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, element, items=beam.DoFn.StateParam(ITEMS), end=beam.DoFn.TimerParam(END), w=beam.DoFn.WindowParam):
        items.add(element[1])
        end.set(w.max_timestamp())

    @on_timer(END)
    def flush(self, key=beam.DoFn.KeyParam, items=beam.DoFn.StateParam(ITEMS)):
        yield key, sorted(items.read())


def stream_run(stream, dofn, windowfn=None, **windowing):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    pcoll = p | stream
    if windowfn is not None:
        pcoll = pcoll | beam.WindowInto(windowfn, **windowing)
    out = beam.capture(pcoll | "Stateful" >> beam.ParDo(dofn))
    result = run_in_memory(p, clock=ManualClock())
    return result, out


def values_by_step(result, out):
    return sorted((e.step, e.value) for e in result.emissions(out))


# ------------------------------------------------------------------------ state cells


def test_each_state_kind_reads_what_was_written():
    cells = WindowCells()
    bag = runtime_state(BagStateSpec("bag", PickleCoder()), cells)
    value = runtime_state(ReadModifyWriteStateSpec("value", PickleCoder()), cells)
    total = runtime_state(CombiningValueStateSpec("total", sum), cells)
    distinct = runtime_state(SetStateSpec("set", PickleCoder()), cells)
    ordered = runtime_state(OrderedListStateSpec("ordered", PickleCoder()), cells)
    assert (list(bag.read()), value.read(), total.read(), distinct.read(), list(ordered.read())) == ([], None, 0, set(), [])
    for n in (3, 1, 3):
        bag.add(n)
        total.add(n)
        distinct.add(n)
        ordered.add((Timestamp(n), f"at {n}"))
    value.write("v")
    assert list(bag.read()) == [3, 1, 3]
    assert (value.read(), total.read(), distinct.read()) == ("v", 7, {1, 3})
    assert [v for _, v in ordered.read()] == ["at 1", "at 3", "at 3"]
    assert [v for _, v in ordered.read_range(Timestamp(2), Timestamp(4))] == ["at 3", "at 3"]
    ordered.clear_range(Timestamp(0), Timestamp(2))
    assert [v for _, v in ordered.read()] == ["at 3", "at 3"]
    for cell in (bag, value, total, distinct, ordered):
        cell.clear()
    assert cells.is_empty()


class _ForeignBagSpec:
    """A front end's own spec class, as Beam's are: not a subclass of sparkbeam's."""

    def __init__(self, name, coder):
        self.name, self.coder = name, coder


class _ForeignRuntimeState:
    """The front end's runtime-state class its cells must also be."""


def test_a_front_ends_cells_store_encodings_and_give_its_own_times():
    # How the Beam front end uses the engine's cells (runners/beam/stateful.py), without Beam.
    register_state_spec(_ForeignBagSpec, like=BagStateSpec, runtime_bases=(_ForeignRuntimeState,))
    form = CellForm(encoded=True, micros_of=lambda t, what: int(t * 1_000_000), timestamp_of=lambda micros: ("at", micros))
    cells = WindowCells()
    bag = runtime_state(_ForeignBagSpec("bag", PickleCoder()), cells, form)
    added = ["x"]
    bag.add(added)
    added.append("changed after add")
    assert isinstance(bag, _ForeignRuntimeState)
    assert cells.cells["bag"] == [PickleCoder().encode(["x"])]  # what the spec's coder encodes
    read = list(bag.read())
    assert read == [["x"]] and read[0] is not added  # a decoded copy, never the object added
    total = runtime_state(CombiningValueStateSpec("total", PickleCoder(), sum), cells, form)
    total.add(2)
    total.add(3)
    # the spec's coder is the accumulator's (sum's accumulator is a list of its inputs),
    # compacted before it is kept, as Beam's runners keep it: [5], not [2, 3]
    assert (total.read(), cells.cells["total"]) == (5, PickleCoder().encode([5]))
    ordered = runtime_state(OrderedListStateSpec("ordered", VarIntCoder()), cells, form)
    ordered.add((2.5, 7))
    assert list(ordered.read()) == [(("at", 2_500_000), 7)]
    with pytest.raises(TypeError, match="OrderedListState 'ordered': add takes a"):
        ordered.add(7)


def test_a_key_store_pickles_for_checkpoints():
    store = KeyStore()
    runtime_state(BagStateSpec("bag", PickleCoder()), store.cells_for(window.IntervalWindow(0, 10))).add("x")
    copy = pickle.loads(pickle.dumps(store))
    assert list(runtime_state(BagStateSpec("bag", PickleCoder()), copy.cells_for(window.IntervalWindow(0, 10))).read()) == ["x"]


# ------------------------------------------------------------------------ timers and watermarks


def test_event_time_timer_fires_in_the_step_the_watermark_reaches_it():
    stream = (
        TestStream()
        .add_elements([TV(("a", 1), 1), TV(("a", 2), 12)])  # step 0
        .advance_watermark_to(5)  # step 1
        .advance_watermark_to(10)  # step 2: [0, 10) ends at 9.999999
        .advance_watermark_to_infinity()  # step 3
    )
    result, out = stream_run(stream, CollectUntilEnd(), window.FixedWindows(10))
    assert values_by_step(result, out) == [(2, ("a", [1])), (3, ("a", [2]))]


def test_looping_timers_fire_in_time_order_within_one_step():
    class Ticks(beam.DoFn):
        TICK = TimerSpec("tick", TimeDomain.WATERMARK)

        def process(self, element, tick=beam.DoFn.TimerParam(TICK), ts=beam.DoFn.TimestampParam):
            tick.set(ts + 1)

        @on_timer(TICK)
        def on_tick(self, tick=beam.DoFn.TimerParam(TICK), ts=beam.DoFn.TimestampParam):
            yield ts.micros // 1_000_000
            if ts < Timestamp(5):
                tick.set(ts + 1)

    stream = TestStream().add_elements([TV(("k", 0), 0)]).advance_watermark_to(3).advance_watermark_to(100)
    result, out = stream_run(stream, Ticks())
    assert values_by_step(result, out) == [(1, 1), (1, 2), (1, 3), (2, 4), (2, 5)]


def test_processing_time_timer_fires_from_the_step_clock_and_holds_at_its_setter():
    class RemindLater(beam.DoFn):
        LATER = TimerSpec("later", TimeDomain.REAL_TIME)

        def process(self, element, later=beam.DoFn.TimerParam(LATER)):
            later.set(10)

        @on_timer(LATER)
        def remind(self, key=beam.DoFn.KeyParam):
            yield key

    stream = (
        TestStream()
        .add_elements([TV(("k", 0), 4)])  # step 0: timer due at clock 10, holds at 4 s
        .advance_watermark_to(8)  # step 1
        .advance_processing_time(10)  # step 2: clock 10, it fires
        .advance_watermark_to(20)  # step 3
    )
    result, out = stream_run(stream, RemindLater())
    assert values_by_step(result, out) == [(2, "k")]
    records = result.timeline.for_stage("Stateful")
    step1 = records[1]
    assert (step1.input_watermark, step1.output_watermark, step1.earliest_hold) == (8_000_000, 4_000_000, 4_000_000)
    assert (step1.hold_key, step1.hold_window) == ("'k'", str(window.GlobalWindow()))
    assert records[3].earliest_hold is None and records[3].output_watermark == 20_000_000


def test_state_and_timers_go_when_the_watermark_passes_window_end_plus_lateness():
    class Remember(beam.DoFn):
        SEEN = BagStateSpec("seen", PickleCoder())

        def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
            seen.add(element[1])
            yield element[0], len(list(seen.read()))

    stream = (
        TestStream()
        .add_elements([TV(("a", 1), 1)])  # step 0
        .advance_watermark_to(12)  # step 1: [0, 10) is over, but lateness keeps its state
        .add_elements([TV(("a", 2), 2)])  # step 2: on time for its GC time (14.999999)
        .advance_watermark_to(15)  # step 3: its state goes
        .add_elements([TV(("a", 3), 3)])  # step 4: late, dropped and counted
        .advance_watermark_to_infinity()
    )
    result, out = stream_run(stream, Remember(), window.FixedWindows(10), allowed_lateness=5)
    assert values_by_step(result, out) == [(0, ("a", 1)), (2, ("a", 2))]
    records = result.timeline.for_stage("Stateful")
    assert [r.state_keys for r in records[:4]] == [1, 1, 1, 0]
    assert records[4].late_dropped == 1
    assert sum(r.late_dropped for r in records) == 1


def test_batch_is_one_step_with_every_timer_fired():
    p = beam.Pipeline()
    rows = p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.Map(lambda kv: TV(kv, kv[1]))
    out = beam.capture(rows | beam.WindowInto(window.FixedWindows(2)) | beam.ParDo(CollectUntilEnd()))
    result = run_in_memory(p)
    assert sorted(e.value for e in result.emissions(out)) == [("a", [1]), ("a", [3]), ("b", [2])]
    assert len(result.timeline.for_stage("ParDo(CollectUntilEnd)")) == 1


def test_dynamic_timer_tags_are_separate_timers():
    class Tagged(beam.DoFn):
        ALARM = TimerSpec("alarm", TimeDomain.WATERMARK)

        def process(self, element, alarm=beam.DoFn.TimerParam(ALARM)):
            alarm.set(element[1], dynamic_timer_tag=f"at-{element[1]}")

        @on_timer(ALARM)
        def ring(self, tag=beam.DoFn.DynamicTimerTagParam, ts=beam.DoFn.TimestampParam):
            yield tag, ts.micros // 1_000_000

    p = beam.Pipeline()
    out = beam.capture(p | beam.Create([("k", 3), ("k", 1), ("k", 3)]) | beam.ParDo(Tagged()))
    assert sorted(e.value for e in run_in_memory(p).emissions(out)) == [("at-1", 1), ("at-3", 3)]


# ------------------------------------------------------------------------ bad input


def test_input_that_is_not_pairs_fails_naming_the_transform():
    p = beam.Pipeline()
    p | beam.Create([1, 2]) | beam.Map(lambda x: x) | "Buffer" >> beam.ParDo(CollectUntilEnd())
    with pytest.raises(ValueError, match=r"'Buffer'.*stateful DoFn.*\(key, value\) pairs.*got 1"):
        run_in_memory(p)


def test_declared_input_type_that_is_not_pairs_is_refused_at_construction():
    p = beam.Pipeline()
    numbers = p | beam.Create([1, 2]).with_output_types(int)
    with pytest.raises(TypeError, match=r"'Buffer'.*must be \(key, value\) pairs.*int"):
        numbers | "Buffer" >> beam.ParDo(CollectUntilEnd())


def test_merging_windows_are_refused_at_construction():
    p = beam.Pipeline()
    sessions = p | beam.Create([("a", 1)]) | beam.WindowInto(window.Sessions(10))
    with pytest.raises(NotImplementedError, match=r"'Buffer'.*merging windows"):
        sessions | "Buffer" >> beam.ParDo(CollectUntilEnd())


def test_timer_without_callback_is_refused_at_construction():
    class NoCallback(beam.DoFn):
        ALARM = TimerSpec("alarm", TimeDomain.WATERMARK)

        def process(self, element, alarm=beam.DoFn.TimerParam(ALARM)):
            alarm.set(0)

    p = beam.Pipeline()
    with pytest.raises(ValueError, match=r"'Alarm'.*TimerSpec without an associated @on_timer"):
        p | beam.Create([("a", 1)]) | "Alarm" >> beam.ParDo(NoCallback())


def test_unknown_time_domain_is_refused():
    with pytest.raises(ValueError, match="unsupported time domain 'WALL'"):
        TimerSpec("t", "WALL")
    with pytest.raises(ValueError, match="unsupported time domain 'DEPENDENT_REAL_TIME'"):
        TimerSpec("t", TimeDomain.DEPENDENT_REAL_TIME)


def test_key_param_outside_a_stateful_dofn_names_the_transform():
    class KeyOnly(beam.DoFn):
        def process(self, element, key=beam.DoFn.KeyParam):
            yield key

    p = beam.Pipeline()
    with pytest.raises(ValueError, match=r"'KeyOnly'.*KeyParam.*stateful DoFns only"):
        p | beam.Create([("a", 1)]) | "KeyOnly" >> beam.ParDo(KeyOnly())


def test_event_timer_after_the_window_expires_fails_naming_the_transform():
    class TooLate(beam.DoFn):
        ALARM = TimerSpec("alarm", TimeDomain.WATERMARK)

        def process(self, element, alarm=beam.DoFn.TimerParam(ALARM), w=beam.DoFn.WindowParam):
            alarm.set(w.end + 1)

        @on_timer(ALARM)
        def ring(self):
            yield "never"

    p = beam.Pipeline()
    rows = p | beam.Create([("a", 1)]) | beam.WindowInto(window.FixedWindows(10))
    rows | "TooLate" >> beam.ParDo(TooLate())
    with pytest.raises(ValueError, match=r"after the window expires") as caught:
        run_in_memory(p)
    assert "TooLate" in str(caught.value) + "".join(getattr(caught.value, "__notes__", []))


def test_state_spec_and_coder_are_checked():
    with pytest.raises(TypeError, match="must be a Coder"):
        BagStateSpec("b", int)
    with pytest.raises(ValueError, match="combine_fn must be provided"):
        CombiningValueStateSpec("c")
    assert CombiningValueStateSpec("c", VarIntCoder(), sum).combine_fn is not None
