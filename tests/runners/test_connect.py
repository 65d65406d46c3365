"""Spark Connect (#25, first step): selecting it, refusing before the run what it does not
run yet, and what only Connect shows (metrics as report rows, user errors through Connect,
the physical plan's declined strategies). The oracle pairs run on it through the
``spark_session_kind`` fixture (tests/runners/test_batch_oracle.py).

The refusals run with a URL where no server listens: a refusal that came after the
server was reached would fail with a ConnectionError instead.
"""

from __future__ import annotations

import collections
import os
import pathlib
import signal
import socket
import threading
import time

import pytest

import sparkbeam as beam
from sparkbeam.metrics import Metrics, MetricsFilter
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.settings import RunSettings
from sparkbeam.runners.spark.connect.session import connect_target
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window

pytestmark = pytest.mark.spark


@pytest.fixture
def nowhere():
    """A Connect URL on 127.0.0.1 where nothing listens (a port the kernel just freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"sc://127.0.0.1:{port}"


def _pipeline(**options):
    return beam.Pipeline(options=PipelineOptions(**options))


@pytest.mark.parametrize("url", ["localhost:15002", "http://host:15002", "sc://host:1:2", "sc://host/;token"])
def test_a_spark_remote_that_is_no_connect_url_is_refused_naming_the_option(url):
    with pytest.raises(ValueError, match="--spark_remote: expected a Spark Connect URL"):
        RunSettings.from_options({"spark_remote": url})


def test_a_token_in_a_bad_spark_remote_is_not_shown():
    with pytest.raises(ValueError) as refused:
        RunSettings.from_options({"spark_remote": "sc://host:1:2/;token=secret-value"})
    assert "secret-value" not in str(refused.value)


def test_spark_remote_and_spark_master_together_are_refused():
    with pytest.raises(ValueError, match="--spark_remote and --spark_master"):
        RunSettings.from_options({"spark_remote": "sc://localhost:15002", "spark_master": "local[2]"})


def test_spark_remote_comes_first_then_spark_s_own_environment_variable(monkeypatch):
    monkeypatch.setenv("SPARK_REMOTE", "sc://from-the-environment:15002")
    chosen = connect_target(RunSettings.from_options({"spark_remote": "sc://from-the-option:15002"}))
    assert (chosen.url, chosen.named_by) == ("sc://from-the-option:15002", "--spark_remote")
    chosen = connect_target(RunSettings())
    assert (chosen.url, chosen.named_by) == ("sc://from-the-environment:15002", "SPARK_REMOTE")
    monkeypatch.delenv("SPARK_REMOTE")
    assert connect_target(RunSettings()) is None


def test_an_unreachable_server_is_refused_before_the_first_step_naming_the_option(nowhere):
    p = _pipeline(spark_remote=nowhere)
    beam.capture(p | beam.Create([1, 2]) | beam.Map(lambda x: x + 1))
    began = time.monotonic()
    with pytest.raises(ConnectionError, match=f"--spark_remote={nowhere}: no Spark Connect server answers"):
        p.run()
    assert time.monotonic() - began < 10  # not Connect's own minutes of retries


def test_an_unreachable_server_named_by_spark_remote_the_variable_is_refused_naming_it(nowhere, monkeypatch):
    monkeypatch.setenv("SPARK_REMOTE", nowhere)
    p = _pipeline()
    beam.capture(p | beam.Create([1]))
    with pytest.raises(ConnectionError, match="SPARK_REMOTE=sc://"):
        p.run()


# ------------------------------------------------------------------------ refused before the run


def test_a_stream_on_a_server_of_another_machine_refuses_a_relative_checkpoint_dir_before_reaching_it(tmp_path):
    # Its directories are the server's files (runners/spark/connect/server_files.py): named
    # as the server sees them, never made absolute in the client's working directory.
    p = _pipeline(spark_remote="sc://spark.example.invalid:15002", available_now=True, checkpoint_dir="ck")
    beam.capture(p | "Watch" >> beam.io.ReadFromTextStream(str(tmp_path)))
    with pytest.raises(UnsupportedError, match=r"--checkpoint_dir=ck: the Spark Connect server \(--spark_remote\) is on another machine.*absolute path as the server sees it"):
        p.run()


def test_a_stream_s_checkpoint_dir_on_a_cluster_file_system_is_refused_naming_the_option(nowhere, tmp_path):
    """A Connect client has no Hadoop file system for the lease's atomic create and the
    manifests' rename, nor the server's Python tasks for the state and the log: a local
    --checkpoint_dir runs (test_stream_recovery.py), an hdfs:// one is refused before the run.
    (A watched folder on hdfs:// runs: test_hdfs.py.)"""
    p = _pipeline(spark_remote=nowhere, checkpoint_dir="hdfs://namenode/ckpt")
    events = TestStream().add_elements([("a", 1)]).advance_watermark_to_infinity()
    beam.capture(p | "Events" >> events | beam.GroupByKey())
    with pytest.raises(UnsupportedError, match=r"--checkpoint_dir=hdfs://namenode/ckpt: under Spark Connect .* must be a local path or file:// URL .* no Hadoop file system"):
        p.run()


def test_a_sink_connect_does_not_write_is_refused_naming_it(nowhere):
    """WriteToFiles of bounded input to a URL only a classic driver's JVM reaches: its
    primitive, which writes through that driver, has no Connect sink."""
    from sparkbeam.io.fileio import WriteToFiles

    p = _pipeline(spark_remote=nowhere)
    _ = p | beam.Create(["a"]) | "Out" >> WriteToFiles("hdfs://namenode/out")
    with pytest.raises(UnsupportedError, match=r"'Out.*WriteFilesThroughDriverOp \(a sink\) is not yet under Spark Connect"):
        p.run()


# ----------------------------------------------------------------------- on a Connect server


def test_spark_conf_sets_what_a_session_may_change_for_the_run_and_refuses_the_servers_own(connect_server):
    """--spark_conf on Connect: a setting the session may change (a SQL setting, here the time
    zone Spark's casts use) holds during the run and is put back after it; one the server fixes
    when it starts is refused before the first step, named, its value not shown."""
    from sparkbeam.runners.spark.connect.session import ConnectTarget, connect_session

    session = connect_session(ConnectTarget(connect_server.url, "--spark_remote"))
    before = session.conf.get("spark.sql.session.timeZone")
    zone = "Pacific/Chatham" if before != "Pacific/Chatham" else "Asia/Kathmandu"
    p = _pipeline(spark_remote=connect_server.url, spark_conf=[f"spark.sql.session.timeZone={zone}"])
    seen = beam.capture(p | beam.Create([1]) | beam.Map(lambda x: x + 1))
    seen_zone = []
    from sparkbeam.runners.spark.connect import backend as connect_backend

    original = connect_backend.ConnectBackend.run_stage

    def run_stage(self, *args, **kwargs):
        seen_zone.append(self.session.conf.get("spark.sql.session.timeZone"))
        return original(self, *args, **kwargs)

    connect_backend.ConnectBackend.run_stage = run_stage
    try:
        result = p.run()
    finally:
        connect_backend.ConnectBackend.run_stage = original
    assert [e.value for e in result.emissions(seen)] == [2]
    assert seen_zone and set(seen_zone) == {zone}
    assert session.conf.get("spark.sql.session.timeZone") == before

    p = _pipeline(spark_remote=connect_server.url, spark_conf=["spark.executor.memory=64g", "spark.sql.shuffle.partitions=3"])
    beam.capture(p | beam.Create([1]))
    with pytest.raises(UnsupportedError, match=r"--spark_conf: the Spark Connect server fixes these settings when it starts.*: spark\.executor\.memory \(values not shown\)") as refused:
        p.run()
    assert "64g" not in str(refused.value)
    assert session.conf.get("spark.sql.shuffle.partitions") != "3"  # nothing of a refused run stays set


def test_metrics_come_back_as_report_rows_committed_once(connect_server):
    def count(word):
        Metrics.counter("words", "seen").inc()
        return (word, 1)

    p = _pipeline(spark_remote=connect_server.url)
    words = p | beam.Create([f"w{n % 7}" for n in range(100)]) | "Count" >> beam.Map(count)
    counts = beam.capture(words | beam.CombinePerKey(sum))
    result = p.run()
    assert collections.Counter(dict(e.value for e in result.emissions(counts))) == collections.Counter(
        {f"w{n}": len(range(n, 100, 7)) for n in range(7)}
    )
    (counter,) = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    assert (counter.committed, counter.attempted) == (100, 100)
    assert counter.key.step == "Count"
    plan = str(result.physical_plan())
    assert "physical plan (batch, Spark Connect backend)" in plan
    # The Map's body runs in the combine's map side; its counts stay its own stage's.
    assert "stage 0 'Create': map-side pass into the grouping" in plan
    (count,) = result.watermarks().for_stage("Create")
    assert (count.elements_in, count.elements_out) == (100, 100)


def test_a_user_error_comes_back_as_the_user_s_exception_naming_the_transform(connect_server):
    def parse(line):
        return int(line)

    p = _pipeline(spark_remote=connect_server.url)
    beam.capture(p | beam.Create(["1", "x"]) | "Parse" >> beam.Map(parse))
    with pytest.raises(ValueError, match="invalid literal for int") as raised:
        p.run()
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "in transform 'Parse' (applied at" in notes
    assert "in parse" in notes  # the user's frame on the server's worker


class _SleepsOnceStarted(beam.DoFn):
    """Marks that a task is running (a file the test watches), then sleeps ten minutes."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def process(self, element):
        pathlib.Path(self.marker).touch()
        time.sleep(600)
        yield element


def test_ctrl_c_interrupts_the_runs_operations_on_the_server(connect_server, tmp_path, capsys):
    # A batch run is one step: the first SIGINT abandons it, and its operations on the
    # server are interrupted by the run's tag (a client's signal alone would leave them
    # running: the main thread waits in a gRPC call for the step's collect).
    started, over = tmp_path / "started", threading.Event()

    def interrupt_once_a_task_runs():
        deadline = time.monotonic() + 240
        while not started.exists() and time.monotonic() < deadline and not over.is_set():
            time.sleep(0.1)
        if started.exists() and not over.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    p = _pipeline(spark_remote=connect_server.url)
    beam.capture(p | beam.Create([1]) | "Sleep" >> beam.ParDo(_SleepsOnceStarted(str(started))))
    threading.Thread(target=interrupt_once_a_task_runs, daemon=True).start()
    began = time.monotonic()
    try:
        with pytest.raises(SystemExit) as exit_:
            p.run()
    finally:
        over.set()
    assert exit_.value.code == 130
    assert time.monotonic() - began < 300, "the step ran on: its operations were not interrupted"
    assert capsys.readouterr().err.endswith("sparkbeam: batch run cancelled on SIGINT; run it again to start over\n")


def test_a_sessions_grouping_and_a_lifted_combine_run_on_the_engine_after_the_shuffle(connect_server):
    p = _pipeline(spark_remote=connect_server.url)
    stamped = p | beam.Create([("a", 1), ("a", 2), ("a", 3), ("b", 65)]) | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
    sessions = stamped | beam.WindowInto(window.Sessions(10))
    grouped = sessions | beam.GroupByKey()
    captured = beam.capture(grouped | beam.MapTuple(lambda key, values: (key, sorted(values))))
    # a combine over sessions lifts: partials per proto-session, merged as windows merge
    sums = beam.capture(sessions | "Sum" >> beam.CombinePerKey(sum))
    result = p.run()
    assert sorted(e.value for e in result.emissions(captured)) == [("a", [1, 2, 3]), ("b", [65])]
    assert sorted((e.value, e.windows[0].start.micros, e.windows[0].end.micros) for e in result.emissions(sums)) == [
        (("a", 6), 1_000_000, 13_000_000),
        (("b", 65), 65_000_000, 75_000_000),
    ]
    plan = str(result.physical_plan())
    assert "'GroupByKey': unlifted grouping" in plan and "'Sum': lifted grouping" in plan, plan


def test_an_apache_beam_pipeline_runs_through_spark_connect(connect_server):
    import apache_beam as apache_beam

    from tests.beam_frontend.pairs import assert_runners_agree

    def build(ns, p):
        words = p | apache_beam.Create(["a b", "c a", "b a"]) | apache_beam.FlatMap(str.split)
        return words | apache_beam.Map(lambda word: (word, 1)) | apache_beam.CombinePerKey(sum)

    result = assert_runners_agree(build, spark_remote=connect_server.url)
    assert "Spark Connect backend" in str(result.physical_plan())


def test_an_apache_beam_pipeline_reading_text_runs_through_spark_connect(connect_server, tmp_path):
    import apache_beam as apache_beam

    from tests.beam_frontend.pairs import assert_runners_agree

    (tmp_path / "in.txt").write_text("a b\nc a\nb a\n")

    def build(ns, p):
        # Beam's ReadFromText: a BoundedSource, split and read on the server (reads.py).
        words = p | apache_beam.io.ReadFromText(str(tmp_path / "in.txt")) | apache_beam.FlatMap(str.split)
        return words | apache_beam.Map(lambda word: (word, 1)) | apache_beam.CombinePerKey(sum)

    result = assert_runners_agree(build, spark_remote=connect_server.url)
    assert "Spark Connect backend" in str(result.physical_plan())


def test_an_active_connect_session_of_the_user_chooses_spark_connect(connect_server):
    from pyspark.sql.connect.session import SparkSession

    users = SparkSession.builder.remote(connect_server.url).getOrCreate()
    try:
        p = _pipeline()
        captured = beam.capture(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 10))
        result = p.run()
        assert sorted(e.value for e in result.emissions(captured)) == [10, 20]
        assert "Spark Connect backend" in str(result.physical_plan())
    finally:
        users.stop()


def test_a_run_naming_no_server_after_a_connect_run_stays_classic(spark, connect_server):
    p = _pipeline(spark_remote=connect_server.url)
    beam.capture(p | beam.Create([1]))
    assert "Spark Connect backend" in str(p.run().physical_plan())
    p = _pipeline()
    beam.capture(p | beam.Create([1]))
    assert "Spark backend" in str(p.run().physical_plan())


def _reading(p, pattern):
    lines = p | "Lines" >> beam.io.ReadFromText(pattern)
    pairs = lines | "Split" >> beam.FlatMap(str.split) | "Pair" >> beam.Map(lambda word: (word, 1))
    counts = beam.capture(pairs | "Count" >> beam.CombinePerKey(sum))
    shouted = beam.capture(lines | "Shout" >> beam.Map(str.upper))
    return counts, shouted


def test_a_read_is_read_in_the_tasks_of_the_stages_that_take_its_elements(spark, connect_server, tmp_path):
    # Its bundles go into a combine's map side and into a fused map (frames.feed,
    # reads.BundleReader): what the stages get and count is what a classic session's get.
    path = tmp_path / "words.txt"
    path.write_text("".join(f"w{n % 7} v{n % 3}\n" for n in range(500)))
    seen = []
    for options in ({}, {"spark_remote": connect_server.url}):
        p = _pipeline(**options)
        counts, shouted = _reading(p, str(path))
        result = p.run()
        stages = {name: [(w.elements_in, w.elements_out) for w in result.watermarks().for_stage(name)] for name in ("Lines", "Count")}
        seen.append((sorted(e.value for e in result.emissions(counts)), sorted(e.value for e in result.emissions(shouted)), stages))
    classic, connect = seen
    assert connect == classic
    assert all(classic[2].values()), classic[2]
    assert dict(classic[0]) == {**{f"w{n}": len(range(n, 500, 7)) for n in range(7)}, **{f"v{n}": len(range(n, 500, 3)) for n in range(3)}}


def test_a_read_failing_in_the_task_of_the_stage_after_it_names_the_read(connect_server, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nnot \xff utf-8\n")
    p = _pipeline(spark_remote=connect_server.url)
    _reading(p, str(path))
    with pytest.raises(UnicodeDecodeError) as raised:
        p.run()
    notes = " ".join(getattr(raised.value, "__notes__", []))
    assert "'Lines'" in notes and "bad.txt" in notes
