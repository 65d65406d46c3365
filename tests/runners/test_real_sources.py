"""Real sources on Spark Structured Streaming: a watched directory, rate, socket, Kafka's options.

Each run shares the test session's Spark; runs end by ``max_steps``, by a cancel once the
output is in, or, for directories, ``available_now``. Per-partition watermarks, idleness,
drops at the source and dead letters are read back from the run's watermark timeline. The
tests taking ``spark_session_kind`` run on the classic session and through Spark Connect,
where each source's query runs on the server (runners/spark/connect/stream_intake.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import threading
import time

import pytest

import sparkbeam as beam
from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runner import PipelineState
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.spark.checkpoint_key import load_key
from sparkbeam.runners.spark.checkpoints import LOOP_FILE, CheckpointError, CheckpointStore
from sparkbeam.transforms import window
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def options(**settings):
    return PipelineOptions(step_interval=0.2, state_partitions=2, **settings)


def write_lines(path: str, lines: list[str], mtime: int | None = None) -> None:
    temp = os.path.join(os.path.dirname(path), "." + os.path.basename(path))
    with open(temp, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    if mtime is not None:
        os.utime(temp, (mtime, mtime))
    os.replace(temp, path)  # the source must never see a half-written file


def source_records(result, stage: str = "Read/Read"):
    return result.watermarks().for_stage(stage)


def test_directory_stream_sums_windows_and_counts_dead_letters(spark_session_kind, tmp_path):
    """On both session kinds (a Connect run's log written by DataFrame operations alone,
    runners/spark/connect/stream_intake.py): the same sums, dead letters, and the source's
    watermark at each step (one file per step)."""
    directory_stream_sums_windows_and_counts_dead_letters(tmp_path, spark_session_kind, contextlib.nullcontext([0]))


def test_directory_stream_through_a_connect_server_as_from_another_machine(connect_server, tmp_path):
    """The same on Connect with the run's temporary checkpoint (no --checkpoint_dir) made on
    the server and reached through it (runners/spark/connect/server_files.py), every direct
    access of the client to it or to the watched folder refused (the full matrix)."""
    from tests.runners.server_files_guard import FOUND, through_server

    guard = through_server(str(tmp_path / "in"), os.path.join(tempfile.gettempdir(), "sparkbeam-stream-"))
    jobs = directory_stream_sums_windows_and_counts_dead_letters(tmp_path, {"spark_remote": connect_server.url}, guard)
    assert not FOUND and jobs[0] > 0


def directory_stream_sums_windows_and_counts_dead_letters(tmp_path, session_kind: dict, guard) -> list[int]:
    """The case of the two tests above, its run within ``guard``; what the guard yielded."""
    directory = tmp_path / "in"
    directory.mkdir()
    for index in range(3):
        lines = [json.dumps({"team": f"t{i % 2}", "score": i, "ts": index * 60 + i}) for i in range(5)]
        unstamped = ['{"team": "t0", "score": 1}'] if index == 1 else []
        write_lines(str(directory / f"f{index}.json"), [*lines, "", "{oops", *unstamped], mtime=1_700_000_000 + index)
    p = beam.Pipeline(options=options(available_now=True, **session_kind))
    good, bad = p | "Read" >> beam.io.ReadFromJsonStream(
        str(directory), schema="team STRING, score INT, ts LONG", timestamp="ts", max_files_per_trigger=1
    ).with_exception_handling()
    sums = beam.capture(
        good | beam.Map(lambda r: (r.team, r.score)) | beam.WindowInto(window.FixedWindows(60)) | beam.CombinePerKey(sum)
    )
    dead = beam.capture(bad)
    with guard as guarded:
        result = p.run()
    found = sorted((e.value, int(e.windows[0].start)) for e in result.emissions(sums))
    assert found == sorted(
        [(("t0", 6), start) for start in (0, 60, 120)] + [(("t1", 4), start) for start in (0, 60, 120)]
    )
    # each dead letter names its file (a path, as given) and line, with the line's raw text
    letters = sorted((e.value.file, e.value.line, e.value.record) for e in result.emissions(dead))
    assert letters == sorted(
        [(str(directory / f"f{index}.json"), 7, "{oops") for index in range(3)]
        + [(str(directory / "f1.json"), 8, '{"team": "t0", "score": 1}')]
    )
    assert "timestamp is missing" in next(e.value.error for e in result.emissions(dead) if e.value.line == 8)
    assert sum(r.dead_letters for r in source_records(result)) == 4
    # the source's watermark follows the data (monotonic estimator: the latest event time
    # of the files read so far, however the steps took them), then +inf at the end
    marks = [r.output_watermark for r in source_records(result)]
    assert marks == sorted(marks)
    assert marks[-1] == MAX_TIMESTAMP.micros
    assert set(marks) - {MIN_TIMESTAMP.micros, MAX_TIMESTAMP.micros} <= {4_000_000, 64_000_000, 124_000_000}
    # max_files_per_trigger=1: one file per step that reads one. On a busy machine a classic
    # run may take steps between them that read nothing (the query had not delivered the next
    # file yet), so those are left out, and the end of input may come a step after the last file.
    read = [(r.output_watermark, r.dead_letters) for r in source_records(result) if r.elements_in]
    assert [letters for _, letters in read] == [1, 2, 1]
    assert [mark for mark, _ in read][:2] == [4_000_000, 64_000_000]
    assert read[2][0] in (124_000_000, MAX_TIMESTAMP.micros)
    return guarded


def test_missing_timestamp_field_is_refused_before_any_data(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    write_lines(str(directory / "f.json"), [json.dumps({"team": "a", "score": 1})])
    p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    p | "Read" >> beam.io.ReadFromJsonStream(str(directory), timestamp="event_time")  # schema inferred
    with pytest.raises(TransformError, match=r"'Read/Read'.*timestamp field 'event_time' is not in the source's records"):
        p.run()
    assert not os.listdir(tmp_path / "ck" / "sources" / "0" / "wal")


def test_checkpoint_dir_of_another_pipeline_is_refused(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    write_lines(str(directory / "f.txt"), ["a,1", "b,2"])
    checkpoint = str(tmp_path / "ck")

    def build(extra_step: bool):
        p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=checkpoint))
        lines = p | "Read" >> beam.io.ReadFromTextStream(str(directory), timestamp=lambda line: int(line.split(",")[1]))
        if extra_step:
            lines = lines | "Upper" >> beam.Map(str.upper)
        beam.capture(lines | "Split" >> beam.Map(lambda line: line.split(",")))
        return p

    build(False).run()
    with pytest.raises(CheckpointError, match=r"another shape(.|\n)*Upper"):
        build(True).run()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.csv").write_text("x\n")
    p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(foreign)))
    p | "Read" >> beam.io.ReadFromTextStream(str(directory))
    with pytest.raises(CheckpointError, match=r"is not a sparkbeam checkpoint directory \(it holds data.csv"):
        p.run()


def test_idle_partition_stops_holding_the_watermark(spark, tmp_path):
    """Device b sends once and goes quiet; device a keeps sending. With an idle timeout the
    source's watermark follows a; without one it stays at b's last event time."""

    def run(idle_timeout):
        directory = tmp_path / f"in-{idle_timeout}"
        directory.mkdir()
        log = tmp_path / f"timeline-{idle_timeout}.jsonl"
        write_lines(str(directory / "first.txt"), ["a,10", "b,20"])
        settings = {"max_steps": 45, "timeline_log": str(log), "checkpoint_dir": str(tmp_path / f"ck-{idle_timeout}")}
        p = beam.Pipeline(options=options(**settings))
        p | "Read" >> beam.io.ReadFromTextStream(
            str(directory),
            timestamp=lambda line: int(line.split(",")[1]),
            partition_by=lambda line: line.split(",")[0],
            idle_timeout=idle_timeout,
        )
        stop = threading.Event()

        def feed():
            # once the first file has been read, a sends a file every 0.15 s; b never again
            while not stop.wait(0.05):
                if log.exists() and any(json.loads(line)["elements_in"] for line in log.read_text().splitlines()):
                    break
            for second in range(30, 400, 10):
                if stop.wait(0.15):
                    return
                write_lines(str(directory / f"a{second}.txt"), [f"a,{second}"])

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        try:
            result = p.run()
        finally:
            stop.set()
            feeder.join()
        return source_records(result)

    held = run(None)
    assert max(r.output_watermark for r in held) == 20_000_000  # b's last event holds it
    assert held[-1].hold_key == "partition 'b'"
    freed = run(1.0)
    assert max(r.output_watermark for r in freed) > 40_000_000
    # while a sends, a holds the watermark and b is reported idle
    assert any(r.hold_key == "partition 'a' (1 idle)" for r in freed)


def test_records_too_far_behind_the_watermark_are_dropped_at_the_source(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    log = tmp_path / "timeline.jsonl"
    write_lines(str(directory / "f0.txt"), ["k,100", "k,110"])
    p = beam.Pipeline(options=options(max_steps=30, timeline_log=str(log), checkpoint_dir=str(tmp_path / "ck")))
    kept = beam.capture(
        p | "Read" >> beam.io.ReadFromTextStream(
            str(directory), timestamp=lambda line: int(line.split(",")[1]), allowed_delay=5
        )
    )

    def feed_late_once_watermark_moved():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and any(json.loads(line)["output_watermark"] >= 110_000_000 for line in log.read_text().splitlines() if line):
                write_lines(str(directory / "f1.txt"), ["k,90", "k,106", "k,120"])
                return
            time.sleep(0.05)

    feeder = threading.Thread(target=feed_late_once_watermark_moved, daemon=True)
    feeder.start()
    result = p.run()
    feeder.join()
    values = sorted(e.value for e in result.emissions(kept))
    assert values == ["k,100", "k,106", "k,110", "k,120"]  # 90 < 110 - 5: dropped; 106 kept, late
    assert sum(r.late_dropped for r in source_records(result)) == 1


def test_rate_source_delivers_every_value_once_with_per_partition_watermarks(spark_session_kind, tmp_path):
    """On both session kinds (under Connect the rate source's query runs on the server and
    writes the log there, runners/spark/connect/stream_intake.py): every value once, the
    source's watermark at each step, and Spark's offsets in the checkpoint."""
    checkpoint_dir = tmp_path / "ck"
    # as many steps as the checkpoint interval (10): the last checkpoint follows the last step
    p = beam.Pipeline(options=options(max_steps=10, checkpoint_dir=str(checkpoint_dir), **spark_session_kind))
    values = beam.capture(p | "Read" >> beam.io.ReadFromRate(rows_per_second=40, num_partitions=2))
    result = p.run()
    emitted = result.emissions(values)
    got = sorted(e.value for e in emitted)
    assert got, "the rate source delivered nothing"
    assert got == list(range(len(got)))  # every value once, none missing in between
    records = source_records(result)
    # no empty step while the query started: the first step read the first batch
    assert records[0].elements_in > 0
    holds = {r.hold_key for r in records if r.hold_key}
    assert holds <= {"partition '0'", "partition '1'"} and holds
    # Each step's watermark: the earliest over the two partitions of the latest time read
    # there (Spark's rate source deals each second's values out in turn: value % 2).
    latest: dict[int, int] = {}
    for record in records:
        for e in emitted:
            if e.step == record.step:
                latest[e.value % 2] = max(latest.get(e.value % 2, e.timestamp.micros), e.timestamp.micros)
        if len(latest) == 2:
            assert record.output_watermark == min(latest.values()), record
    stamps = [e.timestamp.micros for e in emitted]
    assert all(abs(s - time.time() * 1e6) < 120e6 for s in stamps)  # the rate source's own time
    # The checkpoint's offsets are Spark's for the last batch read: whole seconds of the rate
    # source, each of rows_per_second values.
    (source,) = CheckpointStore(str(checkpoint_dir), []).newest()["sources"].values()
    assert int(source["offsets"]) * 40 == len(got)


def test_socket_source_reads_lines(spark_session_kind, tmp_path):
    """On both session kinds (under Connect the server's query connects to the socket). The
    run is cancelled once every line is out, rather than left to run a number of steps."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    read_all = threading.Event()

    def serve():
        connection, _ = server.accept()
        with connection:
            for second in range(12):
                connection.sendall(f"event,{second}\n".encode())
                time.sleep(0.1)
            read_all.wait(120)  # the connection stays open while the stream runs

    threading.Thread(target=serve, daemon=True).start()
    p = beam.Pipeline(options=options(block_on_run=False, checkpoint_dir=str(tmp_path / "ck"), **spark_session_kind))
    lines = beam.capture(
        p | "Read" >> beam.io.ReadFromSocket("127.0.0.1", port, timestamp=lambda line: int(line.split(",")[1]))
    )
    result = p.run()
    deadline = time.monotonic() + 120
    try:
        while len(result.emissions(lines)) < 12 and time.monotonic() < deadline:
            assert result.state == PipelineState.RUNNING, result.state
            time.sleep(0.1)
    finally:
        result.cancel()
        read_all.set()
        server.close()
    got = sorted(((e.value, e.timestamp.micros) for e in result.emissions(lines)), key=lambda item: item[1])
    assert got == [(f"event,{s}", s * 1_000_000) for s in range(12)]


def test_kafka_without_its_connector_names_the_missing_package(spark, tmp_path, monkeypatch):
    from sparkbeam.runners.spark import kafka

    # A worker that collected the Kafka tests starts its session with the connector: the
    # class lookup is made to fail as it does on a session without it.
    monkeypatch.setattr(kafka, "connector_version", lambda spark: (None, None))
    p = beam.Pipeline(options=options(max_steps=3, checkpoint_dir=str(tmp_path / "ck")))
    p | "Read" >> beam.io.ReadFromKafka({"bootstrap.servers": "localhost:9"}, ["scores"])
    with pytest.raises(TransformError, match=r"'Read/Read'.*Kafka connector is not on the classpath.*spark-sql-kafka-0-10"):
        p.run()


def test_bounded_out_of_orderness_estimator_is_accepted_by_every_read():
    estimator = BoundedOutOfOrdernessWatermarkEstimator(max_delay=10)
    read = beam.io.ReadFromTextStream("/in", timestamp=float, watermark=estimator)
    assert read.spec().watermark is estimator


class EveryOtherSecond(beam.io.WatermarkEstimator):
    """A user's estimator: the latest event time seen, rounded down to an even second."""

    def __init__(self):
        self.latest = None

    def observe(self, batch):
        if batch.count:
            self.latest = batch.max_timestamp if self.latest is None else max(self.latest, batch.max_timestamp)

    def current_watermark(self, now):
        return None if self.latest is None else self.latest - self.latest % 2_000_000


def test_csv_stream_with_a_user_estimator(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    write_lines(str(directory / "a.csv"), ["user,score,ts", "ann,3,1.5", "bob,4,7.0", "cy,x,8.0"], mtime=1_700_000_000)
    # not available-now: that could take the file and the end of the input in one step
    p = beam.Pipeline(options=options(max_steps=30, checkpoint_dir=str(tmp_path / "ck")))
    good, bad = p | "Read" >> beam.io.ReadFromCsvStream(
        str(directory), schema="user STRING, score INT, ts DOUBLE", timestamp="ts", watermark=EveryOtherSecond()
    ).with_exception_handling()
    rows = beam.capture(good)
    dead = beam.capture(bad)
    result = p.run()
    assert sorted((e.value.user, e.value.score, e.timestamp.micros) for e in result.emissions(rows)) == [
        ("ann", 3, 1_500_000),
        ("bob", 4, 7_000_000),
    ]
    # score is not an INT: line 4, counting the header
    assert [(e.value.file, e.value.line, e.value.record) for e in result.emissions(dead)] == [
        (str(directory / "a.csv"), 4, "cy,x,8.0")
    ]
    marks = {r.output_watermark for r in source_records(result)}
    assert max(marks) == 6_000_000  # 7 s rounded down to an even second


def test_parquet_stream_reads_records_as_dicts(spark, tmp_path):
    import pyarrow
    import pyarrow.parquet as pq

    directory = tmp_path / "in"
    directory.mkdir()
    table = pyarrow.table({"device": ["d1", "d2", "d1"], "reading": [1.5, 2.5, 3.5], "ts": [10, 20, 30]})
    pq.write_table(table, str(directory / "part-0.parquet"))
    p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    records = beam.capture(p | "Read" >> beam.io.ReadFromParquetStream(str(directory), timestamp="ts", partition_by="device"))
    result = p.run()
    assert sorted((e.value["device"], e.value["reading"], e.timestamp.micros) for e in result.emissions(records)) == [
        ("d1", 1.5, 10_000_000),
        ("d1", 3.5, 30_000_000),
        ("d2", 2.5, 20_000_000),
    ]


def test_a_long_stream_keeps_its_last_steps_and_a_resumed_run_logs_every_element_once(spark, tmp_path):
    """Retention of 4 steps and a checkpoint every 4 steps, one file per step: the first run
    stops after step 5 (its checkpoint resumes at 4); the second replays steps 4 and 5 and
    reads the rest."""
    import pickle

    from sparkbeam.runners.core.loop.timeline import TrimmedHistoryError

    directory = tmp_path / "in"
    directory.mkdir()
    expected = []
    for index in range(16):
        lines = [f"f{index}-{j},{index * 10 + j}" for j in range(3)]
        write_lines(str(directory / f"f{index:02d}.txt"), lines, mtime=1_700_000_000 + index)
        expected += lines
    timeline_log, capture_log, checkpoint = tmp_path / "timeline.jsonl", tmp_path / "lines.jsonl", tmp_path / "ck"

    def run(**settings):
        settings.update(timeline_log=str(timeline_log), timeline_retention_steps=4, checkpoint_interval=4)
        p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(checkpoint), **settings))
        lines = beam.capture(
            p | "Read" >> beam.io.ReadFromTextStream(
                str(directory), timestamp=lambda line: int(line.split(",")[1]), max_files_per_trigger=1
            ),
            log=str(capture_log),
        )
        return p.run(), lines

    first, _ = run(max_steps=6)
    assert first.watermarks().steps == 6  # stopped by max_steps, with input left
    result, lines = run()
    timeline = result.watermarks()
    steps = timeline.steps
    assert steps > 8 and timeline.first_step == steps - 4
    assert sorted({r.step for r in timeline}) == list(range(steps - 4, steps))
    with pytest.raises(TrimmedHistoryError, match=str(timeline_log)):
        timeline.at_step(3)
    emitted = result.emissions(lines)
    assert emitted.first_step == steps - 4 and all(e.step >= steps - 4 for e in emitted)
    # the timeline's log has every step, the replayed steps 4 and 5 twice
    logged = [json.loads(line) for line in timeline_log.read_text().splitlines()]
    assert sorted({r["step"] for r in logged}) == list(range(steps))
    assert sorted(r["step"] for r in logged if r["step"] in (4, 5) and r["stage_id"] == 0) == [4, 4, 5, 5]
    # the capture's log has every line once, though steps 4 and 5 ran twice
    captured = [json.loads(line) for line in capture_log.read_text().splitlines()]
    assert sorted(line["value"] for line in captured) == sorted(expected)
    assert sorted(e.value for e in emitted) == sorted(c["value"] for c in captured if c["step"] >= steps - 4)
    # a checkpoint holds only the steps kept
    store = CheckpointStore.inspect(str(checkpoint), key=load_key()[0])
    newest = store.checkpoint_path(store.newest()["step"])
    history = pickle.loads(store.read_sealed(os.path.join(newest, LOOP_FILE), "loop"))["loop"]["history"]
    assert len(history["records"]) == 4
