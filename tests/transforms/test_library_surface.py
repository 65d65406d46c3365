"""Beam names that real pipelines use: DoFn context and finalizer parameters,
CombineGlobally(...).as_singleton_view(), FlattenWith, the runner module, Beam's module
paths. Behaviour compared with apache_beam where it is observable."""

from __future__ import annotations

import contextlib
import os

import pytest

import sparkbeam as beam
from tests.io.conftest import run
from tests.oracle import assert_same_as_beam

# -- DoFn parameters -------------------------------------------------------------------------------


class Counter:
    """A context manager constructor whose entries and exits are recorded in a file."""

    def __init__(self, log_path, tag):
        self.log_path = log_path
        self.tag = tag

    def __enter__(self):
        with open(self.log_path, "a") as log:
            log.write(f"enter {self.tag}\n")
        return f"resource-{self.tag}"

    def __exit__(self, *exc_info):
        with open(self.log_path, "a") as log:
            log.write(f"exit {self.tag}\n")
        return False


@pytest.mark.spark
def test_setup_and_bundle_context_params_are_entered_passed_and_exited(spark, tmp_path):
    log = str(tmp_path / "log.txt")

    setup = beam.DoFn.SetupContextParam(Counter, args=(log, "setup"))
    bundle = beam.DoFn.BundleContextParam(Counter, args=(log, "bundle"))

    def build(p):
        # As Beam's map_context snippet: context managers as a Map's parameter defaults.
        return p | beam.Create(["a", "b", "c"], reshuffle=False) | beam.Map(lambda text, a=setup, b=bundle: f"{text} {a} {b}")

    assert sorted(run(build)) == [f"{t} resource-setup resource-bundle" for t in "abc"]
    with open(log) as handle:
        lines = handle.read().splitlines()
    # Each bundle enters both and exits both (a DoFn lives for one task on Spark).
    assert lines.count("enter setup") == lines.count("exit setup") == lines.count("enter bundle") == lines.count("exit bundle") > 0


def test_a_constructed_context_manager_is_refused_as_in_beam():
    with pytest.raises(TypeError, match="constructor"):
        beam.DoFn.SetupContextParam(contextlib.nullcontext())
    beam.DoFn.SetupContextParam(contextlib.nullcontext)  # a constructor is fine


class Acknowledge(beam.DoFn):
    """Registers a callback per element that records it, as a Pub/Sub acknowledger would."""

    def __init__(self, directory):
        self.directory = directory

    def process(self, element, bundle_finalizer=beam.DoFn.BundleFinalizerParam):
        path = os.path.join(self.directory, f"acked-{element}")
        bundle_finalizer.register(lambda: open(path, "w").close())
        bundle_finalizer.register(self.fail)  # logged, and the others still run
        yield element * 10

    def fail(self):
        raise RuntimeError("a failing callback")


@pytest.mark.spark
def test_bundle_finalizer_callbacks_run_after_the_bundles_output(spark, tmp_path):
    out = run(lambda p: p | beam.Create([1, 2, 3]) | beam.ParDo(Acknowledge(str(tmp_path))))
    assert sorted(out) == [10, 20, 30]
    assert sorted(os.listdir(tmp_path)) == ["acked-1", "acked-2", "acked-3"]


@pytest.mark.spark
def test_no_callback_runs_for_a_bundle_that_fails(spark, tmp_path):
    class Explode(beam.DoFn):
        def process(self, element):
            raise ValueError(f"bad {element}")

    with pytest.raises(ValueError, match="bad"):
        run(lambda p: p | beam.Create([1]) | beam.ParDo(Acknowledge(str(tmp_path))) | beam.ParDo(Explode()))
    assert os.listdir(tmp_path) == []


@pytest.mark.spark
def test_windowed_value_param_and_from_callable_match_beam(spark):
    def build(ns, p):
        beam_ = ns.beam
        return (
            p
            | beam_.Create([1, 2])
            | beam_.Map(lambda x: ns.TimestampedValue(x, x * 10))
            | beam_.Map(lambda x, wv=beam_.DoFn.WindowedValueParam: (wv.value, float(wv.timestamp)))
            | beam_.ParDo(beam_.DoFn.from_callable(lambda pair: [pair[0], pair[1]]))
        )

    assert_same_as_beam(build)


def test_unsupported_dofn_features_say_so():
    class Batched(beam.DoFn):
        def process_batch(self, batch):
            yield batch

    with pytest.raises(NotImplementedError, match="process_batch"):
        beam.ParDo(Batched())
    with pytest.raises(NotImplementedError, match="unbounded_per_element"):
        beam.DoFn.unbounded_per_element()


# -- CombineGlobally(...).as_singleton_view(), FlattenWith ---------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("case", ["with values", "empty with default", "without defaults"])
def test_combine_globally_as_singleton_view_matches_beam(spark, case):
    def build(ns, p):
        numbers = p | "Numbers" >> ns.beam.Create([] if case != "with values" else [1, 2, 3])
        combine = ns.beam.CombineGlobally(sum)
        if case == "without defaults":
            combine = combine.without_defaults()
        total = numbers | combine.as_singleton_view()
        if case == "without defaults":
            total = ns.beam.pvalue.AsSingleton(numbers | "Again" >> ns.beam.CombineGlobally(sum).without_defaults(), default_value=-1)
        return p | "Main" >> ns.beam.Create(["x", "y"]) | ns.beam.Map(lambda word, total: (word, total), total)

    assert_same_as_beam(build)


@pytest.mark.spark
def test_as_singleton_view_reads_per_window_with_the_empty_value_as_default(spark):
    def build(ns, p):
        events = (
            p
            | "Events" >> ns.beam.Create([("a", 1), ("b", 12)])
            | "Stamp" >> ns.beam.Map(lambda e: ns.TimestampedValue(e, e[1]))
            | "Window" >> ns.beam.WindowInto(ns.window.FixedWindows(10))
        )
        counts = events | ns.beam.combiners.Count.Globally().without_defaults()
        total = events | ns.beam.Map(lambda e: e[1]) | ns.beam.CombineGlobally(sum).as_singleton_view()
        return counts | "Join" >> ns.beam.Map(lambda n, total: (n, total), total)

    assert_same_as_beam(build)


@pytest.mark.spark
def test_flatten_with_matches_beam(spark):
    def build(ns, p):
        first = p | "First" >> ns.beam.Create([1, 2])
        second = p | "Second" >> ns.beam.Create([3])
        return first | ns.beam.FlattenWith(second, ns.beam.Create([4, 5]))

    assert_same_as_beam(build)


def test_flatten_with_refuses_what_is_not_a_pcollection_or_transform():
    with pytest.raises(TypeError, match="FlattenWith takes"):
        beam.FlattenWith([1, 2])


# -- runners and module paths ---------------------------------------------------------------------


def test_the_runner_module_has_beams_names():
    from apache_beam.runners import runner as beam_runner

    from sparkbeam.runners import runner

    for name in beam_runner.__all__:
        assert hasattr(runner, name), name
    assert runner.PipelineState.DONE == "DONE" == beam_runner.PipelineState.DONE
    for state in ("DONE", "FAILED", "CANCELLED", "RUNNING", "UNKNOWN", "DRAINED", "STOPPED"):
        ours = runner.PipelineState.is_terminal(getattr(runner.PipelineState, state))
        assert ours == beam_runner.PipelineState.is_terminal(getattr(beam_runner.PipelineState, state)), state


@pytest.mark.spark
def test_a_direct_runner_object_runs_on_spark(spark):
    from sparkbeam.runners import DirectRunner

    with beam.Pipeline(runner=DirectRunner()) as p:
        p | beam.Create([1])
    assert p._result.state == beam.runners.runner.PipelineState.DONE


def test_beams_attribute_paths_reach_the_same_objects():
    assert beam.transforms.combiners.core is beam.transforms.core
    assert beam.transforms.core.CombineFn is beam.CombineFn
    assert beam.combiners.Count is beam.transforms.combiners.Count
    assert beam.transforms.window.FixedWindows is beam.window.FixedWindows
    assert beam.transforms.combiners.CountCombineFn is not None
