"""GroupIntoBatches (and WithShardedKey) and BatchElements(max_batch_duration_secs=...),
built on the stateful DoFn as Beam builds them: oracle pairs against apache_beam in batch
(FnApiRunner) and in a stream (TestStream on the direct runner), on the engine and on Spark."""

from __future__ import annotations

import pytest

import sparkbeam
from tests.conformance.test_stateful_oracle import BACKENDS, assert_engine_same_as_beam, run_engine
from tests.oracle import _sparkbeam_ns

NAMES = ["Einstein", "Darwin", "Copernicus", "Pasteur", "Curie", "Faraday", "Newton", "Bohr", "Galilei", "Maxwell"]


class FakeClock:
    """Beam's test clock: a processing time that only moves when told (here never), so
    that a buffering timer is due once TestStream's processing time passes ``now + duration``."""

    def __init__(self, now: float = 0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stamped(ns, p, rows):
    return p | ns.beam.Create(rows) | "Stamp" >> ns.beam.Map(lambda t: ns.TimestampedValue((t[0], t[1]), t[2]))


ROWS = [("a", n, i) for i, n in enumerate(NAMES)] + [("b", "x", 2), ("b", "y", 13), ("c", "z", 25)]


def batches_in_fixed_windows(ns, p):
    return stamped(ns, p, ROWS) | ns.beam.WindowInto(ns.window.FixedWindows(6)) | ns.util.GroupIntoBatches(3)


def batches_in_global_window(ns, p):
    return stamped(ns, p, ROWS) | ns.util.GroupIntoBatches(4)


def sharded_batches(ns, p):
    # The shard id is opaque and differs between runs and runners: compare the user key.
    # Beam's WithShardedKey needs a (key, value) element type on its input.
    typed = stamped(ns, p, ROWS) | "Typed" >> ns.beam.Map(lambda kv: kv).with_output_types(ns.beam.typehints.Tuple[str, str])
    return (
        typed
        | ns.beam.WindowInto(ns.window.FixedWindows(6))
        | ns.util.GroupIntoBatches.WithShardedKey(3)
        | "UserKey" >> ns.beam.MapTuple(lambda sharded, batch: (type(sharded).__name__, sharded.key, batch))
    )


def stateful_batch_elements(ns, p):
    # Every window's count is even, so each batch fills: with a partial batch left at the
    # end of a batch run, Beam's FnApiRunner fires the buffering timer (processing time) or
    # the window's timer first depending on the run; the engine fires the window's (the
    # earlier time), pinned below.
    rows = [("a", name, i) for i, name in enumerate(NAMES)]
    return (
        stamped(ns, p, rows)
        | ns.beam.Values()
        | ns.beam.WindowInto(ns.window.FixedWindows(6))
        | ns.util.BatchElements(min_batch_size=2, max_batch_size=2, max_batch_duration_secs=1000)
    )


BATCH_CASES = {
    "fixed_windows": batches_in_fixed_windows,
    "global_window": batches_in_global_window,
    "with_sharded_key": sharded_batches,
    "batch_elements": stateful_batch_elements,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(BATCH_CASES))
def test_batch_matches_beam(case, backend):
    if case == "batch_elements" and backend == "spark":
        # Keyed per worker process, as Beam's: on Spark the partitions may run in different
        # Python workers, so which elements share a batch depends on the run.
        out = run_engine(BATCH_CASES[case], streaming=False, backend=backend)
        batches = [(value[1], window) for value, _, window, _ in out.elements()]
        assert all(1 <= len(batch) <= 2 for batch, _ in batches)
        assert sorted(v for batch, _ in batches for v in batch) == sorted(NAMES)
        assert all((NAMES.index(v) // 6 * 6000, NAMES.index(v) // 6 * 6000 + 6000) == window for batch, window in batches for v in batch)
        return
    assert_engine_same_as_beam(BATCH_CASES[case], streaming=False, backend=backend)


def buffering_timer_in_fixed_window(ns, p):
    """Beam's test_buffering_timer_in_fixed_window_streaming: batches of 5, 1 (the buffering
    timer, after 150 s of processing time) and 4 (the window's end)."""
    tv = ns.TimestampedValue
    stream = (
        ns.TestStream()
        .add_elements([tv(("key", name), i) for i, name in enumerate(NAMES)])
        .advance_processing_time(150)
        .advance_watermark_to(6)
        .advance_watermark_to(7)
        .advance_watermark_to_infinity()
    )
    return (
        p
        | stream
        | ns.beam.WindowInto(ns.window.FixedWindows(6))
        | ns.util.GroupIntoBatches(5, 100, FakeClock())
    )


def buffering_timer_in_global_window(ns, p):
    """Beam's test_buffering_timer_in_global_window_streaming: one element every 5 s of
    processing time, flushed by the 42 s buffering timer, the rest at the end."""
    tv = ns.TimestampedValue
    stream = ns.TestStream().advance_watermark_to(0)
    for i, name in enumerate(NAMES):
        stream = stream.add_elements([tv(("key", name), i)]).advance_processing_time(5)
    stream = stream.advance_watermark_to(len(NAMES) + 1).advance_watermark_to_infinity()
    return p | stream | ns.util.GroupIntoBatches(20, 42, FakeClock())


def full_batches_in_a_stream(ns, p):
    tv = ns.TimestampedValue
    stream = (
        ns.TestStream()
        .add_elements([tv(("a", 1), 1), tv(("b", 2), 2), tv(("a", 3), 3)])
        .advance_watermark_to(4)
        .add_elements([tv(("a", 4), 5), tv(("a", 5), 8)])
        .advance_watermark_to(12)
        .add_elements([tv(("b", 6), 14)])
        .advance_watermark_to_infinity()
    )
    return p | stream | ns.beam.WindowInto(ns.window.FixedWindows(10)) | ns.util.GroupIntoBatches(2)


STREAM_CASES = {
    "buffering_timer_fixed_window": buffering_timer_in_fixed_window,
    "buffering_timer_global_window": buffering_timer_in_global_window,
    "full_batches": full_batches_in_a_stream,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_stream_matches_beam(case, backend):
    out = assert_engine_same_as_beam(STREAM_CASES[case], streaming=True, backend=backend)
    if case == "buffering_timer_fixed_window":
        assert sorted(len(batch[1]) for (_, batch), *_ in out.elements()) == [1, 4, 5]
    if case == "buffering_timer_global_window":
        assert sorted(len(batch[1]) for (_, batch), *_ in out.elements()) == [1, 9]


def test_a_partial_batch_leaves_at_its_windows_end_in_batch():
    p = sparkbeam.Pipeline()
    stamped_names = stamped(_sparkbeam_ns(), p, ROWS) | sparkbeam.Values() | sparkbeam.WindowInto(sparkbeam.window.FixedWindows(6))
    out = sparkbeam.capture(stamped_names | sparkbeam.BatchElements(2, 2, max_batch_duration_secs=1000))
    batches = {(tuple(e.value), e.timestamp.micros // 1_000_000) for e in p.run().emissions(out)}
    assert ((("x",), 6) in batches) and ((("y",), 18) in batches) and ((("z",), 30) in batches)
    assert sorted(v for batch, _ in batches for v in batch) == sorted(n for _, n, _ in ROWS)


def test_sharded_keys_are_beams_and_keep_the_user_key():
    from sparkbeam.utils.sharded_key import ShardedKey

    p = sparkbeam.Pipeline()
    out = sparkbeam.capture(p | sparkbeam.Create([("k", i) for i in range(5)]) | sparkbeam.GroupIntoBatches.WithShardedKey(2))
    batches = [e.value for e in p.run().emissions(out)]
    assert all(isinstance(key, ShardedKey) and key.key == "k" for key, _ in batches)
    assert sorted(v for _, batch in batches for v in batch) == list(range(5))
    assert sorted(len(batch) for _, batch in batches) == [1, 2, 2]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: sparkbeam.GroupIntoBatches(0), "GroupIntoBatches: batch_size"),
        (lambda: sparkbeam.GroupIntoBatches(2, -1), "GroupIntoBatches: max_buffering_duration_secs"),
        (lambda: sparkbeam.GroupIntoBatches.WithShardedKey(2, -1), "WithShardedKey: max_buffering_duration_secs"),
        (lambda: sparkbeam.BatchElements(max_batch_duration_secs=-1), "BatchElements: max_batch_duration_secs"),
    ],
)
def test_bad_arguments_name_the_transform(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_group_into_batches_on_unkeyed_input_names_the_label():
    p = sparkbeam.Pipeline()
    with pytest.raises(sparkbeam.typehints.decorators.TypeCheckError, match="MyBatches"):
        _ = p | sparkbeam.Create([1, 2]) | "MyBatches" >> sparkbeam.GroupIntoBatches(2)


def test_group_into_batches_on_unkeyed_input_without_types_names_the_label():
    p = sparkbeam.Pipeline()
    untyped = p | sparkbeam.Create([1, 2]) | sparkbeam.Map(lambda x: x).with_output_types(sparkbeam.typehints.Any)
    _ = untyped | "MyBatches" >> sparkbeam.GroupIntoBatches(2)
    with pytest.raises(Exception, match=r"MyBatches.*\(key, value\) pairs"):
        p.run()
