"""Tiny stages on what the driver holds run in the driver's process (driver_stages.py):
Beam's WriteToText's three Impulse-rooted chains run no Spark job, with the same files,
metrics and errors; a Create's values and anything bigger still go to Spark."""

from __future__ import annotations

import glob
import sys

import pytest

import sparkbeam
from sparkbeam.metrics import Metrics, MetricsFilter
from sparkbeam.runners.spark import driver_stages


class FakeContext:
    def __init__(self, master, python, environment=None, includes=()):
        self.master = master
        self.pythonExec = python
        self.environment = environment or {}
        self._python_includes = list(includes)


def test_only_a_plain_local_master_running_this_interpreter_with_nothing_added_runs_stages_on_the_driver():
    assert driver_stages.driver_can_run_stages(FakeContext("local[2]", sys.executable))
    assert driver_stages.driver_can_run_stages(FakeContext("local", sys.executable, {"PYTHONHASHSEED": "0"}))
    assert not driver_stages.driver_can_run_stages(FakeContext("local-cluster[2,1,1024]", sys.executable))
    assert not driver_stages.driver_can_run_stages(FakeContext("spark://master:7077", sys.executable))
    assert not driver_stages.driver_can_run_stages(FakeContext("local[2]", "/elsewhere/bin/python"))
    assert not driver_stages.driver_can_run_stages(FakeContext("local[2]", sys.executable, {"PYTHONPATH": "/run/deps"}))
    assert not driver_stages.driver_can_run_stages(FakeContext("local[2]", sys.executable, includes=["deps.zip"]))


@pytest.fixture
def driver_runs(monkeypatch):
    # The shared session may have had files added for its Python workers by an earlier test
    # (addPyFile lasts as long as the SparkContext), which turns driver runs off: this
    # test's code is importable here and there alike.
    monkeypatch.setattr(driver_stages, "driver_can_run_stages", lambda spark_context: True)
    ran: list[str] = []
    real = driver_stages.run_on_driver

    def spy(stage, *args):
        ran.append(stage.name)
        return real(stage, *args)

    monkeypatch.setattr(driver_stages, "run_on_driver", spy)
    return ran


@pytest.mark.spark
def test_beams_write_to_text_finishes_its_files_on_the_driver(spark, tmp_path, driver_runs):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    with beam.Pipeline(options=PipelineOptions(["--runner=sparkbeam.SparkRunner", "--state_partitions=2"])) as p:
        _ = p | beam.Create(["b", "a", "c", "a"]) | beam.combiners.Count.PerElement() | beam.MapTuple(lambda word, count: f"{word}:{count}") | beam.io.WriteToText(str(tmp_path / "counts"))
    lines = sorted(line for path in tmp_path.glob("counts-*") for line in path.read_text().split())
    assert lines == ["a:2", "b:1", "c:1"]
    assert not glob.glob(str(tmp_path / ".temp*" / "*"))  # Beam's finalize moved every shard
    assert {name.rsplit("/", 1)[-1] for name in driver_runs} == {"Impulse", "PreFinalize", "FinalizeWrite"}


@pytest.mark.spark
def test_a_chain_off_an_impulse_counts_its_metrics_once_and_fails_naming_its_transform(spark, driver_runs):
    def emit(_):
        Metrics.counter("driver", "calls").inc()
        return 7

    p = sparkbeam.Pipeline()
    out = sparkbeam.capture(p | sparkbeam.Impulse() | "Seven" >> sparkbeam.Map(emit))
    result = p.run()
    assert [e.value for e in result.emissions(out)] == [7]
    (counter,) = result.metrics().query(MetricsFilter().with_name("calls"))["counters"]
    assert counter.committed == 1 and counter.key.step == "Seven"
    assert driver_runs

    def fail(_):
        raise ValueError("no seven")

    p = sparkbeam.Pipeline()
    sparkbeam.capture(p | sparkbeam.Impulse() | "Fails" >> sparkbeam.Map(fail))
    with pytest.raises(ValueError, match="no seven") as raised:
        p.run()
    assert "'Fails'" in " ".join(getattr(raised.value, "__notes__", []))


@pytest.mark.spark
def test_a_creates_values_still_run_on_spark(spark, driver_runs):
    p = sparkbeam.Pipeline()
    out = sparkbeam.capture(p | sparkbeam.Create([1, 2, 3]) | sparkbeam.Map(lambda x: x * 2))
    assert sorted(e.value for e in p.run().emissions(out)) == [2, 4, 6]
    assert driver_runs == []


@pytest.mark.spark
def test_a_chain_that_explodes_its_impulse_is_abandoned_for_spark(spark, driver_runs):
    def explode(_):
        Metrics.counter("driver", "explosions").inc()
        return range(driver_stages.DRIVER_STAGE_MAX_OUTPUTS + 10)

    p = sparkbeam.Pipeline()
    out = sparkbeam.capture(p | sparkbeam.Impulse() | "Explode" >> sparkbeam.FlatMap(explode))
    result = p.run()
    assert sorted(e.value for e in result.emissions(out)) == list(range(driver_stages.DRIVER_STAGE_MAX_OUTPUTS + 10))
    assert driver_runs  # tried here first, then run on Spark: committed once
    (counter,) = result.metrics().query(MetricsFilter().with_name("explosions"))["counters"]
    assert counter.committed == 1
