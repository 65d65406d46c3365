"""Translating apache_beam pipelines into the engine's ops, run on the engine alone (no Spark).

Windows, window fns and triggers map onto the engine's; DoFns run through Beam's own
DoFnRunner with every parameter and view kind; groupings key by Beam's coders; and what
cannot be translated is refused, naming the transform, before Spark starts.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam import pvalue as beam_pvalue
from apache_beam.io.unbounded_source import UnboundedCountingSource
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import userstate
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.utils.timestamp import Duration as BeamDuration
from apache_beam.utils.timestamp import Timestamp as BeamTimestamp

import sparkbeam
from sparkbeam import trigger, window
from sparkbeam.runners.beam.splittable import BeamSplittableParDoOp
from sparkbeam.runners.beam.translate import translate
from sparkbeam.runners.beam.windowing import (
    BeamWindowFn,
    engine_trigger,
    engine_windowfn,
    engine_windowing,
    to_beam_window,
    to_engine_window,
)
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from tests.beam_frontend.engine import emitted_values, plan_of, run_in_engine


def beam_pipeline() -> beam.Pipeline:
    return beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions([]))


@pytest.mark.parametrize(
    ("beam_fn", "engine_fn"),
    [
        (beam_window.GlobalWindows(), window.GlobalWindows()),
        (beam_window.FixedWindows(60, 15), window.FixedWindows(60, 15)),
        (beam_window.SlidingWindows(60, 20, 5), window.SlidingWindows(60, 20, 5)),
        (beam_window.Sessions(30), window.Sessions(30)),
        (beam_window.FixedWindows(BeamDuration(micros=1500)), window.FixedWindows(0.0015)),
    ],
)
def test_beams_built_in_window_fns_become_the_engines_own(beam_fn, engine_fn):
    assert engine_windowfn(beam_fn) == engine_fn


def test_windows_convert_both_ways_and_global_windows_hash_alike_in_every_process():
    interval = beam_window.IntervalWindow(10, 70)
    engine = to_engine_window(interval)
    assert engine == window.IntervalWindow(10, 70)
    assert to_beam_window(engine) == interval
    assert to_engine_window(beam_window.GlobalWindow()) == window.GlobalWindow()
    # The engine shuffles by window: its global window's hash is a constant, Beam's is not.
    assert hash(to_engine_window(beam_window.GlobalWindow())) == hash(window.GlobalWindow())


class EvenSeconds(beam_window.NonMergingWindowFn):
    """A custom Beam WindowFn: two-second windows starting on even seconds."""

    def assign(self, context):
        start = context.timestamp.micros // 2_000_000 * 2
        return [beam_window.IntervalWindow(start, start + 2)]

    def get_window_coder(self):
        return beam.coders.coders.IntervalWindowCoder()


class MySessions(beam_window.Sessions):
    """Sessions under another name: not Beam's own class, so it runs wrapped."""


def test_a_custom_window_fn_is_wrapped_and_assigns_as_written():
    fn = engine_windowfn(EvenSeconds())
    assert isinstance(fn, BeamWindowFn) and not fn.is_merging()
    assert fn.assign(window.WindowFn.AssignContext(5.5)) == [window.IntervalWindow(4, 6)]


def test_a_custom_merging_window_fn_merges_as_beams_sessions_do():
    fn = engine_windowfn(MySessions(10))
    assert isinstance(fn, BeamWindowFn) and fn.is_merging()
    merged = []

    class Context(window.WindowFn.MergeContext):
        def merge(self, to_be_merged, merge_result):
            merged.append((sorted(map(str, to_be_merged)), str(merge_result)))

    fn.merge(Context([window.IntervalWindow(0, 10), window.IntervalWindow(5, 15), window.IntervalWindow(15, 25)]))
    assert merged == [(["[0.0, 10.0)", "[5.0, 15.0)"], "[0.0, 15.0)")]  # Beam's text for windows


@pytest.mark.parametrize(
    ("beam_spec", "engine_spec"),
    [
        (beam_trigger.DefaultTrigger(), trigger.DefaultTrigger()),
        (beam_trigger.AfterCount(3), trigger.AfterCount(3)),
        (beam_trigger.AfterProcessingTime(1.5), trigger.AfterProcessingTime(1.5)),
        (
            beam_trigger.AfterWatermark(early=beam_trigger.AfterCount(2), late=beam_trigger.AfterCount(1)),
            trigger.AfterWatermark(early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
        ),
        (beam_trigger.Repeatedly(beam_trigger.AfterCount(2)), trigger.Repeatedly(trigger.AfterCount(2))),
        (
            beam_trigger.AfterAny(beam_trigger.AfterCount(5), beam_trigger.AfterProcessingTime(10)),
            trigger.AfterAny(trigger.AfterCount(5), trigger.AfterProcessingTime(10)),
        ),
        (beam_trigger.AfterAll(beam_trigger.AfterCount(2), beam_trigger.AfterWatermark()), trigger.AfterAll(trigger.AfterCount(2), trigger.AfterWatermark())),
        (beam_trigger.AfterEach(beam_trigger.AfterCount(2), beam_trigger.AfterCount(3)), trigger.AfterEach(trigger.AfterCount(2), trigger.AfterCount(3))),
        (beam_trigger.OrFinally(beam_trigger.Repeatedly(beam_trigger.AfterCount(1)), beam_trigger.AfterCount(3)), trigger.OrFinally(trigger.Repeatedly(trigger.AfterCount(1)), trigger.AfterCount(3))),
        (beam_trigger.Always(), trigger.Always()),
        (beam_trigger._Never(), trigger.Never()),
    ],
)
def test_beams_triggers_become_the_engines_specs(beam_spec, engine_spec):
    assert engine_trigger(beam_spec, "T") == engine_spec


def test_a_windowing_strategy_keeps_accumulation_timestamp_combiner_and_lateness():
    strategy = beam.Windowing(
        beam_window.SlidingWindows(10, 5),
        triggerfn=beam_trigger.AfterWatermark(late=beam_trigger.AfterCount(1)),
        accumulation_mode=beam_trigger.AccumulationMode.ACCUMULATING,
        timestamp_combiner=beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST,
        allowed_lateness=30,
    )
    translated = engine_windowing(strategy, "W")
    assert translated.windowfn == window.SlidingWindows(10, 5)
    assert translated.triggerfn == trigger.AfterWatermark(late=trigger.AfterCount(1))
    assert translated.accumulation_mode is trigger.AccumulationMode.ACCUMULATING
    assert translated.timestamp_combiner is window.TimestampCombiner.OUTPUT_AT_EARLIEST
    assert translated.allowed_lateness.micros == 30_000_000


class Annotate(beam.DoFn):
    """Every DoFn feature the front end hands to Beam's DoFnRunner, in one DoFn."""

    def setup(self):
        self.ready = True

    def start_bundle(self):
        self.seen = 0

    def process(self, element, scale, names, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam,
                pane=beam.DoFn.PaneInfoParam, single=None, every=None, multi=None):
        assert self.ready
        self.seen += 1
        key, value = element
        yield (key, value * scale, names[key], single, sorted(every), sorted(multi[key]), timestamp.micros // 1_000_000, window.end.micros // 1_000_000, pane.is_first)
        if value > 2:
            yield beam_pvalue.TaggedOutput("big", value)
        yield beam_window.TimestampedValue(("restamped", value), 100 + value)

    def finish_bundle(self):
        # No current element: a WindowedValue says where the output goes.
        yield beam.utils.windowed_value.WindowedValue(("bundle", self.seen), 0, [beam_window.GlobalWindow()])


def test_dofns_run_through_beams_dofn_runner_with_parameters_side_inputs_and_tagged_outputs():
    p = beam_pipeline()
    main = (
        p
        | "Main" >> beam.Create([("a", 1), ("b", 3)])
        | beam.Map(lambda kv: beam_window.TimestampedValue(kv, kv[1]))
        | beam.WindowInto(beam_window.FixedWindows(10))
    )
    scale = p | "Scale" >> beam.Create([10])
    names = p | "Names" >> beam.Create([("a", "alpha"), ("b", "beta")])
    every = p | "Every" >> beam.Create([3, 1, 2])
    multi = p | "Multi" >> beam.Create([("a", 1), ("a", 2), ("b", 3)])
    outputs = main | beam.ParDo(
        Annotate(),
        beam_pvalue.AsSingleton(scale),
        beam_pvalue.AsDict(names),
        single=beam_pvalue.AsSingleton(scale),
        every=beam_pvalue.AsIter(every),
        multi=beam_pvalue.AsMultiMap(multi),
    ).with_outputs("big", main="main")
    for pcoll in (outputs.main, outputs.big):
        sparkbeam.capture(pcoll)
    plan, loop = run_in_engine(p)
    main_values = emitted_values(plan, loop, outputs.main)
    assert sorted(v for v in main_values if v[0] in ("a", "b")) == [
        ("a", 10, "alpha", 10, [1, 2, 3], [1, 2], 1, 10, True),
        ("b", 30, "beta", 10, [1, 2, 3], [3], 3, 10, True),
    ]
    assert sorted(v for v in main_values if v[0] == "restamped") == [("restamped", 1), ("restamped", 3)]
    assert sum(v[1] for v in main_values if v[0] == "bundle") == 2  # one per bundle, counting its elements
    assert emitted_values(plan, loop, outputs.big) == [3]


def test_restamped_outputs_are_windowed_again_by_the_input_window_fn():
    p = beam_pipeline()
    out = (
        p
        | beam.Create([1])
        | beam.Map(lambda x: beam_window.TimestampedValue(x, 5))
        | beam.WindowInto(beam_window.FixedWindows(10))
        | beam.FlatMap(lambda x: [beam_window.TimestampedValue(x, 25)])
        | beam.Map(lambda x, w=beam.DoFn.WindowParam: (x, w.start.micros // 1_000_000))
    )
    sparkbeam.capture(out)
    plan, loop = run_in_engine(p)
    assert emitted_values(plan, loop, out) == [(1, 20)]


def test_keys_group_by_their_encoding_as_in_beam():
    p = beam_pipeline()
    grouped = (
        p
        | beam.Create([(1, "int"), (1.0, "float"), ([1, 2], "list"), ([1, 2], "list again")])
        | beam.GroupByKey()
        | beam.MapTuple(lambda key, values: (repr(key), sorted(values)))
    )
    sparkbeam.capture(grouped)
    plan, loop = run_in_engine(p)
    # 1 == 1.0 in Python, but their encodings differ; a list key has no hash, but an encoding.
    assert sorted(emitted_values(plan, loop, grouped)) == [("1", ["int"]), ("1.0", ["float"]), ("[1, 2]", ["list", "list again"])]


def test_combine_per_key_is_lifted_with_the_beam_combine_fn():
    p = beam_pipeline()
    totals = p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | "Total" >> beam.CombinePerKey(beam.combiners.MeanCombineFn())
    sparkbeam.capture(totals)
    plan, loop = run_in_engine(p)
    assert sorted(emitted_values(plan, loop, totals)) == [("a", 2.0), ("b", 2.0)]
    (grouping,) = [stage for stage in plan.stages if stage.name == "Total"]
    assert grouping.grouping is not None and grouping.grouping.combine_fn is not None


def test_stages_are_named_by_beams_labels():
    p = beam_pipeline()
    (
        p
        | "Events" >> beam.Create([("a", 1)])
        | "Window" >> beam.WindowInto(beam_window.FixedWindows(60))
        | "Sum" >> beam.CombinePerKey(sum)
        | "Group" >> beam.GroupByKey()
    )
    names = [stage.name for stage in plan_of(p).stages]
    assert "Sum" in names and "Group" in names
    assert names[0] == "Events/Impulse"


class Stateful(beam.DoFn):
    """A stateful DoFn that reads a side input: what the stateful stage cannot give yet."""

    COUNT = userstate.ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())

    def process(self, element, side, count=beam.DoFn.StateParam(COUNT)):
        yield element


class Counting(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        yield element


class Primitive(beam.PTransform):
    """A primitive of a runner of the user's: a PCollection no translation knows how to make."""

    def expand(self, pbegin):
        return beam_pvalue.PCollection(pbegin.pipeline, is_bounded=True)


class Restricted(beam.DoFn, beam.transforms.core.RestrictionProvider):
    """An unbounded splittable DoFn (its own restriction provider)."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam()):  # noqa: B008 (Beam's way of asking for a tracker)
        yield element

    def initial_restriction(self, element):
        return beam.io.restriction_trackers.OffsetRange(0, 1)

    def create_tracker(self, restriction):
        return beam.io.restriction_trackers.OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return 1


@pytest.mark.parametrize(
    ("build", "label", "what"),
    [
        (
            lambda p: p | beam.Create([("a", 1)]) | "Count" >> beam.ParDo(Stateful(), beam.pvalue.AsList(p | "Side" >> beam.Create([1]))),
            "Count",
            "a stateful DoFn with side inputs",
        ),
        (
            lambda p: p
            | beam.Create([("a", 1)])
            | beam.WindowInto(beam_window.Sessions(10))
            | "Sessions" >> beam.ParDo(Counting()),
            "Sessions",
            "a stateful DoFn in merging windows",
        ),
        (lambda p: p | "Ticks" >> PeriodicImpulse(start_timestamp=0, fire_interval=1), "Ticks/GenSequence", "never ends"),
        (lambda p: p | "Mine" >> Primitive(), "Mine", "Primitive has no translation"),
    ],
    ids=["stateful-dofn-with-side-inputs", "stateful-dofn-in-sessions", "endless-periodic-impulse", "unknown-primitive"],
)
def test_what_cannot_be_translated_is_refused_naming_the_transform_before_spark_starts(monkeypatch, build, label, what):
    from sparkbeam.runners.spark import session

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started for a pipeline that cannot run")

    monkeypatch.setattr(session, "get_session", no_spark)
    p = beam_pipeline()
    build(p)
    with pytest.raises(NotImplementedError) as refused:
        p.run()
    assert isinstance(refused.value, UnsupportedError)
    assert f"'{label}'" in str(refused.value) and what in str(refused.value)
    assert "test_translation.py" in str(refused.value)  # where the user applied it


@pytest.mark.parametrize(
    ("build", "label"),
    [
        (lambda p: p | beam.Create([1]) | "Split" >> beam.ParDo(Restricted()), "Split"),
        (lambda p: p | "Ticks" >> beam.io.Read(UnboundedCountingSource(10)), "Ticks/ReadFromUnboundedSource/ReadUnbounded"),
    ],
    ids=["unbounded-splittable-dofn", "unbounded-read"],
)
def test_an_unbounded_splittable_dofn_is_refused_in_a_stream_and_translated_in_batch(build, label):
    stream = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions(["--streaming"]))
    build(stream)
    with pytest.raises(UnsupportedError, match=rf"'{label}' .*unbounded splittable DoFn.*in a stream"):
        translate(stream, streaming=True)
    batch = beam_pipeline()
    build(batch)
    assert any(op.label == label and isinstance(op, BeamSplittableParDoOp) for op in translate(batch).ops)


def test_timestamps_keep_microseconds():
    p = beam_pipeline()
    out = p | beam.Create([1]) | beam.Map(lambda x: beam_window.TimestampedValue(x, BeamTimestamp(micros=1_000_001))) | beam.Map(
        lambda x, t=beam.DoFn.TimestampParam: t.micros
    )
    sparkbeam.capture(out)
    plan, loop = run_in_engine(p)
    assert emitted_values(plan, loop, out) == [1_000_001]


def test_an_empty_interval_window_of_beam_stays_beams():
    # Beam allows [5, 5) (Beam's window_test assigns it); the engine's IntervalWindow does not.
    empty = beam_window.IntervalWindow(5, 5)
    assert to_beam_window(to_engine_window(empty)) == empty


def test_a_lifted_combine_keeps_the_combine_fn_as_given():
    # Beam's runners do not specialise a CombineFn by input type: the mean of ints is a float.
    p = beam_pipeline()
    mean = p | beam.Create([1, 2, 2]) | beam.combiners.Mean.Globally()
    sparkbeam.capture(mean)
    plan, loop = run_in_engine(p)
    assert emitted_values(plan, loop, mean) == [5 / 3]


def test_a_dofns_exception_names_its_step_as_beams_runners_do():
    def fail(x):
        raise ValueError(f"bad {x}")

    p = beam_pipeline()
    p | beam.Create([7]) | "Explode" >> beam.Map(fail) | "After" >> beam.Map(lambda x: x)
    with pytest.raises(ValueError, match=r"bad 7 \[while running 'Explode'\]") as raised:
        run_in_engine(p)
    assert any("test_translation.py" in note for note in getattr(raised.value, "__notes__", []))


def test_a_failure_downstream_passes_through_an_upstream_beam_dofn_unchanged():
    def fail(x):
        raise ValueError(f"bad {x}")

    p = beam_pipeline()
    p | beam.Create([7]) | "Up" >> beam.Map(lambda x: x + 1) | "Down" >> beam.Map(fail)
    with pytest.raises(ValueError) as raised:
        run_in_engine(p)
    assert str(raised.value) == "bad 8 [while running 'Down']"


FINALIZED: list[str] = []


class Finalizing(beam.DoFn):
    def process(self, element, finalizer=beam.DoFn.BundleFinalizerParam):
        finalizer.register(lambda: FINALIZED.append(f"after {element}"))
        yield element


def test_bundle_finalization_callbacks_run_after_the_bundle():
    FINALIZED.clear()
    p = beam_pipeline()
    out = p | beam.Create(["x"]) | beam.ParDo(Finalizing())
    sparkbeam.capture(out)
    plan, loop = run_in_engine(p)
    assert emitted_values(plan, loop, out) == ["x"]
    assert FINALIZED == ["after x"]
