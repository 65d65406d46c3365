"""Checkpoints and file sinks on HDFS for real: an HDFS mini-cluster (the ``hdfs`` fixture,
``tools/hdfs_cluster.py``: one NameNode and one DataNode on loopback, from Maven Central's
``hadoop-client-minicluster`` of PySpark's Hadoop version) reached through the HDFS client
in PySpark's own jars.

What the files hold is read back with Hadoop's ``FileSystem`` called directly in the
driver's JVM (``stored``), not through sparkbeam's ``HadoopFileSystem``.

The README's test command runs the checkpoint primitives (and HDFS's atomic create-if-absent
under a race), every batch file sink and ``WriteToFiles``, a short stream with its
checkpoints, write-ahead log, journal and step folders on ``hdfs://``, an unreachable
NameNode and a streaming ``WriteToFiles`` refused. ``tests/full_matrix.py`` has the
recovery tests' stream job on ``hdfs://`` run to its end here (about 40 s of CPU) and
killed with SIGKILL (two more drivers' JVMs), and the Spark Connect cases (a server beside
the mini-cluster: ``hdfs://`` reads, a watched folder on ``hdfs://``), each with what still
covers it.
"""

from __future__ import annotations

import collections
import json
import socket
import threading

import pytest

import sparkbeam as beam
from sparkbeam.io import commits
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.spark.checkpoints import CheckpointStore
from tests.runners import test_stream_recovery as recovery
from tests.runners.file_sinks import (
    assert_same_sink_files,
    by_window_and_destination,
    hadoop_settings,
    write_everything,
    write_files,
)

pytestmark = [pytest.mark.spark, pytest.mark.hdfs, pytest.mark.timeout(600)]

#: Hadoop's client settings for this module: one replica (one DataNode), and a NameNode
#: that is not there refused at the first attempt rather than after ten seconds of retries.
CLIENT_SETTINGS = {"dfs.replication": "1", "ipc.client.connect.max.retries": "0"}


@pytest.fixture(scope="module")
def cluster(spark, hdfs):
    with hadoop_settings(spark, CLIENT_SETTINGS):
        yield hdfs


def stored(spark, url: str) -> dict[str, bytes]:
    """Every file under ``url``, by its path below it, read with Hadoop's FileSystem."""
    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(url)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return {}
    below = str(fs.makeQualified(root).toUri().getPath()).rstrip("/") + "/"
    found = {}
    listing = fs.listFiles(root, True)
    while listing.hasNext():
        path = listing.next().getPath()
        stream = fs.open(path)
        try:
            found[str(path.toUri().getPath()).removeprefix(below)] = bytes(stream.readAllBytes())
        finally:
            stream.close()
    return found


def _is_directory(spark, url: str) -> bool:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(url)
    return bool(path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).isDirectory(path))


def test_the_checkpoint_primitives_work_on_hdfs(cluster, spark):
    from sparkbeam.runners.spark.hadoop_filesystem import HadoopFileSystem

    root = cluster.url("primitives")
    assert HadoopFileSystem().hadoop_class(root) == "org.apache.hadoop.hdfs.DistributedFileSystem"
    commits.makedirs(root, private=True)
    jvm = spark.sparkContext._jvm
    status = jvm.org.apache.hadoop.fs.Path(root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).getFileStatus(
        jvm.org.apache.hadoop.fs.Path(root)
    )
    assert str(status.getPermission().toString()) == "rwx------"  # HDFS has permissions: set
    commits.write_bytes(commits.join(root, "manifest.json"), b'{"step": 1}')
    commits.write_bytes(commits.join(root, "manifest.json"), b'{"step": 2}')  # replaced
    assert json.loads(commits.read_bytes(commits.join(root, "manifest.json"))) == {"step": 2}
    with commits.staging_directory(commits.join(root, "step-1")) as temp:
        commits.write_bytes(commits.join(temp, "part"), b"x\n")
        commits.commit_directory(temp, commits.join(root, "step-1"))
    with commits.staging_directory(commits.join(root, "step-1")) as temp:  # replaced whole
        commits.write_bytes(commits.join(temp, "part-2"), b"y\n")
        commits.commit_directory(temp, commits.join(root, "step-1"))
    assert sorted(commits.list_names(root)) == ["manifest.json", "step-1"]
    assert stored(spark, root) == {"manifest.json": b'{"step": 2}', "step-1/part-2": b"y\n"}
    # The lease's create-if-absent is one NameNode operation on HDFS: of writers racing
    # for it, exactly one wins (on S3 it is a check then a put).
    holder = commits.join(root, "lease", "holder")
    won: list[bytes] = []
    barrier = threading.Barrier(6)

    def race(name: bytes) -> None:
        barrier.wait()
        if commits.create_new(holder, name):
            won.append(name)

    racers = [threading.Thread(target=race, args=(f"run-{i}".encode(),)) for i in range(6)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert len(won) == 1 and commits.read_bytes(holder) == won[0]
    commits.remove(commits.join(root, "step-1"))
    assert not commits.exists(commits.join(root, "step-1"))


def test_batch_file_sinks_write_on_hdfs_the_bytes_they_write_locally(cluster, tmp_path, spark):
    local = tmp_path / "local"
    with beam.Pipeline() as p:
        write_everything(p, str(local))
    with beam.Pipeline() as p:
        write_everything(p, cluster.url("batch"))
    here = {
        str(path.relative_to(local)): path.read_bytes()
        for path in local.rglob("*") if path.is_file() and not path.name.startswith(".")
    }
    there = stored(spark, cluster.url("batch"))
    assert_same_sink_files(there, here)
    # and a pipeline reads back what it wrote there
    p = beam.Pipeline()
    lines = beam.capture(p | beam.io.ReadFromText(cluster.url("batch", "text-*")))
    result = p.run()
    assert sorted(e.value for e in result.emissions(lines)) == sorted(f"n{i} {i}" for i in range(40))


def test_write_to_files_writes_on_hdfs_the_files_it_writes_locally(cluster, tmp_path, spark):
    """Bounded WriteToFiles on hdfs:// goes through the driver: per destination and window
    the same names and lines as the local write (how many shards a window has follows the
    partitions: Beam numbers the files a window's bundles wrote)."""
    local = tmp_path / "files"
    with beam.Pipeline() as p:
        write_files(p, str(local))
    with beam.Pipeline() as p:
        write_files(p, cluster.url("files"))
    here = {path.name: path.read_bytes() for path in local.iterdir() if path.is_file()}
    there = stored(spark, cluster.url("files"))
    assert not [name for name in there if "/" in name or name.startswith(".")]  # no temporary folder left
    assert by_window_and_destination(there) == by_window_and_destination(here)
    assert len(by_window_and_destination(there)) == 3 * 3  # three destinations, three windows
    # Beam's default names, with colons: refused naming the transform and what to change
    from sparkbeam.io import fileio

    with pytest.raises(ValueError, match=r"'WriteFiles' \(applied at .*file_sinks.py:\d+\): cannot write .*k0-1970-01-01T00:00:00.*HDFS refuses ':'"), beam.Pipeline() as p:
        write_files(p, cluster.url("colons"), file_naming=fileio.destination_prefix_naming(".txt"))
    assert not stored(spark, cluster.url("colons"))  # the uploaded files went with their temporary folder


def test_write_to_files_in_a_stream_on_hdfs_is_refused_before_the_run(cluster, tmp_path):
    from sparkbeam.io import fileio

    input_dir = tmp_path / "in"
    input_dir.mkdir()
    options = PipelineOptions(streaming=True, available_now=True)
    with pytest.raises(ValueError, match=r"'WriteFiles' \(applied at .*test_hdfs.py:\d+\): WriteToFiles in a stream writes"), beam.Pipeline(options=options) as p:
        p | beam.io.ReadFromTextStream(str(input_dir)) | "WriteFiles" >> fileio.WriteToFiles(cluster.url("stream-files"))


def committed_on_hdfs(spark, url: str, name: str) -> collections.Counter:
    """The lines of ``name``'s step folders under ``url`` (a committed folder is renamed in
    whole on HDFS: a folder holding no ``_SUCCESS`` would be a bug)."""
    found = stored(spark, url)
    done = {key.rsplit("/", 1)[0] for key in found if key.endswith("/_SUCCESS")}
    lines: collections.Counter = collections.Counter()
    for key, data in found.items():
        folder, _, leaf = key.rpartition("/")
        if folder.startswith(f"{name}-step-") and leaf != "_SUCCESS":
            assert folder in done, f"{folder} has no _SUCCESS"
            lines.update(line for line in data.decode().splitlines())
    return lines


def _stream_outputs_are_exact(spark, out: str, expected: collections.Counter, counts: collections.Counter) -> None:
    totals = committed_on_hdfs(spark, out, "totals")
    assert recovery.totals(totals) == expected
    assert all(times == 1 for times in totals.values())
    fired = committed_on_hdfs(spark, out, "counts")
    assert all(times == 1 for times in fired.values()), f"a timer fired twice: {fired}"
    assert collections.Counter({(t, int(s)): int(c) for t, s, c in (line.split(",") for line in fired)}) == counts
    assert sum(committed_on_hdfs(spark, out, "bad").values()) == recovery.dead_letters_written()
    # no temporary step folder left behind
    assert not [key for key in stored(spark, out) if "/.sparkbeam-" in f"/{key}"]


def test_a_short_stream_keeps_its_checkpoints_log_journal_and_step_folders_on_hdfs(cluster, tmp_path, spark):
    """Two files read as two steps, checkpointed after each, written to a folder per step:
    the checkpoint directory (write-ahead log, journal, checkpoints) and the output on hdfs://."""
    import os

    input_dir = tmp_path / "in"
    input_dir.mkdir()
    expected: collections.Counter = collections.Counter()
    for index in range(2):
        lines = [f"file{index} line{i}" for i in range(5)]
        expected.update(line.upper() for line in lines)
        (input_dir / f"part-{index}.txt").write_text("\n".join(lines) + "\n")
        os.utime(input_dir / f"part-{index}.txt", (1_700_000_000 + index,) * 2)  # the files' order
    checkpoint, out = cluster.url("short", "ck"), cluster.url("short", "out")
    options = PipelineOptions(available_now=True, checkpoint_dir=checkpoint, checkpoint_interval=1, step_interval=0.2, state_partitions=2)
    with beam.Pipeline(options=options) as p:
        (
            p
            | beam.io.ReadFromTextStream(str(input_dir), max_files_per_trigger=1)
            | beam.Map(str.upper)
            | "WriteLines" >> beam.io.WriteToText(f"{out}/lines")
        )
    written = committed_on_hdfs(spark, out, "lines")
    assert written == expected
    folders = {key.split("/")[0] for key in stored(spark, out) if key.startswith("lines-step-")}
    assert len(folders) == 2, folders  # a step per file
    kept = stored(spark, checkpoint)
    assert "sparkbeam-checkpoint.json" in kept
    for part in ("checkpoints/", "journal/", "lease/", "sources/0/spark/offsets/", "sources/0/spark/commits/"):
        assert any(key.startswith(part) for key in kept), (part, sorted(kept))
    manifests = CheckpointStore(checkpoint, []).manifests()
    assert manifests and manifests[0]["finished"]
    # The write-ahead log is on hdfs:// too: Spark commits a batch only once its log entry
    # is written there, and a checkpoint's pruning removes exactly the batches the oldest
    # kept checkpoint has consumed (how many steps ran, and so which batches remain, depends
    # on timing: the two files' batches are gone once a checkpoint after both is the oldest).
    committed = {int(leaf) for key in kept if key.startswith("sources/0/spark/commits/") and (leaf := key.rsplit("/", 1)[1]).isdigit()}
    assert committed >= {0, 1}, sorted(kept)
    consumed = int(manifests[-1]["sources"]["0"]["consumed_through"])
    logged = {int(key.split("/")[3].split(".")[0]) for key in kept if key.startswith("sources/0/wal/")}
    assert logged == {b for b in committed if b > consumed}, (consumed, sorted(kept))
    assert _is_directory(spark, f"{checkpoint}/sources/0/wal")


def test_a_stream_keeps_its_checkpoints_log_journal_and_step_folders_on_hdfs(cluster, tmp_path, spark):
    """The recovery tests' stream job (tests/runners/stream_job.py), run here to its end with
    --checkpoint_dir and its four sinks on hdfs://: the exact totals, timers and dead letters."""
    input_dir = str(tmp_path / "in")
    expected, counts = recovery.write_input_and_counts(input_dir)
    checkpoint, out, log = cluster.url("stream", "ck"), cluster.url("stream", "out"), str(tmp_path / "log.jsonl")
    recovery.run_job_here(input_dir, out, checkpoint, log)
    kept = stored(spark, checkpoint)
    assert "sparkbeam-checkpoint.json" in kept
    assert any(key.startswith("checkpoints/") for key in kept)
    assert any(key.startswith("journal") for key in kept), sorted(kept)
    newest = CheckpointStore(checkpoint, []).newest()
    assert newest is not None and newest["finished"]
    _stream_outputs_are_exact(spark, out, expected, counts)
    recovery.check_watermarks(recovery.timeline(log))


def test_a_stream_with_checkpoints_and_sinks_on_hdfs_resumes_exactly_after_sigkill(cluster, tmp_path, spark):
    """--checkpoint_dir=hdfs://... and the file sinks on hdfs://: killed with SIGKILL after a
    few steps, then run to its end, the stream gives exactly the totals and the stateful
    outputs an uninterrupted run gives (computed here in plain Python)."""
    input_dir = str(tmp_path / "in")
    expected, counts = recovery.write_input_and_counts(input_dir)
    checkpoint, out, log = cluster.url("killed", "ck"), cluster.url("killed", "out"), str(tmp_path / "log.jsonl")
    flags = [flag for key, value in CLIENT_SETTINGS.items() for flag in ("--spark_conf", f"spark.hadoop.{key}={value}")]
    assert not recovery.run_job(input_dir, out, checkpoint, log, 3, *flags)
    assert recovery.run_job(input_dir, out, checkpoint, log, None, *flags)
    _stream_outputs_are_exact(spark, out, expected, counts)
    sequence = committed_on_hdfs(spark, out, "sequence")
    assert all(times == 1 for times in sequence.values()), "a sequence number was output twice"
    recovery.check_watermarks(recovery.timeline(log))


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_namenode_that_cannot_be_reached_is_refused_before_the_first_step(cluster, tmp_path):
    nowhere = f"hdfs://127.0.0.1:{_closed_port()}"
    touched = tmp_path / "touched"

    def touch(element):
        touched.write_text("a step ran")
        return element

    with pytest.raises(ValueError, match=r"'WriteScores' \(applied at .*test_hdfs.py:\d+\)") as refused, beam.Pipeline() as p:
        p | beam.Create([1, 2]) | beam.Map(touch) | "WriteScores" >> beam.io.WriteToText(f"{nowhere}/out/scores")
    assert f"its namenode {nowhere.removeprefix('hdfs://')} cannot be reached" in str(refused.value)
    with pytest.raises(ValueError, match=r"'WriteFiles' \(applied at .*test_hdfs.py:\d+\): .* its namenode"), beam.Pipeline() as p:
        p | beam.Create(["a"]) | beam.Map(touch) | "WriteFiles" >> beam.io.fileio.WriteToFiles(f"{nowhere}/files")
    options = PipelineOptions(streaming=True, checkpoint_dir=f"{nowhere}/ck", available_now=True)
    input_dir = tmp_path / "in"
    input_dir.mkdir()
    (input_dir / "a.txt").write_text("x\n")
    with pytest.raises(ValueError, match=f"--checkpoint_dir: {nowhere}/ck cannot be used: its namenode") as refused, beam.Pipeline(options=options) as p:
        p | beam.io.ReadFromTextStream(str(input_dir)) | beam.Map(touch)
    assert not touched.exists()


def _put(spark, url: str, data: bytes) -> None:
    """Writes ``data`` as the file ``url`` with Hadoop's FileSystem in the driver's JVM."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(url)
    stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def test_text_reads_of_hdfs_on_spark_connect_give_what_the_classic_session_reads(cluster, connect_server, spark):
    """ReadFromText of hdfs:// under Spark Connect (runners/spark/connect/remote_reads.py):
    matched and read by the server's Spark, plain lines by its text source, a compressed file
    and a read with header lines whole; the same elements as a classic session's read, and a
    pattern that matches nothing refused as Beam refuses it."""
    import gzip

    _put(spark, cluster.url("reads", "a.txt"), b"a1\na2\n")
    _put(spark, cluster.url("reads", "b.txt"), b"b1\nb2\nb3")
    _put(spark, cluster.url("reads", "empty.txt"), b"")
    _put(spark, cluster.url("reads", "h.csv"), b"name,score\nx,1\ny,2\n")
    _put(spark, cluster.url("reads", "z.txt.gz"), gzip.compress(b"z1\nz2\n"))

    def read(options):
        p = beam.Pipeline(options=PipelineOptions(**options))
        outputs = {
            "plain": p | "Plain" >> beam.io.ReadFromText(cluster.url("reads", "*.txt")),
            "gzip": p | "Gzip" >> beam.io.ReadFromText(cluster.url("reads", "z.txt.gz")),
            "header": p | "Header" >> beam.io.ReadFromText(cluster.url("reads", "h.csv"), skip_header_lines=1),
            "unvalidated": p | "Nothing" >> beam.io.ReadFromText(cluster.url("reads", "none-*"), validate=False),
        }
        captured = {name: beam.capture(pcoll) for name, pcoll in outputs.items()}
        result = p.run()
        return {name: sorted(e.value for e in result.emissions(c)) for name, c in captured.items()}

    on_connect = read({"spark_remote": connect_server.url})
    assert on_connect == {
        "plain": ["a1", "a2", "b1", "b2", "b3"],
        "gzip": ["z1", "z2"],
        "header": ["x,1", "y,2"],
        "unvalidated": [],
    }
    assert on_connect == read({})
    p = beam.Pipeline(options=PipelineOptions(spark_remote=connect_server.url))
    beam.capture(p | "Missing" >> beam.io.ReadFromText(cluster.url("reads", "none-*")))
    with pytest.raises(Exception, match=r"'Missing' \(applied at .*test_hdfs.py:\d+\): no files match 'hdfs://"):
        p.run()
    nowhere = f"hdfs://127.0.0.1:{_closed_port()}"
    p = beam.Pipeline(options=PipelineOptions(spark_remote=connect_server.url))
    beam.capture(p | "Unreachable" >> beam.io.ReadFromText(f"{nowhere}/in/*.txt"))
    with pytest.raises(Exception, match=r"'Unreachable' \(applied at .*test_hdfs.py:\d+\): the Spark Connect server could not list 'hdfs://127.0.0.1:\d+/in/\*.txt': \S"):
        p.run()


def test_a_watched_folder_on_hdfs_streams_on_spark_connect_as_on_the_classic_session(cluster, connect_server, spark, tmp_path):
    """ReadFromTextStream of an hdfs:// folder under Spark Connect: the server's Spark lists
    and reads it, its write-ahead log's tasks number the lines and write the log (a local
    --checkpoint_dir); the same lines, event times and dead letters as a classic session's
    run of the same folder, and the same source watermark at each step that reads a file."""
    from sparkbeam.utils.timestamp import MAX_TIMESTAMP

    for index in range(3):
        lines = [f"k{i},{index * 60 + i}" for i in range(4)] + (["k9,late?"] if index == 1 else [])
        _put(spark, cluster.url("watched", f"f{index}.txt"), ("\n".join(lines) + "\n").encode())

    def run(kind, options):
        p = beam.Pipeline(
            options=PipelineOptions(
                available_now=True, step_interval=0.2, state_partitions=2, checkpoint_dir=str(tmp_path / f"ck-{kind}"), **options
            )
        )
        good, bad = p | "Watch" >> beam.io.ReadFromTextStream(
            cluster.url("watched"), timestamp=lambda line: int(line.split(",")[1]), max_files_per_trigger=1
        ).with_exception_handling()
        lines, dead = beam.capture(good), beam.capture(bad)
        result = p.run()
        marks = [r.output_watermark for r in result.watermarks().for_stage("Watch/Read")]
        assert marks == sorted(marks) and marks[-1] == MAX_TIMESTAMP.micros
        # A file per step that reads one (a step between them may read nothing, and the end
        # of input may come with the last file or a step after it: timing, not the session).
        read = [(r.elements_in, r.dead_letters, r.output_watermark) for r in result.watermarks().for_stage("Watch/Read") if r.elements_in]
        assert read[:2] == [(4, 0, 3_000_000), (5, 1, 63_000_000)] and read[2][:2] == (4, 0)
        assert read[2][2] in (123_000_000, MAX_TIMESTAMP.micros)
        return (
            sorted((e.value, e.timestamp.micros) for e in result.emissions(lines)),
            sorted((e.value.file, e.value.line, e.value.record) for e in result.emissions(dead)),
        )

    on_connect = run("connect", {"spark_remote": connect_server.url})
    assert on_connect == run("classic", {})
    lines, dead = on_connect
    assert lines == sorted((f"k{i},{index * 60 + i}", (index * 60 + i) * 1_000_000) for index in range(3) for i in range(4))
    ((file, line, record),) = dead
    assert (file.startswith("hdfs://"), file.endswith("/watched/f1.txt"), line, record) == (True, True, 5, "k9,late?")
