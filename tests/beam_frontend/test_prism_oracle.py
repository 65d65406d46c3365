"""Beam's streaming semantics, with Beam's Prism runner as a second oracle.

Prism is Beam's portable reference runner (Go, built from Beam's module by tools/prism.py):
it runs TestStream pipelines portably, with watermarks, triggers and panes. Each
apache_beam pipeline here runs unchanged on Prism (one job server per test process: the
``prism`` fixture; LOOPBACK, the SDK worker in this process) and with
``--runner=sparkbeam.SparkRunner`` in streaming mode; outputs are compared in full as
multisets of (value, timestamp, window, pane).

Where Prism 2.77 departs from Beam's documented semantics, or from Beam's Python SDK where
the SDKs differ, a case is not compared with it (Beam's direct runner stays the oracle there:
test_runners_agree.py, the transcript suites). Seen on these same pipelines:

- Sessions: Prism merges sessions that only touch ([10, 15) and [15, 20) become [10, 25);
  Beam's ``IntervalWindow``s merge only when they overlap), gives the pane of a merged
  session ``EARLY`` with index -1 under the default trigger, and refuses any other trigger
  on merging windows ("Using stateful triggers with merging windows isn't currently
  supported in prism", Beam issue 31438).
- ``OnTimeBehavior.FIRE_ALWAYS`` (what Beam's Python SDK declares): after an early firing in
  ``DISCARDING`` mode Prism emits no empty ON_TIME pane, so its later pane indices are one lower.
- Closing: at a window's garbage collection Prism emits one more, final LATE pane of an
  ``ACCUMULATING`` window even when nothing arrived since its last pane, and after
  ``AfterWatermark(early=AfterProcessingTime(...))`` finished with its ON_TIME pane; Beam's
  Python runners (and sparkbeam) end with the last pane that fired.
- With ``allowed_lateness=0`` Prism marks the ON_TIME pane ``is_last`` (Java's
  ``ReduceFnRunner``: end of window and garbage collection are one timer); Beam's Python
  runners and sparkbeam do not. The cases below use a lateness above 0.
- Count triggers: Prism evaluates them per element, Beam's Python runners and sparkbeam per
  bundle (both allowed: a trigger fires at some point after its condition holds), so the
  count cases here bring one element per TestStream event.
"""

from __future__ import annotations

import pytest

from tests.beam_frontend.pairs import assert_runners_agree

pytestmark = [pytest.mark.spark, pytest.mark.prism]


def agree_with_prism(prism, build):
    return assert_runners_agree(build, streaming=True, beam_runner="PrismRunner", beam_flags=prism.pipeline_flags())


def scores_stream(ns):
    """Two keys in 10 s windows: early panes, data after them before the watermark passes
    (no empty ON_TIME pane), late data within the allowed lateness (20 s) and behind it."""
    tv = ns.TimestampedValue
    return (
        ns.TestStream()
        .add_elements([tv(("alice", 3), 1), tv(("bob", 5), 2), tv(("alice", 2), 4)])
        .advance_watermark_to(5)
        .add_elements([tv(("bob", 1), 9), tv(("alice", 7), 12)])
        .add_elements([tv(("alice", 4), 8), tv(("bob", 7), 3)])
        .advance_watermark_to(15)
        .add_elements([tv(("alice", 1), 6)])  # late for [0, 10)
        .add_elements([tv(("alice", 6), 19)])
        .add_elements([tv(("alice", 2), 17)])
        .advance_watermark_to(25)
        .add_elements([tv(("bob", 2), 7)])  # late, 5 s before [0, 10)'s garbage collection
        .advance_watermark_to(60)
        .add_elements([tv(("bob", 4), 5)])  # behind the allowed lateness: dropped
        .advance_watermark_to_infinity()
    )


def test_default_trigger_fires_on_time_then_once_per_late_element(spark, prism):
    def build(ns, p):
        return (
            p
            | scores_stream(ns)
            | ns.beam.WindowInto(ns.window.FixedWindows(10), allowed_lateness=20)
            | ns.beam.GroupByKey()
            | ns.beam.MapTuple(lambda key, values: (key, sorted(values)))
        )

    agree_with_prism(prism, build)


def test_early_on_time_and_late_panes_discarding(spark, prism):
    def build(ns, p):
        t = ns.trigger
        return (
            p
            | scores_stream(ns)
            | ns.beam.WindowInto(
                ns.window.FixedWindows(10),
                trigger=t.AfterWatermark(early=t.AfterCount(2), late=t.AfterCount(1)),
                accumulation_mode=t.AccumulationMode.DISCARDING,
                allowed_lateness=20,
            )
            | ns.beam.CombinePerKey(sum)
        )

    agree_with_prism(prism, build)


@pytest.mark.parametrize("mode", ["ACCUMULATING", "DISCARDING"])
def test_repeated_count_trigger_in_both_accumulation_modes(spark, prism, mode):
    def build(ns, p):
        tv = ns.TimestampedValue
        stream = ns.TestStream()
        for value, at in [(1, 1), (2, 2), (3, 3), (4, 11), (5, 21), (6, 22), (7, 23)]:
            stream = stream.add_elements([tv(("k", value), at)])
        t = ns.trigger
        return (
            p
            | stream.advance_watermark_to_infinity()
            | ns.beam.WindowInto(
                ns.window.FixedWindows(100),
                trigger=t.Repeatedly(t.AfterCount(2)),
                accumulation_mode=getattr(t.AccumulationMode, mode),
            )
            | ns.beam.CombinePerKey(sum)
        )

    agree_with_prism(prism, build)


def test_a_second_grouping_sees_the_first_ones_panes_on_time(spark, prism):
    def build(ns, p):
        return (
            p
            | scores_stream(ns)
            | "Tens" >> ns.beam.WindowInto(ns.window.FixedWindows(10), allowed_lateness=20)
            | "PerKey" >> ns.beam.CombinePerKey(sum)
            | ns.beam.Map(lambda kv: ("all", kv[1]))
            | "Twenties" >> ns.beam.WindowInto(ns.window.FixedWindows(20), allowed_lateness=20)
            | "Total" >> ns.beam.CombinePerKey(sum)
        )

    agree_with_prism(prism, build)
