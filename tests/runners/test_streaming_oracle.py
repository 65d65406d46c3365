"""Streaming oracle pairs: TestStream pipelines on Beam's direct runner and on Spark.

Outputs are compared as multisets of (value, timestamp, window, pane), with the
overlapping-window rule switched off (current Beam does not apply it).
"""

from __future__ import annotations

import collections

import pytest

import sparkbeam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.runners.spark.connect.backend import CUT_EVERY
from tests.conformance.test_stateful_oracle import buffer_until_window_end
from tests.oracle import _pane_key, _sparkbeam_ns, _window_key, assert_same_as_beam, canonical

pytestmark = pytest.mark.spark


def scores_stream(ns):
    tv = ns.TimestampedValue
    return (
        ns.TestStream()
        .add_elements([tv(("alice", 3), 1), tv(("bob", 5), 2), tv(("alice", 2), 4)])
        .advance_watermark_to(8)
        .add_elements([tv(("bob", 1), 9), tv(("alice", 7), 12)])
        .advance_processing_time(30)
        .advance_watermark_to(15)
        .add_elements([tv(("alice", 1), 6)])  # late for [0, 10)
        .advance_watermark_to(40)
        .add_elements([tv(("bob", 4), 5)])  # beyond allowed lateness: dropped
        .advance_watermark_to_infinity()
    )


TRIGGERS = {
    "default": lambda t: t.DefaultTrigger(),
    "early_late": lambda t: t.AfterWatermark(early=t.AfterCount(2), late=t.AfterCount(1)),
    "repeated_count": lambda t: t.Repeatedly(t.AfterCount(2)),
    "processing_time": lambda t: t.AfterWatermark(early=t.AfterProcessingTime(10)),
}
# Beam's direct runner cannot be the oracle for the other two: with Repeatedly(AfterCount)
# it fails inside its executor ("exceptions must derive from BaseException"), and it fires
# processing-time timers after the watermark has passed the window, marking on-time panes
# LATE. Those triggers are pinned by expectations written by hand: our transcripts
# (tests/conformance/data/sparkbeam_transcripts.yaml, run on Spark too) and the tables of
# HAND_WRITTEN_PANES below; Spark must also equal the engine step by step.
BEAM_ORACLE_TRIGGERS = ["default", "early_late"]


def fixed_windows(trigger_name, mode):
    def build(ns, p):
        return (
            p
            | scores_stream(ns)
            | ns.beam.WindowInto(
                ns.window.FixedWindows(10),
                trigger=TRIGGERS[trigger_name](ns.trigger),
                accumulation_mode=getattr(ns.trigger.AccumulationMode, mode),
                allowed_lateness=20,
            )
            | ns.beam.CombinePerKey(sum)
        )

    return build


@pytest.mark.parametrize("mode", ["ACCUMULATING", "DISCARDING"])
@pytest.mark.parametrize("trigger_name", BEAM_ORACLE_TRIGGERS)
def test_fixed_windows_triggers_and_accumulation(spark, trigger_name, mode):
    assert_same_as_beam(fixed_windows(trigger_name, mode), streaming=True, overlapping_window_rule=False)


def emitted_by_step(result, pcoll):
    return sorted(
        (canonical(e.value), e.timestamp.micros, str(e.windows), repr(e.pane), e.step) for e in result.emissions(pcoll)
    )


@pytest.mark.parametrize("mode", ["ACCUMULATING", "DISCARDING"])
@pytest.mark.parametrize("trigger_name", sorted(TRIGGERS))
def test_spark_streaming_equals_the_engine_step_by_step(spark_session_kind, trigger_name, mode):
    build = fixed_windows(trigger_name, mode)
    results = []
    for run in ("spark", "engine"):
        p = sparkbeam.Pipeline(options=PipelineOptions(streaming=True, **(spark_session_kind if run == "spark" else {})))
        out = sparkbeam.capture(build(_sparkbeam_ns(), p))
        result = p.run() if run == "spark" else run_in_memory(p)
        results.append(emitted_by_step(result, out))
    assert results[0] == results[1]
    assert results[0]


# The panes of fixed_windows(trigger, mode) over scores_stream, worked out by hand from
# Beam's semantics (the rules are listed in tests/conformance/data/sparkbeam_transcripts.yaml),
# so that on Spark these two triggers are held to more than the engine's own answer.
# step: the TestStream event (one per step) that emits the pane; window: [start, end) in s;
# ts: the pane's timestamp in ms (OUTPUT_AT_EOW: the window's max timestamp).
#
# Repeatedly(AfterCount(2)): alice's 3+2 fire at once (step 0), bob's second element comes
# at step 2; at step 4 the watermark passes [0, 10), which has no watermark part and nothing
# pending; alice's late 1 (step 5) waits alone until the watermark passes both windows' GC
# times (29.999 s, 39.999 s) at step 6: [0, 10)'s last pane is LATE, [10, 20) never fired
# and its data came on time, so its only pane is ON_TIME; bob's 4 at step 7 is too late.
#
# AfterWatermark(early=AfterProcessingTime(10)): every pane's first element arrives at clock
# 0, so the three early panes are due at 10 and fire when the clock moves by 30 (step 3); the
# watermark passes [0, 10) at step 4 and [10, 20) at step 6, and each gets its ON_TIME pane
# even if empty (sum 0 in discarding mode). With no late trigger the ON_TIME pane finishes
# the window, so alice's late 1 is dropped.
HAND_WRITTEN_PANES = {
    ("repeated_count", "DISCARDING"): """
        step  key    sum  window  ts     timing   index  nonspeculative  last
        0     alice  5    0-10    9999   EARLY    0      -1              no
        2     bob    6    0-10    9999   EARLY    0      -1              no
        6     alice  1    0-10    9999   LATE     1      0               yes
        6     alice  7    10-20   19999  ON_TIME  0      0               yes
    """,
    ("repeated_count", "ACCUMULATING"): """
        step  key    sum  window  ts     timing   index  nonspeculative  last
        0     alice  5    0-10    9999   EARLY    0      -1              no
        2     bob    6    0-10    9999   EARLY    0      -1              no
        6     alice  6    0-10    9999   LATE     1      0               yes
        6     alice  7    10-20   19999  ON_TIME  0      0               yes
    """,
    ("processing_time", "DISCARDING"): """
        step  key    sum  window  ts     timing   index  nonspeculative  last
        3     alice  5    0-10    9999   EARLY    0      -1              no
        3     bob    6    0-10    9999   EARLY    0      -1              no
        3     alice  7    10-20   19999  EARLY    0      -1              no
        4     alice  0    0-10    9999   ON_TIME  1      0               yes
        4     bob    0    0-10    9999   ON_TIME  1      0               yes
        6     alice  0    10-20   19999  ON_TIME  1      0               yes
    """,
    ("processing_time", "ACCUMULATING"): """
        step  key    sum  window  ts     timing   index  nonspeculative  last
        3     alice  5    0-10    9999   EARLY    0      -1              no
        3     bob    6    0-10    9999   EARLY    0      -1              no
        3     alice  7    10-20   19999  EARLY    0      -1              no
        4     alice  5    0-10    9999   ON_TIME  1      0               yes
        4     bob    6    0-10    9999   ON_TIME  1      0               yes
        6     alice  7    10-20   19999  ON_TIME  1      0               yes
    """,
}


def pane_table(text):
    """The rows of a HAND_WRITTEN_PANES table as (step, value, timestamp ms, window, pane) in
    tests.oracle's form, so they compare with what Spark emitted."""
    header, *rows = [line.split() for line in text.strip().splitlines()]
    assert header == ["step", "key", "sum", "window", "ts", "timing", "index", "nonspeculative", "last"]
    panes = collections.Counter()
    for step, key, total, window, ts, timing, index, nonspeculative, last in rows:
        start, end = (int(bound) * 1000 for bound in window.split("-"))
        pane = (index == "0", last == "yes", timing, int(index), int(nonspeculative))
        panes[(int(step), (key, int(total)), int(ts), (start, end), pane)] += 1
    return panes


# Deliberately wrong, as Beam's transcripts include wrong cases: [0, 10)'s last pane given
# as ON_TIME, and [10, 20)'s pane left out. It must fail against what Spark emits.
WRONG_PANES = (
    ("repeated_count", "DISCARDING"),
    """
        step  key    sum  window  ts     timing   index  nonspeculative  last
        0     alice  5    0-10    9999   EARLY    0      -1              no
        2     bob    6    0-10    9999   EARLY    0      -1              no
        6     alice  1    0-10    9999   ON_TIME  1      0               yes
    """,
)


def assert_panes_match(emitted, expected):
    if emitted != expected:
        msg = f"missing: {sorted(expected - emitted)}\nunexpected: {sorted(emitted - expected)}"
        raise AssertionError(msg)


@pytest.mark.parametrize(("trigger_name", "mode"), sorted(HAND_WRITTEN_PANES))
def test_spark_streaming_matches_hand_written_panes(spark, trigger_name, mode):
    p = sparkbeam.Pipeline(options=PipelineOptions(streaming=True))
    out = sparkbeam.capture(fixed_windows(trigger_name, mode)(_sparkbeam_ns(), p))
    result = p.run()
    emitted = collections.Counter(
        (e.step, canonical(e.value), e.timestamp.micros // 1000, _window_key(w), _pane_key(e.pane))
        for e in result.emissions(out)
        for w in e.windows
    )
    assert_panes_match(emitted, pane_table(HAND_WRITTEN_PANES[(trigger_name, mode)]))
    if (trigger_name, mode) == WRONG_PANES[0]:
        with pytest.raises(AssertionError, match=r"(?s)missing: \[\(6, \('alice', 1\).*'ON_TIME'.*unexpected: .*'LATE'.*\('alice', 7\)"):
            assert_panes_match(emitted, pane_table(WRONG_PANES[1]))


def test_sessions_with_early_firings_group_by_key(spark):
    def build(ns, p):
        return (
            p
            | scores_stream(ns)
            | ns.beam.WindowInto(
                ns.window.Sessions(5),
                trigger=ns.trigger.AfterWatermark(early=ns.trigger.AfterCount(2)),
                accumulation_mode=ns.trigger.AccumulationMode.ACCUMULATING,
            )
            | ns.beam.GroupByKey()
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_two_grouping_stages_in_a_row(spark):
    def build(ns, p):
        per_user = (
            p
            | scores_stream(ns)
            | "Fixed" >> ns.beam.WindowInto(ns.window.FixedWindows(10))
            | "PerUser" >> ns.beam.CombinePerKey(sum)
        )
        return (
            per_user
            | "Rekey" >> ns.beam.Map(lambda kv: ("all", kv[1]))
            | "Total" >> ns.beam.CombinePerKey(sum)
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


# ---------------------------------------------------------------------------- re-stamped outputs
#
# A TimestampedValue output is windowed again by the input's window fn (Beam Python's
# ``_maybe_propagate_windowing_info``), in streaming as in batch.


def restamp_stream(ns):
    tv = ns.TimestampedValue
    return (
        ns.TestStream()
        .add_elements([tv(("alice", 3), 1), tv(("bob", 5), 2), tv(("alice", 2), 4)])
        .advance_watermark_to(8)
        .add_elements([tv(("bob", 1), 9), tv(("alice", 7), 12)])
        .advance_watermark_to(30)
        .add_elements([tv(("alice", 1), 33)])
        .advance_watermark_to_infinity()
    )


def later_by(ns, seconds):
    return f"Later{seconds}" >> ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam: ns.TimestampedValue(kv, t + seconds))


def test_reify_window_after_a_sessions_grouping_in_a_stream(spark):
    def build(ns, p):
        beam = ns.beam

        def reify(element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
            yield ns.TimestampedValue((element, timestamp.micros // 1000, (float(window.start), float(window.end))), timestamp)

        return (
            p
            | restamp_stream(ns)
            | beam.WindowInto(ns.window.Sessions(5))
            | beam.GroupByKey()
            | "Reify" >> beam.FlatMap(reify)  # lands in a new session at the pane's timestamp
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_a_restamp_moves_an_element_to_another_fixed_window_in_a_stream(spark):
    def build(ns, p):
        return (
            p
            | restamp_stream(ns)
            | ns.beam.WindowInto(ns.window.FixedWindows(10))
            | later_by(ns, 15)
            | ns.beam.GroupByKey()
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_a_restamp_in_sliding_windows_in_a_stream(spark):
    def build(ns, p):
        return (
            p
            | restamp_stream(ns)
            | ns.beam.WindowInto(ns.window.SlidingWindows(10, 5))
            | later_by(ns, 7)
            | ns.beam.CombinePerKey(sum)
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


def test_a_restamp_in_the_global_window_in_a_stream(spark):
    def build(ns, p):
        return (
            p
            | restamp_stream(ns)
            | later_by(ns, 100)
            | ns.beam.Map(lambda kv, t=ns.beam.DoFn.TimestampParam: (kv, t.micros // 1000))
        )

    assert_same_as_beam(build, streaming=True, overlapping_window_rule=False)


# ---------------------------------------------------------------------------- on Spark Connect


def test_a_stream_on_connect_has_the_classic_session_s_outputs_and_watermark_timeline(spark, connect_server, monkeypatch):
    """Fused maps, windowing, a lifted combine with early and late firings and a stateful
    DoFn with a timer: the same panes at the same steps, and the same timeline record per step
    and stage, on Spark Connect (keyed state as rows between steps) as on a classic session.

    With adaptive execution and its partition coalescing on (Spark's defaults, set here so
    that a changed default cannot hide it): a state row comes back to its partition only if
    ``repartition(n, "h")`` keeps its ``n`` partitions (keyed_steps.py's anchor)."""
    from sparkbeam.runners.spark.connect.session import ConnectTarget, connect_session

    session = connect_session(ConnectTarget(connect_server.url, "--spark_remote"))
    for key in ("spark.sql.adaptive.enabled", "spark.sql.adaptive.coalescePartitions.enabled"):
        session.conf.set(key, "true")
    ns = _sparkbeam_ns()
    runs, plans = [], []
    checkpoints = _checkpoints_by_stage(monkeypatch)
    for options in ({}, {"spark_remote": connect_server.url}):
        p = sparkbeam.Pipeline(options=PipelineOptions(streaming=True, **options))
        windowed = (
            p
            | scores_stream(ns)
            | "Tenfold" >> ns.beam.Map(lambda kv: (kv[0], kv[1] * 10))
            | ns.beam.WindowInto(
                ns.window.FixedWindows(10),
                trigger=TRIGGERS["early_late"](ns.trigger),
                accumulation_mode=ns.trigger.AccumulationMode.ACCUMULATING,
                allowed_lateness=20,
            )
        )
        sums = sparkbeam.capture(windowed | ns.beam.CombinePerKey(sum))
        buffered = sparkbeam.capture(windowed | ns.beam.ParDo(buffer_until_window_end(ns)))
        result = p.run()
        timeline = [
            (r.step, r.stage, r.input_watermark, r.output_watermark, r.earliest_hold, r.elements_in, r.elements_out, r.late_dropped, r.state_keys)
            for r in result.watermarks().records
        ]
        runs.append((emitted_by_step(result, sums), emitted_by_step(result, buffered), timeline))
        plans.append(str(result.physical_plan()))
    classic, connect = runs
    # The combine lifted on both: partials per key and window cross the shuffle
    for plan in plans:
        assert "stage 1 'CombinePerKey(sum)': lifted grouping" in plan, plan
    assert classic[0] and classic[1]  # both keyed stages emitted
    assert any(record[8] for record in classic[2])  # and kept state between steps
    assert connect == classic
    # Each keyed stage's state rows: an eager checkpoint (which cuts their lineage on the
    # server) at least every CUT_EVERY steps, lazy ones (one job fewer) in between.
    keyed = {stage: flags for (stage, keeps_state), flags in checkpoints.items() if keeps_state}
    assert len(keyed) == 2, checkpoints
    for flags in keyed.values():
        assert len(flags) > CUT_EVERY and True in flags and False in flags, flags
        lazy_runs = "".join("e" if eager else "l" for eager in flags).split("e")
        assert max(len(run) for run in lazy_runs) < CUT_EVERY, flags


def _checkpoints_by_stage(monkeypatch):
    """Connect's ``localCheckpoint`` calls during a run: (stage id, keeps state) -> eager flags."""
    from pyspark.sql.connect.dataframe import DataFrame

    from sparkbeam.runners.spark.connect.backend import ConnectBackend

    calls: dict[tuple[int, bool], list[bool]] = collections.defaultdict(list)
    current: list[tuple[int, bool]] = []
    materialise, local_checkpoint = ConnectBackend.materialise, DataFrame.localCheckpoint

    def materialising(self, stage, df, collected=frozenset(), *, keeps_state=False):
        current.append((stage.id, keeps_state))
        try:
            return materialise(self, stage, df, collected, keeps_state=keeps_state)
        finally:
            current.pop()

    def checkpointing(self, eager=True, *args, **kwargs):
        if current:
            calls[current[-1]].append(eager)
        return local_checkpoint(self, eager, *args, **kwargs)

    monkeypatch.setattr(ConnectBackend, "materialise", materialising)
    monkeypatch.setattr(DataFrame, "localCheckpoint", checkpointing)
    return calls
