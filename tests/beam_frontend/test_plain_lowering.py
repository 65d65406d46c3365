"""Beam's plain Maps, FlatMaps and Filters run on the engine's own DoFnRunner and fast paths
(runners/beam/plain.py), keys that are their own encoding skip Beam's coder, and Beam's
semantics stay: checked on the engine alone (no Spark), by which runner and path is taken."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam import pvalue as beam_pvalue
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window as beam_window
from apache_beam.utils import timestamp as beam_timestamp

import sparkbeam
from sparkbeam.metrics.execution import MetricsContainer, MetricsEnvironment
from sparkbeam.metrics.metricbase import MetricName
from sparkbeam.runners.beam import plain as beam_plain
from sparkbeam.runners.beam.metrics import tracking_in_place
from sparkbeam.runners.beam.pardo import BeamParDoOp
from sparkbeam.runners.beam.plain import BeamFnParDoOp, BeamFnRunner
from sparkbeam.runners.core.elements.fused import FusedBody
from tests.beam_frontend.engine import (
    emitted_values,
    op_labelled,
    plan_of,
    run_in_engine,
    sparkbeam_wv,
)


def beam_pipeline(*flags: str) -> beam.Pipeline:
    return beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions(list(flags)))


def double(x):
    return x * 2


def test_plain_beam_callables_become_the_engines_parDos_with_the_users_function():
    p = beam_pipeline()
    pairs = p | beam.Create([("a", 1)]) | "Map" >> beam.Map(lambda kv: kv)
    _ = pairs | "Double" >> beam.MapTuple(lambda k, v: (k, double(v)))
    _ = pairs | "Values" >> beam.Map(double, *()) | "Keep" >> beam.Filter(bool)
    _ = pairs | "Flat" >> beam.FlatMap(lambda kv: kv) | "Plus" >> beam.Map(lambda x, n: x, 3)
    _ = pairs | "FlatTuple" >> beam.FlatMapTuple(lambda k, v: [k])
    plan = plan_of(p)
    shapes = {label: op_labelled(plan, label).dofn.shape for label in ("Map", "Double", "Values", "Keep", "Flat", "Plus", "FlatTuple")}
    assert shapes == {
        "Map": "Map", "Double": "MapTuple", "Values": "Map", "Keep": "Filter",
        "Flat": "FlatMap", "Plus": "Map", "FlatTuple": "FlatMapTuple",
    }
    assert all(type(op_labelled(plan, label)) is BeamFnParDoOp for label in shapes)
    # Beam's Map wrapper (lambda x: [fn(x)]) is unwrapped: the engine calls the user's function.
    assert op_labelled(plan, "Values").dofn.beam_fn is double
    assert op_labelled(plan, "Plus").args == (3,)


def test_what_needs_beams_dofn_runner_keeps_it():
    class Keep(beam.DoFn):
        def start_bundle(self):  # a lifecycle method: Beam's DoFnRunner calls it
            self.seen = 0

        def process(self, x):
            yield x

    p = beam_pipeline()
    xs = p | beam.Create([1, 2])
    _ = xs | "WithWindow" >> beam.Map(lambda x, n, w=beam.DoFn.WindowParam: (x, w), 3)  # an argument too
    _ = xs | "WithKey" >> beam.Map(lambda x, k=beam.DoFn.KeyParam: (x, k))
    _ = xs | "WithSide" >> beam.Map(lambda x, side: x, beam.pvalue.AsList(xs))
    _ = xs | "DoFnClass" >> beam.ParDo(Keep())
    plan = plan_of(p)
    for label in ("WithWindow", "WithKey", "WithSide", "DoFnClass"):
        assert type(op_labelled(plan, label)) is BeamParDoOp, label
    checked = beam_pipeline("--runtime_type_check")
    _ = checked | beam.Create([1]) | "Checked" >> beam.Map(lambda x: x)
    assert type(op_labelled(plan_of(checked), "Checked")) is BeamParDoOp


class Parse(beam.DoFn):
    def process(self, line, factor):
        yield int(line) * factor


class Halves(beam.DoFn):
    def process(self, n, timestamp=beam.DoFn.TimestampParam):
        if n % 2:
            raise ValueError(f"odd: {n}")
        yield beam_window.TimestampedValue((n // 2, timestamp.micros), n)
        yield beam.pvalue.TaggedOutput("undeclared", n)


def test_a_dofn_that_is_a_process_alone_runs_as_beams_flatmap_of_its_process():
    p = beam_pipeline()
    halves = p | beam.Create(["2", "4"]) | "Parse" >> beam.ParDo(Parse(), 10) | "Halves" >> beam.ParDo(Halves())
    sparkbeam.capture(halves)
    plan, loop = run_in_engine(p)
    parse, half = op_labelled(plan, "Parse"), op_labelled(plan, "Halves")
    assert type(parse) is BeamFnParDoOp and type(half) is BeamFnParDoOp
    assert (parse.dofn.shape, parse.dofn.arguments, parse.args) == ("FlatMap", "one", (10,))
    assert half.dofn.params == ("timestamp",)
    # Beam's TimestampedValue re-stamps it, the undeclared tag's output is dropped, as in Beam
    labels = {info.id: info.label for info in plan.lowered.pcollections}
    emitted = loop.history.emitted(labels)[plan.lowered.id_of(halves)]
    assert sorted((e.value, e.timestamp.micros) for e in emitted) == [
        ((10, beam_window.MIN_TIMESTAMP.micros), 20_000_000), ((20, beam_window.MIN_TIMESTAMP.micros), 40_000_000)
    ]

    failing = beam_pipeline()
    _ = failing | beam.Create([3]) | "Halves" >> beam.ParDo(Halves())
    with pytest.raises(ValueError, match=r"odd: 3 \[while running 'Halves'\]"):
        run_in_engine(failing)


class EvenOnly(beam.DoFn):
    def process(self, n):
        if n % 2:
            raise ValueError(f"odd: {n}")
        yield n


def test_a_dofn_wrapped_with_exception_handling_keeps_beams_dofn_runner():
    p = beam_pipeline()
    good, bad = p | beam.Create([2, 3]) | "Even" >> beam.ParDo(EvenOnly()).with_exception_handling()
    sparkbeam.capture(good)
    sparkbeam.capture(bad)
    plan, loop = run_in_engine(p)
    assert type(op_labelled(plan, "Even/ParDo(EvenOnly)/ParDo(EvenOnly)")) is BeamParDoOp
    assert emitted_values(plan, loop, good) == [2]
    assert [value for value, _ in emitted_values(plan, loop, bad)] == [3]


def test_a_restamped_beam_map_is_windowed_by_the_window_into_that_reads_it_at_once():
    p = beam_pipeline()
    out = (
        p
        | beam.Create([1, 2, 65])
        | "Stamp" >> beam.Map(lambda x: beam_window.TimestampedValue(x, x))
        | "Minutes" >> beam.WindowInto(beam_window.FixedWindows(60))
        | "Start" >> beam.FlatMap(lambda x, w=beam.DoFn.WindowParam: [(x, w.start.micros // 1_000_000)])
    )
    sparkbeam.capture(out)
    plan, loop = run_in_engine(p)
    assert sorted(emitted_values(plan, loop, out)) == [(1, 0), (2, 0), (65, 60)]
    (stage,) = [s for s in plan.stages if any(op.label == "Stamp" for op in s.body)]
    body = FusedBody(stage)
    (runner,) = [r.runner for r in body._runners if r.step == "Stamp"]
    assert isinstance(runner, BeamFnRunner)
    assert runner._into is not None  # the engine's fused Map -> WindowInto path


STAMPS = [-1.5, -0.000001, 0, 0.000001, 1767225600.162, 12.3456789, beam_timestamp.Timestamp(7, 123, precision=3)]


@pytest.mark.parametrize("extra", [(), ("x",), ("x", "y")], ids=["element", "one", "positional"])
def test_a_restamped_maps_outputs_keep_beams_microseconds_whatever_its_arguments(extra):
    p = beam_pipeline()
    out = (
        p
        | beam.Create(range(len(STAMPS)))
        | "Stamp" >> beam.Map(lambda i, *rest: beam_window.TimestampedValue((i, rest), STAMPS[i]), *extra)
        | "Time" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam: (x, t.micros))
    )
    sparkbeam.capture(out)
    plan, loop = run_in_engine(p)
    assert op_labelled(plan, "Stamp").dofn.arguments == ["element", "one", "positional"][len(extra)]
    assert beam_plain._MICROS_IN_FIELDS  # this Beam's Timestamp: micros read off its fields
    expected = [((i, extra), beam_timestamp.Timestamp.of(stamp).micros) for i, stamp in enumerate(STAMPS)]
    assert sorted(emitted_values(plan, loop, out)) == expected


def test_beams_output_types_and_undeclared_tags_keep_beams_meaning():
    def route(x):
        if x == 1:
            return beam_pvalue.TaggedOutput("odd", x)
        if x == 2:
            return beam_pvalue.TaggedOutput("nobody", x)  # not declared: dropped, as in Beam
        return beam_window.TimestampedValue(x, 90)

    p = beam_pipeline()
    results = p | beam.Create([1, 2, 3]) | "Route" >> beam.Map(route).with_outputs("odd", main="main")
    odd = results.odd | "OddTime" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam: (x, t.micros))
    main = results.main | "MainTime" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam: (x, t.micros))
    flat = p | "Flat" >> beam.Create([0]) | "Many" >> beam.FlatMap(lambda x: [beam_window.TimestampedValue("late", 7), None, "same"])
    stamped = flat | "FlatTime" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam: (x, t.micros))
    for pcoll in (odd, main, stamped):
        sparkbeam.capture(pcoll)
    plan, loop = run_in_engine(p)
    assert type(op_labelled(plan, "Route")) is BeamFnParDoOp
    minimum = beam_window.MIN_TIMESTAMP.micros
    assert emitted_values(plan, loop, odd) == [(1, minimum)]
    assert emitted_values(plan, loop, main) == [(3, 90_000_000)]
    assert sorted(emitted_values(plan, loop, stamped), key=repr) == sorted([("late", 7_000_000), (None, minimum), ("same", minimum)], key=repr)


def test_maps_over_sliding_windows_run_on_the_engines_runner_with_beams_outputs():
    """An element in several windows: a plain value keeps its windows, a re-stamped or
    ``WindowedValue`` output (tagged too) has its windows repeated once per input window,
    as Beam's output handler repeats them (Nexmark's query 5: its Maps after a
    ``SlidingWindows`` ran through Beam's DoFnRunner)."""
    from apache_beam.utils.windowed_value import WindowedValue as BeamWindowedValue

    from tests.beam_frontend.pairs import assert_runners_agree

    def kinds(x):
        if x % 4 == 0:
            return beam_window.TimestampedValue(("stamped", x), x + 3)
        if x % 4 == 1:
            return BeamWindowedValue(("windowed", x), x, [beam_window.IntervalWindow(0, 100)])
        if x % 4 == 2:
            return beam_pvalue.TaggedOutput("tagged", BeamWindowedValue(("tagged", x), x, [beam_window.IntervalWindow(0, 50)]))
        return ("plain", x)

    def build(ns, p):
        sliding = (
            p
            | beam.Create(range(12))
            | beam.Map(lambda x: beam_window.TimestampedValue(x, x))
            | "Sliding" >> beam.WindowInto(beam_window.SlidingWindows(6, 2))
        )
        outputs = sliding | "Kinds" >> beam.Map(kinds).with_outputs("tagged", main="main")
        flat = sliding | "Flat" >> beam.FlatMap(lambda x: [x, beam_window.TimestampedValue(-x, x + 1)]) | "Keep" >> beam.Filter(lambda x: x % 3)
        merged = (outputs.main, outputs.tagged, flat) | beam.Flatten()
        return merged | "WithWindow" >> beam.Map(lambda x, w=beam.DoFn.WindowParam: (x, w.start.micros, w.end.micros))

    plan = plan_of(build(None, beam_pipeline()).pipeline)
    for label in ("Kinds", "Flat", "Keep"):
        assert type(op_labelled(plan, label)) is BeamFnParDoOp, label
    assert_runners_agree(build)


def test_an_exception_in_a_flatmaps_generator_names_its_step_as_beam_does():
    def explode(x):
        yield x
        raise KeyError("gone")

    p = beam_pipeline()
    p | beam.Create([7]) | "Explode" >> beam.FlatMap(explode)
    with pytest.raises(KeyError, match=r"gone \[while running 'Explode'\]"):
        run_in_engine(p)


def test_a_beam_metric_in_a_plain_map_goes_to_the_step_of_the_map():
    def counted(x):
        Metrics.counter("plain", "seen").inc()
        return x

    p = beam_pipeline()
    p | beam.Create([1]) | "Counted" >> beam.Map(counted)
    op = op_labelled(plan_of(p), "Counted")
    outputs = []
    runner = BeamFnRunner(op, {None: outputs.append}, None)
    container = MetricsContainer()
    with MetricsEnvironment.container_scope(container), MetricsEnvironment.step_scope("Counted"):
        runner.start()
        assert tracking_in_place()  # set once for the bundle, not per element
        for x in (1, 2, 3):
            runner.process(sparkbeam_wv(x))
        runner.finish()
        runner.teardown()
        assert not tracking_in_place()  # and put back after it
    assert [wv.value for wv in outputs] == [1, 2, 3]
    assert container.counters == {("Counted", MetricName("plain", "seen")): 3}


class StampedRange(beam.io.iobase.BoundedSource):
    """Yields Beam TimestampedValues: the reading op converts them as Beam's handler does."""

    def __init__(self, count):
        self.count = count

    def estimate_size(self):
        return self.count

    def split(self, desired_bundle_size, start_position=None, stop_position=None):
        yield beam.io.iobase.SourceBundle(1, self, 0, self.count)

    def get_range_tracker(self, start_position, stop_position):
        return beam.io.range_trackers.OffsetRangeTracker(start_position, stop_position)

    def read(self, range_tracker):
        position = range_tracker.start_position()
        while range_tracker.try_claim(position):
            yield beam_window.TimestampedValue(position, position * 10)
            position += 1


def test_a_bounded_sources_bundles_are_read_on_the_engines_runner_keeping_beams_timestamps():
    p = beam_pipeline()
    stamped = p | "Read" >> beam.io.Read(StampedRange(3)) | "Time" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam: (x, t.micros))
    sparkbeam.capture(stamped)
    plan, loop = run_in_engine(p)
    (reading,) = [op for op in plan.lowered.ops if "SDFBoundedSourceReader" in op.label]
    assert type(reading) is BeamFnParDoOp
    assert sorted(emitted_values(plan, loop, stamped)) == [(0, 0), (1, 10_000_000), (2, 20_000_000)]


def test_beams_dofn_runner_converts_a_groupings_one_pane_once_per_bundle_not_per_element(monkeypatch):
    from sparkbeam.runners.beam import pardo as beam_pardo

    to_beam, to_engine = [], []
    real_to_beam, real_to_engine = beam_pardo.to_beam_pane, beam_pardo.to_engine_pane
    monkeypatch.setattr(beam_pardo, "to_beam_pane", lambda pane: to_beam.append(pane) or real_to_beam(pane))
    monkeypatch.setattr(beam_pardo, "to_engine_pane", lambda pane: to_engine.append(pane) or real_to_engine(pane))
    p = beam_pipeline()
    panes = (
        p
        | beam.Create([(k, 1) for k in range(20)])
        | beam.CombinePerKey(sum)
        | "Pane" >> beam.Map(lambda kv, pane=beam.DoFn.PaneInfoParam: (kv[0], pane.is_first, pane.is_last, pane.timing))
        | "After" >> beam.Map(lambda x, pane=beam.DoFn.PaneInfoParam: (x, pane.timing))
    )
    sparkbeam.capture(panes)
    plan, loop = run_in_engine(p)
    on_time = beam.utils.windowed_value.PaneInfoTiming.ON_TIME
    assert sorted(emitted_values(plan, loop, panes)) == [((k, True, True, on_time), on_time) for k in range(20)]
    assert len(to_beam) <= 4 and len(to_engine) <= 4  # per runner and bundle, not per element (20)


def stamp_number(line):
    Metrics.counter("stamp", "seen").inc()
    return beam_window.TimestampedValue(("k", int(line)), int(line))


def read_stamp_and_sum(path, stamp=stamp_number):
    p = beam_pipeline()
    _ = (
        p
        | "Read" >> beam.io.ReadFromText(str(path))
        | "Stamp" >> beam.Map(stamp)
        | "Minutes" >> beam.WindowInto(beam_window.FixedWindows(60))
        | "Sum" >> beam.CombinePerKey(sum)
    )
    plan = plan_of(p)
    (stage,) = [s for s in plan.stages if any(op.label == "Stamp" for op in s.body)]
    (source,) = stage.head.outputs
    assert stage.head.source.yields_plain_values  # the lines may enter the stage as values
    return plan, stage, source


def test_a_read_and_one_restamping_map_take_the_lines_as_values_in_the_maps_step_named_per_chunk(tmp_path):
    path = tmp_path / "numbers.txt"
    path.write_text("1\n2\n65\n")
    plan, stage, source = read_stamp_and_sum(path)
    body = FusedBody(stage, bare=True)
    # The key codec before the grouping reports no metrics: the Map is the body's one user code.
    assert body.scoped_op is op_labelled(plan, "Stamp")
    (receive,) = body._receivers[source]
    assert receive.__name__ == "process_map_restamped_into"  # no StepScopedRunner around it
    (runner,) = [r.runner for r in body._runners]
    assert runner.direct_call.fn is stamp_number  # the user's function, no wrapper call of ours
    assert body._value_receivers[source] == (receive, runner.process_global_value)
    container = MetricsContainer()
    with MetricsEnvironment.container_scope(container), MetricsEnvironment.step_scope("outer"):
        by_value = [tuple(wv) for wv in body.run_bare_values(source, ["1", "2", "65"])]
        assert MetricsEnvironment.current_step() == "outer"
        by_element = [tuple(wv) for wv in FusedBody(stage, bare=True).run_bare(source, [sparkbeam_wv(line) for line in ["1", "2", "65"]])]
    assert by_value == by_element
    assert [(value, micros) for value, micros, _, _ in by_value] == [(("k", 1), 1_000_000), (("k", 2), 2_000_000), (("k", 65), 65_000_000)]
    assert container.counters == {("Stamp", MetricName("stamp", "seen")): 6}


def test_a_failure_of_a_restamping_map_called_directly_is_named_as_beam_names_it(tmp_path):
    from sparkbeam.runners.core.lowering.errors import UserCodeError

    path = tmp_path / "numbers.txt"
    path.write_text("1\nnot a number\n")
    _, stage, source = read_stamp_and_sum(path)
    for run in (FusedBody(stage, bare=True).run_bare_values, FusedBody(stage, bare=True).run_bare):
        lines = ["1", "oops"] if run.__name__ == "run_bare_values" else [sparkbeam_wv("1"), sparkbeam_wv("oops")]
        with pytest.raises(UserCodeError) as failed:
            list(run(source, lines))
        assert failed.value.label == "Stamp"
        assert type(failed.value.error) is ValueError
        assert str(failed.value.error).endswith(" [while running 'Stamp']")
        assert type(failed.value.error.__cause__) is ValueError  # the function's own, as it raised it


def test_a_beam_dofn_alone_in_its_body_runs_in_its_step_named_per_chunk():
    class Counted(beam.DoFn):
        def setup(self):  # a lifecycle method: Beam's DoFnRunner runs it
            self.ready = True

        def process(self, x, w=beam.DoFn.WindowParam):
            Metrics.counter("dofn", "seen").inc()
            yield x

    p = beam_pipeline()
    sparkbeam.capture(p | beam.Create([("k", 1)]) | "Group" >> beam.GroupByKey() | "Counted" >> beam.ParDo(Counted()))
    plan = plan_of(p)
    (stage,) = [s for s in plan.stages if any(op.label == "Counted" for op in s.body)]
    body = FusedBody(stage)
    assert type(body.scoped_op) is BeamParDoOp  # beside it, the grouping's key codec alone
    (source,) = body.scoped_op.inputs  # pushed past the codec: what it would hand on
    container = MetricsContainer()
    with MetricsEnvironment.container_scope(container), MetricsEnvironment.step_scope("outer"):
        outputs = [wv.value for _, wv in body.run([(source, sparkbeam_wv(1)), (source, sparkbeam_wv(2))])]
        assert MetricsEnvironment.current_step() == "outer"
    assert outputs == [1, 2]
    assert container.counters == {("Counted", MetricName("dofn", "seen")): 2}


def test_maps_taking_beams_window_timestamp_or_pane_get_beams_objects_from_the_engines_runner():
    from apache_beam.utils import windowed_value as beam_wv

    p = beam_pipeline()
    windowed = (
        p
        | beam.Create([1, 2, 65])
        | "Stamp" >> beam.Map(lambda x: beam_window.TimestampedValue(("k", x), x))
        | "Minutes" >> beam.WindowInto(beam_window.FixedWindows(60))
    )

    def seen(kv, w=beam.DoFn.WindowParam, t=beam.DoFn.TimestampParam, pane=beam.DoFn.PaneInfoParam):
        return kv[1], type(w) is beam_window.IntervalWindow, w.start.micros, type(t) is beam_timestamp.Timestamp, t.micros, pane is beam_wv.PANE_INFO_UNKNOWN

    outputs = {
        "Seen": windowed | "Seen" >> beam.Map(seen),
        "Flat": windowed | "Flat" >> beam.FlatMap(lambda kv, w=beam.DoFn.WindowParam: [kv[1]] * (w.start.micros // 60_000_000 + 1)),
        "Kept": windowed | "Kept" >> beam.Filter(lambda kv, t=beam.DoFn.TimestampParam: t.micros > 1_500_000),
        "Panes": windowed | beam.GroupByKey() | "Panes" >> beam.Map(lambda kv, pane=beam.DoFn.PaneInfoParam: (sorted(kv[1]), pane.timing, pane.is_first)),
    }
    for pcoll in outputs.values():
        sparkbeam.capture(pcoll)
    plan, loop = run_in_engine(p)
    kinds = {label: op_labelled(plan, label).dofn.params for label in outputs}
    assert kinds == {"Seen": ("window", "timestamp", "pane"), "Flat": ("window",), "Kept": ("timestamp",), "Panes": ("pane",)}
    assert all(type(op_labelled(plan, label)) is BeamFnParDoOp for label in outputs)  # not Beam's DoFnRunner
    values = {label: sorted(emitted_values(plan, loop, pcoll)) for label, pcoll in outputs.items()}
    assert values == {
        "Seen": [(1, True, 0, True, 1_000_000, True), (2, True, 0, True, 2_000_000, True), (65, True, 60_000_000, True, 65_000_000, True)],
        "Flat": [1, 2, 65, 65],
        "Kept": [("k", 2), ("k", 65)],
        "Panes": [([1, 2], beam_wv.PaneInfoTiming.ON_TIME, True), ([65], beam_wv.PaneInfoTiming.ON_TIME, True)],
    }


def test_beams_map_filter_and_flatmap_are_called_by_the_engines_fast_paths_with_no_wrapper_call():
    p = beam_pipeline()
    doubled = p | beam.Create([0, 1, 2]) | "Double" >> beam.Map(double)
    pairs = doubled | "Keep" >> beam.Filter(bool) | "Pair" >> beam.FlatMap(lambda x: [x, beam_window.TimestampedValue(-x, 5)])
    sparkbeam.capture(pairs)
    plan, loop = run_in_engine(p)
    assert sorted(emitted_values(plan, loop, pairs)) == [-4, -2, 2, 4]
    (stage,) = [s for s in plan.stages if any(op.label == "Double" for op in s.body)]
    body = FusedBody(stage, bare=True)
    runners = {r.runner.label: r.runner for r in body._runners}
    assert runners["Double"].direct_call.fn is double  # the user's function, no wrapper call of ours
    assert runners["Keep"].direct_call.fn is bool
    assert runners["Keep"].process.__name__ == "process_filter"
    assert runners["Pair"].process.__name__ == "process_flat"
