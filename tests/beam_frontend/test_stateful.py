"""Beam's stateful and timely DoFns on sparkbeam's runner, against Beam's local runner.

Each builder is an unmodified apache_beam pipeline (tiny inputs) run by Beam's own runner and
with ``--runner=sparkbeam.SparkRunner``; outputs are compared with their timestamps, windows
and panes (``pairs.assert_runners_agree``). The DoFns are made inside the builders, so that
Spark's workers receive them by value. Beam's own ``userstate_test.py`` runs in the README's
conformance table; these pin what its tests do not compare (timestamps, windows, holds).
"""

from __future__ import annotations

import apache_beam as beam
import pytest

from tests.beam_frontend.pairs import assert_runners_agree, run_on_sparkbeam

pytestmark = pytest.mark.spark


def _joining_fn(ns):
    """Bag, read-modify-write and combining state, an event-time timer per key."""
    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms import combiners
    from apache_beam.transforms.userstate import (
        BagStateSpec,
        CombiningValueStateSpec,
        ReadModifyWriteStateSpec,
        TimeDomain,
        TimerSpec,
        on_timer,
    )

    class Join(beam.DoFn):
        SEEN = BagStateSpec("seen", VarIntCoder())
        LATEST = ReadModifyWriteStateSpec("latest", VarIntCoder())
        COUNT = CombiningValueStateSpec("count", VarIntCoder(), combiners.CountCombineFn())
        FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

        def process(
            self,
            element,
            timestamp=beam.DoFn.TimestampParam,
            seen=beam.DoFn.StateParam(SEEN),
            latest=beam.DoFn.StateParam(LATEST),
            count=beam.DoFn.StateParam(COUNT),
            flush=beam.DoFn.TimerParam(FLUSH),
        ):
            # Whatever the order of a key's elements: a flush ten seconds after the latest.
            seen.add(element[1])
            count.add(1)
            newest = max(latest.read() or 0, int(timestamp))
            latest.write(newest)
            flush.set(newest + 10)

        @on_timer(FLUSH)
        def flushed(
            self,
            key=beam.DoFn.KeyParam,
            timestamp=beam.DoFn.TimestampParam,
            window=beam.DoFn.WindowParam,
            seen=beam.DoFn.StateParam(SEEN),
            count=beam.DoFn.StateParam(COUNT),
        ):
            yield ("flushed", key, sorted(seen.read()), count.read(), int(timestamp), str(window))
            seen.clear()
            count.clear()

    return Join()


def test_bag_value_and_combining_state_with_an_event_time_timer_in_batch(spark):
    def build(ns, p):
        tv = ns.TimestampedValue
        return (
            p
            | ns.beam.Create([("a", 1, 1), ("a", 2, 3), ("b", 5, 2), ("a", 3, 40)])
            | ns.beam.Map(lambda e: tv((e[0], e[1]), e[2]))
            | ns.beam.WindowInto(ns.window.FixedWindows(30))
            | ns.beam.ParDo(_joining_fn(ns))
        )

    assert_runners_agree(build)


def test_timers_fire_as_a_test_stream_moves_the_watermark_and_outputs_carry_their_time(spark):
    def build(ns, p):
        tv = ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv(("a", 1), 1), tv(("b", 7), 2)])
            .advance_watermark_to(5)
            .add_elements([tv(("a", 2), 6)])
            .advance_watermark_to(13)  # b's flush at 12 fires, a's (now at 16) waits
            .add_elements([tv(("a", 3), 14)])
            .advance_watermark_to_infinity()
        )
        return p | stream | ns.beam.ParDo(_joining_fn(ns))

    result = assert_runners_agree(build, streaming=True)
    assert result.watermarks().for_stage("ParDo(Join)")


def test_a_processing_time_timer_fires_from_the_test_streams_clock(spark):
    def build(ns, p):
        from apache_beam.coders import VarIntCoder
        from apache_beam.transforms.userstate import BagStateSpec, TimeDomain, TimerSpec, on_timer

        class Buffer(beam.DoFn):
            BUFFER = BagStateSpec("buffer", VarIntCoder())
            EMIT = TimerSpec("emit", TimeDomain.REAL_TIME)

            def process(self, element, buffer=beam.DoFn.StateParam(BUFFER), emit=beam.DoFn.TimerParam(EMIT)):
                buffer.add(element[1])
                emit.set(100)  # an absolute processing time

            @on_timer(EMIT)
            def emitted(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
                yield (key, sorted(buffer.read()))
                buffer.clear()

        tv = ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv(("a", 1), 1), tv(("a", 2), 2)])
            .advance_processing_time(150)
            .add_elements([tv(("a", 3), 3)])
            .advance_watermark_to_infinity()
        )
        return p | stream | beam.ParDo(Buffer())

    assert_runners_agree(build, streaming=True)


def test_a_pending_timer_holds_the_stages_output_watermark(spark):
    def build(ns, p):
        from apache_beam.transforms.userstate import TimeDomain, TimerSpec, on_timer

        class Remind(beam.DoFn):
            LATER = TimerSpec("later", TimeDomain.WATERMARK)

            def process(self, element, later=beam.DoFn.TimerParam(LATER)):
                later.set(20)

            @on_timer(LATER)
            def reminded(self, key=beam.DoFn.KeyParam):
                yield key

        tv = ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv(("a", 1), 5)])
            .advance_watermark_to(15)
            .advance_watermark_to(30)
            .advance_watermark_to_infinity()
        )
        return p | stream | "Remind" >> beam.ParDo(Remind())

    rows, result = run_on_sparkbeam(build, streaming=True)
    assert [(value, millis) for value, millis, _, _ in rows.elements()] == [("a", 20_000)]
    records = result.watermarks().for_stage("Remind")
    at_15 = [r for r in records if r.input_watermark == 15_000_000]
    # The timer set for 20 holds the stage at 20 while its input is at 15 ...
    assert at_15 and all(r.earliest_hold == 20_000_000 for r in at_15)
    assert all(r.output_watermark <= 20_000_000 for r in records if r.earliest_hold == 20_000_000)
    assert any(r.hold_key is not None and "a" in r.hold_key for r in at_15)
    # ... and once it has fired, nothing holds it.
    assert records[-1].earliest_hold is None


def test_nexmark_query3s_join_fn_on_a_cogroup_by_key(spark):
    def build(ns, p):
        from apache_beam.testing.benchmarks.nexmark import nexmark_util
        from apache_beam.testing.benchmarks.nexmark.models import nexmark_model
        from apache_beam.testing.benchmarks.nexmark.queries import nexmark_query_util, query3
        from apache_beam.utils.timestamp import Timestamp

        nexmark_util.setup_coder()
        person = nexmark_model.Person(7, "Ada", "a@x", "1", "Boise", "ID", Timestamp.of(1), "x")
        auctions = [
            nexmark_model.Auction(i, "item", "", 1, 2, Timestamp.of(2), Timestamp.of(90), 7, 10, "x") for i in (1, 2)
        ]
        tv = ns.TimestampedValue
        people = p | "People" >> beam.Create([tv((7, person), 1)])
        sold = p | "Auctions" >> beam.Create([tv((7, a), 2) for a in auctions] + [tv((8, auctions[0]), 3)])
        joined = (
            {nexmark_query_util.AUCTION_TAG: sold, nexmark_query_util.PERSON_TAG: people}
            | beam.CoGroupByKey()
            | beam.ParDo(query3.JoinFn(600))
        )
        return joined | beam.Map(lambda pair: (pair[0].id, pair[1].name))

    assert_runners_agree(build)
