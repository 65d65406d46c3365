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


@pytest.mark.spark
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


@pytest.mark.spark
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


@pytest.mark.spark
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


@pytest.mark.spark
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


@pytest.mark.spark
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


# -- on the engine alone (no Spark): what the oracle pairs above do not reach -------------


def _in_engine(build):
    from apache_beam.options.pipeline_options import PipelineOptions

    import sparkbeam
    from tests.beam_frontend.engine import emitted_values, run_in_engine

    p = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions([]))
    out = build(p)
    sparkbeam.capture(out)
    plan, loop = run_in_engine(p)
    return emitted_values(plan, loop, out)


def test_ordered_list_and_set_state_read_back_decoded_in_order():
    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms.userstate import (
        OrderedListStateSpec,
        SetStateSpec,
        TimeDomain,
        TimerSpec,
        on_timer,
    )
    from apache_beam.utils.timestamp import Timestamp

    class Ordered(beam.DoFn):
        ORDER = OrderedListStateSpec("order", VarIntCoder())
        DISTINCT = SetStateSpec("distinct", VarIntCoder())
        END = TimerSpec("end", TimeDomain.WATERMARK)

        def process(self, element, order=beam.DoFn.StateParam(ORDER), distinct=beam.DoFn.StateParam(DISTINCT), end=beam.DoFn.TimerParam(END)):
            order.add((Timestamp.of(element[1]), element[1]))
            distinct.add(element[1])
            end.set(100)

        @on_timer(END)
        def ended(self, order=beam.DoFn.StateParam(ORDER), distinct=beam.DoFn.StateParam(DISTINCT)):
            middle = [value for _, value in order.read_range(2, 4)]
            order.clear_range(0, 3)
            yield ([value for _, value in order.read()], middle, sorted(distinct.read()))

    values = _in_engine(lambda p: p | beam.Create([("k", 3), ("k", 1), ("k", 5), ("k", 3), ("k", 2)]) | beam.ParDo(Ordered()))
    assert values == [([3, 3, 5], [2, 3, 3], [1, 2, 3, 5])]


def test_dynamic_timers_fire_per_tag_and_a_cleared_one_never():
    from apache_beam.transforms.userstate import TimeDomain, TimerSpec, on_timer

    class Tagged(beam.DoFn):
        ALARM = TimerSpec("alarm", TimeDomain.WATERMARK)

        def process(self, element, alarm=beam.DoFn.TimerParam(ALARM)):
            _, (tag, at) = element
            alarm.set(at, dynamic_timer_tag=tag)
            if tag == "early":
                alarm.set(at + 5, dynamic_timer_tag=tag)  # replaces the setting of this tag only
            if tag == "dropped":
                alarm.clear(dynamic_timer_tag=tag)

        @on_timer(ALARM)
        def rang(self, tag=beam.DoFn.DynamicTimerTagParam, timestamp=beam.DoFn.TimestampParam, key=beam.DoFn.KeyParam):
            yield (key, tag, int(timestamp))

    values = _in_engine(
        lambda p: p
        | beam.Create([("k", ("late", 30)), ("k", ("early", 10)), ("k", ("dropped", 20))])
        | beam.ParDo(Tagged())
    )
    assert sorted(values) == [("k", "early", 15), ("k", "late", 30)]


def test_state_holds_the_coders_copy_not_the_object_added():
    from apache_beam.coders import PickleCoder
    from apache_beam.transforms.userstate import BagStateSpec, TimeDomain, TimerSpec, on_timer

    class Mutating(beam.DoFn):
        BAG = BagStateSpec("bag", PickleCoder())
        END = TimerSpec("end", TimeDomain.WATERMARK)

        def process(self, element, bag=beam.DoFn.StateParam(BAG), end=beam.DoFn.TimerParam(END)):
            added = [element[1]]
            bag.add(added)
            added.append("changed after add")  # not what the bag holds
            end.set(10)

        @on_timer(END)
        def ended(self, bag=beam.DoFn.StateParam(BAG)):
            yield sorted(map(tuple, bag.read()))

    values = _in_engine(lambda p: p | beam.Create([("k", 1), ("k", 2)]) | beam.ParDo(Mutating()))
    assert values == [[(1,), (2,)]]


@pytest.mark.spark
def test_combining_state_of_top_with_a_key_function_is_read_in_a_later_step(spark):
    """A combining state cell of Beam's ``TopCombineFn`` with ``key=``: its accumulator is
    compacted before the key's state is kept (its comparables lose their key function when
    encoded), so a timer of a later step reads it, as on Beam's runner."""

    def build(ns, p):
        from apache_beam.transforms.combiners import TopCombineFn
        from apache_beam.transforms.userstate import (
            CombiningValueStateSpec,
            TimeDomain,
            TimerSpec,
            on_timer,
        )

        class Shortest(beam.DoFn):
            NAMES = CombiningValueStateSpec("names", combine_fn=TopCombineFn(2, key=len, reverse=True))
            FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

            def process(self, element, names=beam.DoFn.StateParam(NAMES), flush=beam.DoFn.TimerParam(FLUSH)):
                names.add(element[1])
                flush.set(20)

            @on_timer(FLUSH)
            def flushed(self, key=beam.DoFn.KeyParam, names=beam.DoFn.StateParam(NAMES)):
                yield key, sorted(names.read())

        tv = ns.TimestampedValue
        stream = (
            ns.TestStream()
            .add_elements([tv(("summer", "Green apple"), 1), tv(("summer", "Corn"), 2), tv(("fall", "Carrot"), 3)])
            .advance_watermark_to(5)
            .add_elements([tv(("summer", "Carrot"), 6)])
            .advance_watermark_to_infinity()
        )
        return p | stream | ns.beam.ParDo(Shortest())

    assert_runners_agree(build, streaming=True)
