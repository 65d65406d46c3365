"""Side inputs against Beam: every view, as arguments of ParDo, Map, FlatMap and Filter.

A side input is read per window: a window-matched side input gives the main input's
window the side window that contains its end (for sliding side windows, the earliest
such one, as Beam), and a side input in the global window is seen whole from any window.
"""

from __future__ import annotations

import collections
import itertools
import os

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from tests.oracle import (
    _pane_key,
    _sparkbeam_ns,
    _window_key,
    assert_same_as_beam,
    canonical,
    run_beam,
)

pytestmark = pytest.mark.spark


def stamped(ns, p, label, rows):
    """(value, event time in seconds) rows as timestamped values."""
    return p | label >> ns.beam.Create(rows) | f"{label}Time" >> ns.beam.Map(lambda e: ns.TimestampedValue(e[0], e[1]))


def test_every_view_in_the_global_window(spark):
    def build(ns, p):
        b, pv = ns.beam, ns.pvalue
        main = p | "Main" >> b.Create([1, 2, 3])
        nums = p | "Nums" >> b.Create([10, 20, None])
        one = p | "One" >> b.Create([100])
        kv = p | "KV" >> b.Create([("a", 1), ("b", 2), ("a", 3)])
        empty = p | "Empty" >> b.Create([])
        b_only = kv | "BOnly" >> b.Filter(lambda e: e[0] == "b")

        class AddSide(b.DoFn):
            def process(self, element, single, listed=None):
                yield ("ParDo", element + single, sorted(v for v in listed if v is not None))

        branches = [
            main | "Singleton" >> b.Map(lambda x, s: ("Singleton", x + s), pv.AsSingleton(one)),
            main | "Default" >> b.Map(lambda x, s: ("Default", x, s), pv.AsSingleton(empty, default_value=-1)),
            main | "DefaultNone" >> b.Map(lambda x, s: ("DefaultNone", x, s), pv.AsSingleton(empty, default_value=None)),
            main | "Iter" >> b.Map(lambda x, s: ("Iter", x, list(s)), pv.AsIter(nums)),
            main | "IterEmpty" >> b.Map(lambda x, s: ("IterEmpty", x, list(s)), pv.AsIter(empty)),
            main | "List" >> b.FlatMap(lambda x, s: [("List", x, v) for v in s], pv.AsList(nums)),
            main | "Dict" >> b.Map(lambda x, d: ("Dict", x, d.get("b"), len(d)), pv.AsDict(kv | "B" >> b.Filter(lambda e: e[0] == "b"))),
            main | "DictEmpty" >> b.Map(lambda x, d: ("DictEmpty", x, dict(d)), pv.AsDict(empty)),
            main | "MultiMap" >> b.Map(lambda x, m: ("MultiMap", x, list(m["a"]), list(m["b"])), pv.AsMultiMap(kv)),
            main | "Filter" >> b.Filter(lambda x, limit: x > limit, pv.AsSingleton(p | "Limit" >> b.Create([1]))),
            main | "ParDo" >> b.ParDo(AddSide(), pv.AsSingleton(one), listed=pv.AsList(nums)),
            main | "Keyword" >> b.Map(lambda x, factor=0: ("Keyword", x * factor), factor=pv.AsSingleton(one)),
            main | "Mixed" >> b.Map(lambda x, k, s, d: ("Mixed", x * k + s + len(d)), 10, pv.AsSingleton(one), d=pv.AsDict(kv)),
            main | "Twice" >> b.Map(lambda x, s, t: ("Twice", x, s + t), pv.AsSingleton(one), pv.AsSingleton(one)),
            # one PCollection read through three views in one call: each argument gets its own
            main | "ThreeViews" >> b.Map(lambda x, d, s, i: ("ThreeViews", x, sorted(d.items()), sorted(s), sorted(i)), pv.AsDict(b_only), pv.AsList(b_only), pv.AsIter(b_only)),
            main | "OfItself" >> b.Map(lambda x, s: ("OfItself", x, list(s)), pv.AsList(main)),
            main | "Combined" >> b.Map(lambda x, s: ("Combined", x, s), pv.AsSingleton(main | b.CombineGlobally(sum))),
            main | "Chain" >> b.Map(lambda x, s: x * s, pv.AsSingleton(one)) | "Then" >> b.Map(lambda x, s: ("Chain", x, list(s)), pv.AsList(main)),
        ]
        return branches | b.Flatten()

    assert_same_as_beam(build)


def test_windowed_side_inputs_are_matched_to_the_main_window(spark):
    def build(ns, p):
        b, pv, w = ns.beam, ns.pvalue, ns.window
        main = stamped(ns, p, "Main", [(1, 5), (2, 65), (3, 125), (4, 130), (5, 300)]) | "MainWindows" >> b.WindowInto(w.FixedWindows(60))
        side = stamped(ns, p, "Side", [(10, 1), (20, 70), (30, 80)]) | "SideWindows" >> b.WindowInto(w.FixedWindows(60))
        wide = stamped(ns, p, "Wide", [(100, 1), (200, 130)]) | "WideWindows" >> b.WindowInto(w.FixedWindows(120))
        sliding = stamped(ns, p, "Sliding", [(7, 1), (8, 40), (9, 80)]) | "SlidingWindows" >> b.WindowInto(w.SlidingWindows(60, 30))
        everywhere = stamped(ns, p, "Global", [(-1, 1), (-2, 500)])
        per_window_sum = side | "Sum" >> b.CombineGlobally(sum).without_defaults()
        branches = [
            main | "Fixed" >> b.Map(lambda x, s: ("Fixed", x, list(s)), pv.AsList(side)),
            main | "Wider" >> b.Map(lambda x, s: ("Wider", x, list(s)), pv.AsIter(wide)),
            main | "SlidingSide" >> b.Map(lambda x, s: ("SlidingSide", x, list(s)), pv.AsList(sliding)),
            main | "GlobalSide" >> b.Map(lambda x, s: ("GlobalSide", x, list(s)), pv.AsList(everywhere)),
            main | "SumOrNone" >> b.Map(lambda x, s: ("SumOrNone", x, s), pv.AsSingleton(per_window_sum, default_value=None)),
            main | "Filter" >> b.Filter(lambda x, s: x * 10 in s, pv.AsList(side)),
            main | "DictPerWindow" >> b.Map(lambda x, d: ("DictPerWindow", x, dict(d)), pv.AsDict(side | "Pair" >> b.Map(lambda v: (v, v // 10)))),
        ]
        return branches | b.Flatten()

    assert_same_as_beam(build)


def test_main_inputs_in_other_windows_read_fixed_windowed_side_inputs(spark):
    def build(ns, p):
        b, pv, w = ns.beam, ns.pvalue, ns.window
        side = stamped(ns, p, "Side", [(10, 1), (20, 40), (30, 80)]) | "SideWindows" >> b.WindowInto(w.FixedWindows(60))
        sliding_main = stamped(ns, p, "Sliding", [(1, 5), (2, 65)]) | "SlidingWindows" >> b.WindowInto(w.SlidingWindows(60, 30))
        # The global window ends far beyond any fixed window of the side input: it sees none.
        global_main = stamped(ns, p, "Global", [(3, 5)])
        branches = [
            sliding_main | "FromSliding" >> b.Map(lambda x, s: ("FromSliding", x, list(s)), pv.AsList(side)),
            global_main
            | "FromGlobal" >> b.Map(lambda x, s: ("FromGlobal", x, list(s)), pv.AsList(side))
            | "Rewindow" >> b.WindowInto(w.SlidingWindows(60, 30)),
        ]
        return branches | b.Flatten()

    assert_same_as_beam(build)


def test_a_singleton_with_several_values_names_the_side_input_the_transform_and_the_element(spark):
    p = beam.Pipeline()
    side = p | "Three" >> beam.Create([1, 2, 3])
    p | "Main" >> beam.Create(["elem"]) | "UseSide" >> beam.Map(lambda x, s: s, beam.pvalue.AsSingleton(side))
    with pytest.raises(ValueError, match=r"AsSingleton\(Three\) needs exactly one element per window, found 3") as error:
        p.run()
    notes = " ".join(getattr(error.value, "__notes__", []))
    assert "in transform 'UseSide'" in notes
    assert "test_side_inputs.py:" in notes
    assert "while processing 'elem'" in notes


def test_a_session_windowed_side_input_is_refused(spark):
    p = beam.Pipeline()
    side = p | "Side" >> beam.Create([1]) | "Sessions" >> beam.WindowInto(beam.window.Sessions(10))
    main = p | "Main" >> beam.Create(["elem"]) | "Fixed" >> beam.WindowInto(beam.window.FixedWindows(10))
    main | "UseSide" >> beam.Map(lambda x, s: s, beam.pvalue.AsList(side))
    with pytest.raises(ValueError, match=r"Sessions.*cannot be side inputs") as error:
        p.run()
    assert "in transform 'UseSide'" in " ".join(getattr(error.value, "__notes__", []))


def test_an_empty_singleton_without_default_is_an_error(spark):
    p = beam.Pipeline()
    empty = p | "Empty" >> beam.Create([])
    beam.capture(p | "Main" >> beam.Create(["elem"]) | "UseSide" >> beam.Map(lambda x, s: s, beam.pvalue.AsSingleton(empty)))
    try:
        p.run()
    except ValueError as error:
        assert "AsSingleton(Empty)" in str(error)
        return
    raise AssertionError("an empty AsSingleton without default_value gave a value")


def test_a_multimap_gives_no_values_for_a_missing_key(spark):
    def build(ns, p):
        kv = p | "KV" >> ns.beam.Create([("a", 1)])
        return p | "Main" >> ns.beam.Create([0]) | ns.beam.Map(lambda x, m: list(m["zz"]), ns.pvalue.AsMultiMap(kv))

    assert_same_as_beam(build)


# -- streaming: a main-input element waits until its side input is ready for its window ----
#
# As in Beam's direct runner, a side input is ready for a window once the watermark of what
# produces it has reached the window's end; until then the element waits. One TestStream
# with a "main" and a "side" output (Beam's direct runner runs one TestStream at a time).

SIDE = [("a", 1, 2), ("b", 2, 4), ("c", 3, 12), ("d", 4, 27)]  # key, value, event time
MAIN = [("m1", 1), ("m2", 11), ("m3", 25)]


def _side(ns, stream, key):
    (k, v, t) = next(s for s in SIDE if s[0] == key)
    return stream.add_elements([ns.TimestampedValue((k, v), t)], tag="side")


def _main(ns, stream):
    return stream.add_elements([ns.TimestampedValue(m, t) for m, t in MAIN], tag="main")


def side_then_main(ns):
    """Window [0, 10) of the side input is complete before the main input arrives; the
    later windows are not, so their main elements wait."""
    stream = ns.TestStream()
    stream = _side(ns, _side(ns, stream, "a"), "b").advance_watermark_to(10, tag="side")
    stream = _side(ns, stream, "c")
    stream = _main(ns, stream).advance_watermark_to(30, tag="main")
    stream = stream.advance_watermark_to(15, tag="side").advance_watermark_to(20, tag="side")
    return _side(ns, stream, "d").advance_watermark_to(40, tag="side").advance_watermark_to_infinity()


def main_then_side(ns):
    """Every main element arrives before any side element: each waits for its window."""
    stream = _main(ns, ns.TestStream()).advance_watermark_to(30, tag="main")
    stream = _side(ns, stream, "a").advance_watermark_to(3, tag="side")
    stream = _side(ns, _side(ns, stream, "b"), "c").advance_watermark_to(10, tag="side")
    stream = _side(ns, stream, "d").advance_watermark_to(20, tag="side")
    return stream.advance_watermark_to_infinity()


def every_view_over_a_stream(script, windowing):
    def build(ns, p):
        b, pv, w = ns.beam, ns.pvalue, ns.window
        windowfn = w.FixedWindows(10) if windowing == "fixed" else w.GlobalWindows()
        stream = p | "Stream" >> script(ns)
        main = stream["main"] | "MainWindows" >> b.WindowInto(windowfn)
        side = stream["side"] | "SideWindows" >> b.WindowInto(windowfn)
        only_a = side | "OnlyA" >> b.Filter(lambda kv: kv[0] == "a") | "AValue" >> b.Map(lambda kv: kv[1])
        by_parity = side | "ByParity" >> b.Map(lambda kv: (kv[1] % 2, kv[0]))
        branches = [
            main | "Singleton" >> b.Map(lambda x, s: ("Singleton", x, s), pv.AsSingleton(only_a, default_value=-1)),
            main | "Iter" >> b.Map(lambda x, s: ("Iter", x, sorted(s)), pv.AsIter(side)),
            main | "List" >> b.Map(lambda x, s: ("List", x, s), pv.AsList(side)),
            main | "Dict" >> b.Map(lambda x, d: ("Dict", x, dict(d)), pv.AsDict(side)),
            main | "MultiMap" >> b.Map(lambda x, m: ("MultiMap", x, sorted(m[0]), sorted(m[1])), pv.AsMultiMap(by_parity)),
        ]
        if windowing == "fixed":
            # A side input produced by a grouping: ready once that stage's watermark passes
            # (Beam's direct runner cannot run this CombineGlobally in the global window).
            total = side | "Values" >> b.Map(lambda kv: kv[1]) | "Sum" >> b.CombineGlobally(sum).without_defaults()
            branches.append(main | "Total" >> b.Map(lambda x, s: ("Total", x, s), pv.AsSingleton(total, default_value=None)))
        return branches | "Views" >> b.Flatten()

    return build


def run_in_memory_as_rows(build) -> collections.Counter:
    """The engine alone (no Spark), reduced as the oracle reduces a run."""
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    output = beam.capture(build(_sparkbeam_ns(), p))
    result = run_in_memory(p, streaming=True)
    return collections.Counter(
        (canonical(e.value), e.timestamp.micros // 1000, _window_key(w), _pane_key(e.pane))
        for e in result.emissions(output)
        for w in e.windows
    )


def assert_spark_and_engine_same_as_beam(build, **session) -> collections.Counter:
    """``session``: the options of a kind of Spark session (``spark_session_kind``)."""
    expected = run_beam(build, streaming=True)
    assert expected, "the oracle produced nothing: the test would compare nothing"
    assert run_in_memory_as_rows(build) == expected
    assert assert_same_as_beam(build, streaming=True, **session) == expected
    return expected


@pytest.mark.parametrize("windowing", ["fixed", "global"])
@pytest.mark.parametrize("script", [side_then_main, main_then_side])
def test_streaming_main_elements_wait_for_their_side_window_in_every_view(spark_session_kind, script, windowing):
    rows = assert_spark_and_engine_same_as_beam(every_view_over_a_stream(script, windowing), **spark_session_kind)
    # Each main element saw its own window's side input, complete.
    lists = {row[0][1]: row[0][2] for row in rows if row[0][0] == "List"}
    totals = {row[0][1]: row[0][2] for row in rows if row[0][0] == "Total"}
    if windowing == "fixed":
        assert lists == {
            "m1": ("<list>", (("a", 1), ("b", 2))),
            "m2": ("<list>", (("c", 3),)),
            "m3": ("<list>", (("d", 4),)),
        }
        assert totals == {"m1": 3, "m2": 3, "m3": 4}
    else:
        assert set(lists.values()) == {("<list>", (("a", 1), ("b", 2), ("c", 3), ("d", 4)))}


def test_the_issue_example_main_before_side_sees_the_side_element(spark):
    def build(ns, p):
        b, w = ns.beam, ns.window
        stream = (
            ns.TestStream()
            .add_elements([ns.TimestampedValue("main1", 1)], tag="main")
            .add_elements([ns.TimestampedValue("side1", 2)], tag="side")
            .advance_watermark_to_infinity()
        )
        s = p | "Stream" >> stream
        main = s["main"] | "MainWindows" >> b.WindowInto(w.FixedWindows(10))
        side = s["side"] | "SideWindows" >> b.WindowInto(w.FixedWindows(10))
        return main | "Pair" >> b.Map(lambda x, s: (x, s), ns.pvalue.AsList(side))

    rows = assert_spark_and_engine_same_as_beam(build)
    assert [row[0] for row in rows] == [("main1", ("<list>", ("side1",)))]


def test_early_panes_of_a_global_window_side_input_do_not_release_the_main_input(spark_session_kind):
    """Beam's direct runner waits for the watermark, not for a pane: the main elements are
    processed when the side input ends, and see every pane (three early, one on time)."""

    def build(ns, p):
        b, t = ns.beam, ns.trigger
        tv = ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv("s1", 2)], tag="side")
            .advance_watermark_to(3, tag="side")
            .add_elements([tv("s2", 4)], tag="side")
            .advance_watermark_to(100, tag="side")
            .add_elements([tv("main1", 60)], tag="main")
            .advance_watermark_to(150, tag="main")
            .add_elements([tv("s3", 104)], tag="side")
            .advance_watermark_to(200, tag="side")
            .add_elements([tv("main2", 210)], tag="main")
            .advance_watermark_to_infinity()
        )
        s = p | "Stream" >> stream
        panes = (
            s["side"]
            | "Early" >> b.WindowInto(
                ns.window.GlobalWindows(),
                trigger=t.AfterWatermark(early=t.AfterCount(1)),
                accumulation_mode=t.AccumulationMode.ACCUMULATING,
            )
            | "Key" >> b.Map(lambda x: ("k", x))
            | "Group" >> b.GroupByKey()
            | "Values" >> b.Map(lambda kv: sorted(kv[1]))
        )
        return s["main"] | "Read" >> b.Map(lambda x, s: (x, s), ns.pvalue.AsList(panes))

    rows = assert_spark_and_engine_same_as_beam(build, **spark_session_kind)
    everything = ("<list>", (("<list>", ("s1",)), ("<list>", ("s1", "s2")), ("<list>", ("s1", "s2", "s3")), ("<list>", ("s1", "s2", "s3"))))
    assert sorted(row[0] for row in rows) == [("main1", everything), ("main2", everything)]


def _backend_of_kind(request, spark_session_kind):
    """A maker of new backends of the kind ``spark_session_kind`` names: the classic session's,
    or Spark Connect's on the tests' server."""
    if "spark_remote" not in spark_session_kind:
        from sparkbeam.runners.spark.backend import SparkBackend

        spark = request.getfixturevalue("spark")
        return lambda: SparkBackend(spark)
    from sparkbeam.runners.spark.connect.backend import ConnectBackend
    from sparkbeam.runners.spark.connect.session import ConnectTarget, connect_session

    session = connect_session(ConnectTarget(spark_session_kind["spark_remote"], "--spark_remote"))
    return lambda: ConnectBackend(session, num_partitions=2)


def test_waiting_elements_are_checkpointed_with_the_keyed_state_and_restored(request, spark_session_kind, tmp_path):
    """The waiting elements are keyed state: saved by ``save_state``, restored into another
    backend, and released there exactly as in an uninterrupted run (on a classic session and
    under Spark Connect, whose parked rows go into the same checkpoint files)."""
    from pyspark import cloudpickle

    from sparkbeam.runners.core.loop.clock import ManualClock
    from sparkbeam.runners.core.loop.steps import StepLoop
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.runners.spark.sealing import Sealer

    new_backend = _backend_of_kind(request, spark_session_kind)

    p = beam.Pipeline()
    stream = p | "Stream" >> main_then_side(_sparkbeam_ns())
    main = stream["main"] | "MainWindows" >> beam.WindowInto(beam.window.FixedWindows(10))
    side = stream["side"] | "SideWindows" >> beam.WindowInto(beam.window.FixedWindows(10))
    beam.capture(main | "List" >> beam.Map(lambda x, s: (x, sorted(s)), beam.pvalue.AsList(side)))
    plan = plan_stages(lower(p))
    (views,) = plan.lowered.captured

    def emitted(loop):
        return sorted((canonical(e.value), e.timestamp.micros, str(e.windows), e.step) for e in loop.history.emitted_rows(views))

    uninterrupted = StepLoop(plan, new_backend(), ManualClock(), batch=False)
    uninterrupted.run()
    uninterrupted.backend.close()

    first = StepLoop(plan, new_backend(), ManualClock(), batch=False)
    while not any(r.side_input_waiting for r in first.history.records() if r.step == first.step - 1):
        first.run_step()
    first.run_step()  # one more step: the waiting elements are carried over a step, then saved
    waiting = {r.stage_id: r.side_input_waiting for r in first.history.records() if r.step == first.step - 1 and r.side_input_waiting}
    assert waiting, "nothing waits at the checkpoint: the test would test nothing"
    sealer = Sealer(os.urandom(32), scope="test")
    saved = first.backend.save_state(str(tmp_path), sealer, first.step)
    chains = first.backend.chains_after(first.step, saved)  # bases: each stage's first checkpoint
    assert set(waiting) <= set(saved)
    snapshot = cloudpickle.loads(cloudpickle.dumps({"loop": first.snapshot(), "backend": first.backend.snapshot()}))
    first.backend.close()

    resumed = StepLoop(plan, new_backend(), ManualClock(), batch=False)
    resumed.restore(snapshot["loop"])
    resumed.backend.restore(snapshot["backend"], {}, chains, lambda _, name: str(tmp_path / name), sealer)
    resumed.run()
    resumed.backend.close()
    assert emitted(resumed) == emitted(uninterrupted)
    assert [row[0] for row in emitted(resumed)] == [
        ("m1", ("<list>", (("a", 1), ("b", 2)))),
        ("m2", ("<list>", (("c", 3),))),
        ("m3", ("<list>", (("d", 4),))),
    ]


def test_the_timeline_of_a_waiting_stage_on_spark_equals_the_engines(spark_session_kind, monkeypatch):
    """The hold, the waiting count and the watermarks of the reading stage, step by step:
    on Spark (per-partition summaries, steps skipped when nothing can be released) as in
    the engine, whose timeline tests/core/test_side_input_wait.py checks. On Connect the
    reading stage runs only at the steps that bring it elements or let its side input
    release what waits (the tasks report ``ReleaseAt``), as on a classic session."""
    from sparkbeam.runners.spark.connect.backend import ConnectBackend
    from tests.core.test_side_input_wait import stream_with_a_waiting_element

    ran: list[int] = []
    materialise = ConnectBackend.materialise

    def counted(self, stage, *args, **kwargs):
        if stage.name == "Read":
            ran.append(1)
        return materialise(self, stage, *args, **kwargs)

    monkeypatch.setattr(ConnectBackend, "materialise", counted)

    def timeline(run, **options):
        p, _ = stream_with_a_waiting_element(**options)
        result = run(p)
        return [
            (r.step, r.input_watermark, r.output_watermark, r.earliest_hold, r.hold_key, r.hold_window,
             r.side_input_waiting, r.elements_in, r.elements_out)
            for r in result.watermarks().for_stage("Read")
        ]

    on_spark = timeline(lambda p: p.run(), **spark_session_kind)
    assert on_spark == timeline(lambda p: run_in_memory(p, streaming=True))
    assert any(row[6] == 1 and row[3] == 1_000_000 for row in on_spark)
    if spark_session_kind:
        # the step that brought 'x' and the one whose side watermark reached its window's end
        releasing = [row for before, row in itertools.pairwise(on_spark) if row[6] < before[6]]
        arriving = [row for row in on_spark if row[7]]
        assert len(ran) == len(arriving) + len(releasing) == 2 < len(on_spark)
