"""Stateful and timely DoFns: oracle pairs against apache_beam, per state kind and timer domain.

Each builder runs on Beam (FnApiRunner in batch, the direct runner with TestStream in a
stream) and on sparkbeam's engine (the in-memory backend, which runs the same
``runners/core/state/stateful_step.py`` the Spark backend runs); outputs are compared as
multisets of (value, timestamp, window, pane).
"""

# ruff: noqa: B008 (DoFn.StateParam(SPEC) as a default is Beam's idiom)
from __future__ import annotations

import collections

import pytest

import sparkbeam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from tests.oracle import _pane_key, _sparkbeam_ns, _window_key, canonical, run_beam, run_sparkbeam

#: the engine alone (in memory), and the Spark runner (the shared local session)
BACKENDS = ["engine", pytest.param("spark", marks=pytest.mark.spark)]
#: Spark Connect too (the ``connect_server`` fixture's server)
BATCH_BACKENDS = [*BACKENDS, pytest.param("connect", marks=pytest.mark.spark)]
STREAM_BACKENDS = BATCH_BACKENDS


def run_engine(build, *, streaming, backend="engine", **options):
    if backend in ("spark", "connect"):
        return run_sparkbeam(build, streaming=streaming, overlapping_window_rule=False, **options)
    p = sparkbeam.Pipeline(options=PipelineOptions(streaming=streaming))
    output = sparkbeam.capture(build(_sparkbeam_ns(), p))
    result = run_in_memory(p, streaming=streaming, overlapping_window_rule=False)
    return collections.Counter(
        (canonical(e.value), e.timestamp.micros // 1000, _window_key(w), _pane_key(e.pane))
        for e in result.emissions(output)
        for w in e.windows
    )


def assert_engine_same_as_beam(build, *, streaming, backend="engine", **options):
    expected = run_beam(build, streaming=streaming)
    actual = run_engine(build, streaming=streaming, backend=backend, **options)
    assert expected, "Beam output nothing: the builder proves nothing"
    assert actual == expected, f"\n  Beam lacks: {sorted((actual - expected).elements(), key=repr)}\n  we lack:   {sorted((expected - actual).elements(), key=repr)}"
    return actual


# ------------------------------------------------------------------------------ the DoFns
# Built per namespace, so that each one uses its own SDK's classes.


def buffer_until_window_end(ns):
    """Bag state and an event-time timer at the window's end: the window's values per key."""
    us, coders = ns.beam.transforms.userstate, ns.beam.coders

    class BufferUntilWindowEnd(ns.beam.DoFn):
        BUFFER = us.BagStateSpec("buffer", coders.PickleCoder())
        END = us.TimerSpec("end", us.TimeDomain.WATERMARK)

        def process(self, element, buffer=ns.beam.DoFn.StateParam(BUFFER), end=ns.beam.DoFn.TimerParam(END), window=ns.beam.DoFn.WindowParam):
            buffer.add(element[1])
            end.set(window.max_timestamp())

        @us.on_timer(END)
        def flush(self, key=ns.beam.DoFn.KeyParam, buffer=ns.beam.DoFn.StateParam(BUFFER), timestamp=ns.beam.DoFn.TimestampParam):
            yield key, sorted(buffer.read()), timestamp.micros // 1000
            buffer.clear()

    return BufferUntilWindowEnd()


def running_count(ns):
    """Read-modify-write state: each element comes out with its key's count so far."""
    us, coders = ns.beam.transforms.userstate, ns.beam.coders

    class RunningCount(ns.beam.DoFn):
        COUNT = us.ReadModifyWriteStateSpec("count", coders.VarIntCoder())

        def process(self, element, count=ns.beam.DoFn.StateParam(COUNT)):
            seen = (count.read() or 0) + 1
            count.write(seen)
            yield element[0], seen

    return RunningCount()


def sum_at_window_end(ns):
    """Combining state (sum) read by an event-time timer."""
    us = ns.beam.transforms.userstate

    class SumAtWindowEnd(ns.beam.DoFn):
        TOTAL = us.CombiningValueStateSpec("total", sum)
        END = us.TimerSpec("end", us.TimeDomain.WATERMARK)

        def process(self, element, total=ns.beam.DoFn.StateParam(TOTAL), end=ns.beam.DoFn.TimerParam(END), window=ns.beam.DoFn.WindowParam):
            total.add(element[1])
            end.set(window.max_timestamp())

        @us.on_timer(END)
        def emit(self, key=ns.beam.DoFn.KeyParam, total=ns.beam.DoFn.StateParam(TOTAL)):
            yield key, total.read()

    return SumAtWindowEnd()


def first_of_each(ns):
    """Set state: each distinct value once per key and window (deduplication)."""
    us, coders = ns.beam.transforms.userstate, ns.beam.coders

    class FirstOfEach(ns.beam.DoFn):
        SEEN = us.SetStateSpec("seen", coders.PickleCoder())

        def process(self, element, seen=ns.beam.DoFn.StateParam(SEEN)):
            key, value = element
            if value not in seen.read():
                seen.add(value)
                yield key, value

    return FirstOfEach()


def sorted_by_time(ns):
    """Ordered-list state, keyed by each element's timestamp, read in order at the window's end."""
    us, coders = ns.beam.transforms.userstate, ns.beam.coders

    class SortedByTime(ns.beam.DoFn):
        ITEMS = us.OrderedListStateSpec("items", coders.PickleCoder())
        END = us.TimerSpec("end", us.TimeDomain.WATERMARK)

        def process(self, element, items=ns.beam.DoFn.StateParam(ITEMS), end=ns.beam.DoFn.TimerParam(END), timestamp=ns.beam.DoFn.TimestampParam, window=ns.beam.DoFn.WindowParam):
            items.add((timestamp, element[1]))
            end.set(window.max_timestamp())

        @us.on_timer(END)
        def emit(self, key=ns.beam.DoFn.KeyParam, items=ns.beam.DoFn.StateParam(ITEMS)):
            yield key, tuple(value for _, value in items.read())

    return SortedByTime()


def looping_ticks(ns):
    """A looping event-time timer: from each key's first element, a tick every 4 s that
    outputs the bag's size, until the key has been quiet for two ticks."""
    us, coders = ns.beam.transforms.userstate, ns.beam.coders

    class LoopingTicks(ns.beam.DoFn):
        SEEN = us.BagStateSpec("seen", coders.PickleCoder())
        LAST = us.ReadModifyWriteStateSpec("last", coders.PickleCoder())
        TICK = us.TimerSpec("tick", us.TimeDomain.WATERMARK)

        def process(self, element, seen=ns.beam.DoFn.StateParam(SEEN), last=ns.beam.DoFn.StateParam(LAST), tick=ns.beam.DoFn.TimerParam(TICK), timestamp=ns.beam.DoFn.TimestampParam):
            seen.add(element[1])
            if last.read() is None:
                tick.set(timestamp + 4)
            last.write(timestamp.micros)

        @us.on_timer(TICK)
        def on_tick(self, key=ns.beam.DoFn.KeyParam, timestamp=ns.beam.DoFn.TimestampParam, seen=ns.beam.DoFn.StateParam(SEEN), last=ns.beam.DoFn.StateParam(LAST), tick=ns.beam.DoFn.TimerParam(TICK)):
            yield key, len(list(seen.read())), timestamp.micros // 1000
            if timestamp.micros - last.read() < 8_000_000:
                tick.set(timestamp + 4)

    return LoopingTicks()


def cleared_timer(ns):
    """A timer set by one element and cleared by a later one ('stop'), so it never fires."""
    us = ns.beam.transforms.userstate

    class ClearedTimer(ns.beam.DoFn):
        ALARM = us.TimerSpec("alarm", us.TimeDomain.WATERMARK)

        def process(self, element, alarm=ns.beam.DoFn.TimerParam(ALARM), window=ns.beam.DoFn.WindowParam):
            if element[1] == "stop":
                alarm.clear()
            else:
                alarm.set(window.max_timestamp())
            yield element

        @us.on_timer(ALARM)
        def ring(self, key=ns.beam.DoFn.KeyParam):
            yield key, "alarm"

    return ClearedTimer()


def processing_time_flush(ns):
    """Bag state flushed by a processing-time timer at 5 s (TestStream's clock starts at 0 in
    both runners, and a DoFn cannot read it: Beam has no parameter for processing time)."""
    us, coders = ns.beam.transforms.userstate, ns.beam.coders

    class ProcessingTimeFlush(ns.beam.DoFn):
        BUFFER = us.BagStateSpec("buffer", coders.PickleCoder())
        ARMED = us.ReadModifyWriteStateSpec("armed", coders.PickleCoder())
        FLUSH = us.TimerSpec("flush", us.TimeDomain.REAL_TIME)

        def process(self, element, buffer=ns.beam.DoFn.StateParam(BUFFER), armed=ns.beam.DoFn.StateParam(ARMED), flush=ns.beam.DoFn.TimerParam(FLUSH)):
            buffer.add(element[1])
            if not armed.read():
                armed.write(True)
                flush.set(5)

        @us.on_timer(FLUSH)
        def on_flush(self, key=ns.beam.DoFn.KeyParam, buffer=ns.beam.DoFn.StateParam(BUFFER), armed=ns.beam.DoFn.StateParam(ARMED)):
            yield key, sorted(buffer.read())
            buffer.clear()
            armed.clear()

    return ProcessingTimeFlush()


# ------------------------------------------------------------------------------ batch

KEYED = [("a", 1, 1), ("a", 2, 3), ("b", 3, 4), ("a", 2, 6), ("a", 5, 12), ("b", 3, 13), ("b", 7, 25)]


def keyed_input(ns, p, windowfn=None):
    pcoll = (
        p
        | ns.beam.Create(KEYED)
        | "Stamp" >> ns.beam.Map(lambda t: ns.TimestampedValue((t[0], t[1]), t[2]))
    )
    if windowfn is not None:
        pcoll = pcoll | ns.beam.WindowInto(windowfn(ns.window))
    return pcoll


def windowed(make_dofn, windowfn=lambda w: w.FixedWindows(10)):
    def build(ns, p):
        return keyed_input(ns, p, windowfn) | ns.beam.ParDo(make_dofn(ns))

    return build


BATCH_CASES = {
    "bag_event_timer_fixed": windowed(buffer_until_window_end),
    "bag_event_timer_sliding": windowed(buffer_until_window_end, lambda w: w.SlidingWindows(10, 5)),
    "bag_event_timer_global": windowed(buffer_until_window_end, lambda w: w.GlobalWindows()),
    "value_state": windowed(running_count),
    "combining_state": windowed(sum_at_window_end),
    "set_state": windowed(first_of_each),
    "ordered_list_state": windowed(sorted_by_time),
    "looping_timer": windowed(looping_ticks, lambda w: w.GlobalWindows()),
    "cleared_timer": windowed(cleared_timer),
}


@pytest.mark.parametrize("backend", BATCH_BACKENDS)
@pytest.mark.parametrize("case", sorted(BATCH_CASES))
def test_batch_matches_beam(case, backend, request):
    options = {"spark_remote": request.getfixturevalue("connect_server").url} if backend == "connect" else {}
    assert_engine_same_as_beam(BATCH_CASES[case], streaming=False, backend=backend, **options)


def test_cleared_timer_never_fires():
    def build(ns, p):
        rows = [("k", "go", 1), ("k", "stop", 2), ("j", "go", 3)]
        stamped = p | ns.beam.Create(rows) | ns.beam.Map(lambda t: ns.TimestampedValue((t[0], t[1]), t[2]))
        return stamped | ns.beam.WindowInto(ns.window.FixedWindows(10)) | ns.beam.ParDo(cleared_timer(ns))

    out = assert_engine_same_as_beam(build, streaming=False)
    alarms = [value for (value, *_) in out.elements() if value[1] == "alarm"]
    assert alarms == [("j", "alarm")]


# ------------------------------------------------------------------------------ streaming


def keyed_stream(ns):
    tv = ns.TimestampedValue
    return (
        ns.TestStream()
        .add_elements([tv(("a", 1), 1), tv(("a", 2), 3), tv(("b", 3), 4)])
        .advance_watermark_to(5)
        .add_elements([tv(("a", 2), 6), tv(("a", 5), 12)])
        .advance_watermark_to(10)
        .add_elements([tv(("b", 3), 13), tv(("a", 9), 16)])
        .advance_watermark_to(21)
        .add_elements([tv(("b", 7), 25)])
        .advance_watermark_to_infinity()
    )


def streamed(make_dofn, windowfn=lambda w: w.FixedWindows(10)):
    def build(ns, p):
        return p | keyed_stream(ns) | ns.beam.WindowInto(windowfn(ns.window)) | ns.beam.ParDo(make_dofn(ns))

    return build


STREAM_CASES = {
    "bag_event_timer_fixed": streamed(buffer_until_window_end),
    "value_state": streamed(running_count),
    "combining_state": streamed(sum_at_window_end),
    "set_state": streamed(first_of_each),
    "looping_timer": streamed(looping_ticks, lambda w: w.GlobalWindows()),
    "cleared_timer": streamed(cleared_timer),
}


# Beam's direct runner has no ordered-list state ("Invalid state spec"): the engine's is
# pinned in batch (FnApiRunner) above and by tests/core/test_user_state.py.


@pytest.mark.parametrize("backend", STREAM_BACKENDS)
@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_stream_matches_beam(case, backend, request):
    options = {"spark_remote": request.getfixturevalue("connect_server").url} if backend == "connect" else {}
    assert_engine_same_as_beam(STREAM_CASES[case], streaming=True, backend=backend, **options)


@pytest.mark.parametrize("backend", STREAM_BACKENDS)
def test_processing_time_timer_fires_when_test_stream_clock_passes_it(backend, request):
    def build(ns, p):
        tv = ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv(("a", 1), 1), tv(("b", 2), 2)])
            .advance_processing_time(3)
            .add_elements([tv(("a", 3), 3)])
            .advance_processing_time(3)  # clock 6: both flush (due at 5)
            .add_elements([tv(("a", 4), 4)])  # re-armed at 5, already due
            .advance_processing_time(10)
            .advance_watermark_to_infinity()
        )
        return p | stream | ns.beam.ParDo(processing_time_flush(ns))

    options = {"spark_remote": request.getfixturevalue("connect_server").url} if backend == "connect" else {}
    out = assert_engine_same_as_beam(build, streaming=True, backend=backend, **options)
    assert sorted(value for (value, *_) in out.elements()) == [("a", ("<list>", (1, 3))), ("a", ("<list>", (4,))), ("b", ("<list>", (2,)))]
