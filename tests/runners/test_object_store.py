"""Checkpoints and file sinks on S3 for real: a local S3 server (moto, ``tools/object_store.py``)
reached through Hadoop's s3a connector (hadoop-aws of PySpark's Hadoop version, from Maven
Central, cached per user).

**How these tests get a session with the connector.** The tests' shared SparkSession
(``tests/conftest.py``) starts with hadoop-aws's jars on its class path whenever the run
collected a test marked ``objectstore``: jars are fixed when a JVM starts, and a separate
driver process per module would cost a second JVM start on a 2-core machine for tests that
otherwise take seconds; the connector changes nothing for the other tests (it serves only
``s3a://``). The s3a settings are per bucket (``fs.s3a.bucket.<bucket>.*``) and set on the
running session for this module only, so each bad-input bucket has its own endpoint or
credentials. The SIGKILL test's stream job is a process of its own and is given the same
jars and settings through ``--spark_conf``.

The README's test command runs the checkpoint primitives, the batch sinks and the missing
bucket; the SIGKILL stream and the other bad buckets (marked ``full``: minutes of two
drivers' JVMs on a 2-core machine) run in ``tests/full_matrix.sh``.
"""

from __future__ import annotations

import collections
import json
import socket

import pytest

import sparkbeam as beam
from sparkbeam.io import commits
from sparkbeam.options.pipeline_options import PipelineOptions
from tests.runners import test_stream_recovery as recovery
from tests.runners.file_sinks import (
    assert_same_sink_files,
    by_window_and_destination,
    hadoop_settings,
    write_everything,
    write_files,
)
from tools.object_store import S3Server, hadoop_aws_jars

pytestmark = [pytest.mark.spark, pytest.mark.objectstore, pytest.mark.timeout(900)]

BUCKET = "sparkbeam-tests"
MISSING = "sparkbeam-missing"  # configured, never created
WRONG_KEY = "sparkbeam-wrong-key"  # created, reached with a wrong secret key
NOWHERE = "sparkbeam-nowhere"  # its endpoint is a closed port


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3(spark):
    server = S3Server().start()
    server.create_bucket(BUCKET)
    server.create_bucket(WRONG_KEY)
    settings = {
        **server.hadoop_settings(BUCKET),
        **server.hadoop_settings(MISSING),
        **server.hadoop_settings(WRONG_KEY, **{"secret.key": "not-the-key"}),
        **server.hadoop_settings(NOWHERE, endpoint=f"http://127.0.0.1:{_closed_port()}"),
    }
    try:
        with hadoop_settings(spark, settings):
            yield server
    finally:
        server.stop()


def objects(server: S3Server, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` of the bucket, by key, read with boto3 (not Hadoop)."""
    client = server.client()
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            found[item["Key"]] = client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
    return found


def test_the_checkpoint_primitives_work_on_s3(s3):
    from sparkbeam.runners.spark.hadoop_filesystem import HadoopFileSystem

    root = f"s3a://{BUCKET}/primitives"
    assert HadoopFileSystem().hadoop_class(root) == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    commits.makedirs(root, private=True)
    commits.write_bytes(commits.join(root, "manifest.json"), b'{"step": 1}')
    commits.write_bytes(commits.join(root, "manifest.json"), b'{"step": 2}')  # replaced
    assert json.loads(commits.read_bytes(commits.join(root, "manifest.json"))) == {"step": 2}
    # the lease's create-if-absent
    assert commits.create_new(commits.join(root, "lease", "holder"), b"a")
    assert not commits.create_new(commits.join(root, "lease", "holder"), b"b")
    assert commits.read_bytes(commits.join(root, "lease", "holder")) == b"a"
    with commits.staging_directory(commits.join(root, "step-1")) as temp:
        commits.write_bytes(commits.join(temp, "part"), b"x\n")
        commits.commit_directory(temp, commits.join(root, "step-1"))
    assert sorted(commits.list_names(root)) == ["lease", "manifest.json", "step-1"]
    assert objects(s3, "primitives/step-1/") == {"primitives/step-1/part": b"x\n"}
    commits.remove(commits.join(root, "step-1"))
    assert not commits.exists(commits.join(root, "step-1"))


def test_batch_file_sinks_write_on_s3_the_bytes_they_write_locally(s3, tmp_path, spark):
    local = tmp_path / "local"
    with beam.Pipeline() as p:
        write_everything(p, str(local))
    with beam.Pipeline() as p:
        write_everything(p, f"s3a://{BUCKET}/batch")
    here = {
        str(path.relative_to(local)): path.read_bytes()
        for path in local.rglob("*") if path.is_file() and not path.name.startswith(".")
    }
    there = {key.removeprefix("batch/"): data for key, data in objects(s3, "batch/").items()}
    assert_same_sink_files(there, here)
    # and Spark reads back what it wrote
    assert sorted(r.value for r in spark.read.text(f"s3a://{BUCKET}/batch/text-*").collect()) == sorted(
        f"n{i} {i}" for i in range(40)
    )


def test_write_to_files_writes_on_s3_the_files_it_writes_locally(s3, tmp_path):
    """Bounded WriteToFiles on s3a:// goes through the driver: per destination and window
    the same names (Beam's default, colons and all) and lines as the local write."""
    from sparkbeam.io import fileio

    naming = fileio.destination_prefix_naming(".txt")
    local = tmp_path / "files"
    with beam.Pipeline() as p:
        write_files(p, str(local), naming)
    with beam.Pipeline() as p:
        write_files(p, f"s3a://{BUCKET}/files", naming)
    here = {path.name: path.read_bytes() for path in local.iterdir() if path.is_file()}
    there = {key.removeprefix("files/"): data for key, data in objects(s3, "files/").items()}
    assert not [name for name in there if "/" in name or name.startswith(".")]  # no temporary folder left
    assert by_window_and_destination(there) == by_window_and_destination(here)
    assert len(by_window_and_destination(there)) == 3 * 3  # three destinations, three windows


def _committed_on_s3(server: S3Server, prefix: str, name: str) -> collections.Counter:
    """The lines of ``name``'s step folders that hold a ``_SUCCESS`` (complete ones)."""
    found = objects(server, prefix)
    done = {key.rsplit("/", 1)[0] for key in found if key.endswith("/_SUCCESS")}
    lines: collections.Counter = collections.Counter()
    for key, data in found.items():
        folder, leaf = key.rsplit("/", 1)
        if folder.rsplit("/", 1)[-1].startswith(f"{name}-step-") and leaf != "_SUCCESS":
            assert folder in done, f"{folder} has no _SUCCESS"
            lines.update(line for line in data.decode().splitlines())
    return lines


@pytest.mark.full
def test_a_stream_with_checkpoints_and_sinks_on_s3_resumes_exactly_after_sigkill(s3, tmp_path):
    """--checkpoint_dir=s3a://... and the file sinks on s3a://: killed with SIGKILL after a
    few steps, then run to its end, the stream gives exactly the totals and the stateful
    outputs an uninterrupted run gives (computed here in plain Python)."""
    input_dir = str(tmp_path / "in")
    expected, counts = recovery.write_input_and_counts(input_dir)
    checkpoint = f"s3a://{BUCKET}/stream/ck"
    output = f"s3a://{BUCKET}/stream/out"
    log = str(tmp_path / "log.jsonl")
    conf = [f"spark.jars={','.join(str(jar) for jar in hadoop_aws_jars())}"]
    conf += [f"{key}={value}" for key, value in s3.spark_conf(BUCKET).items()]
    flags = [flag for item in conf for flag in ("--spark_conf", item)]
    assert not recovery.run_job(input_dir, output, checkpoint, log, 3, *flags)
    assert recovery.run_job(input_dir, output, checkpoint, log, None, *flags)
    stored = objects(s3, "stream/ck/")
    assert "stream/ck/sparkbeam-checkpoint.json" in stored
    assert any(key.startswith("stream/ck/lease/") for key in stored)
    assert any(key.startswith("stream/ck/checkpoints/") for key in stored)
    assert recovery.totals(_committed_on_s3(s3, "stream/out/", "totals")) == expected
    assert all(times == 1 for times in _committed_on_s3(s3, "stream/out/", "totals").values())
    fired = _committed_on_s3(s3, "stream/out/", "counts")
    assert collections.Counter({(t, int(s)): int(c) for t, s, c in (line.split(",") for line in fired)}) == counts
    assert sum(_committed_on_s3(s3, "stream/out/", "bad").values()) == recovery.dead_letters_written()
    # the kill's temporary step folders were removed at recovery
    assert not [key for key in objects(s3, "stream/out/") if "/.sparkbeam-" in key]
    recovery.check_watermarks(recovery.timeline(log))


@pytest.mark.parametrize(
    ("bucket", "said"),
    [
        (MISSING, f"the bucket '{MISSING}' does not exist at http://127.0.0.1:"),
        pytest.param(WRONG_KEY, "the credentials were refused by http://127.0.0.1:", marks=pytest.mark.full),
        pytest.param(NOWHERE, "cannot be reached", marks=pytest.mark.full),
    ],
)
def test_a_bad_bucket_is_refused_before_the_first_step_naming_the_setting(s3, tmp_path, bucket, said):
    touched = tmp_path / "touched"

    def touch(element):
        touched.write_text("a step ran")
        return element

    # a file sink: refused naming the transform
    with pytest.raises(ValueError, match=r"'WriteScores' \(applied at .*test_object_store.py:\d+\)") as refused, beam.Pipeline() as p:
        p | beam.Create([1, 2]) | beam.Map(touch) | "WriteScores" >> beam.io.WriteToText(f"s3a://{bucket}/out/scores")
    assert said in str(refused.value)
    settings = {MISSING: f"fs.s3a.bucket.{MISSING}.endpoint", WRONG_KEY: f"fs.s3a.bucket.{WRONG_KEY}.secret.key", NOWHERE: f"fs.s3a.bucket.{NOWHERE}.endpoint"}
    assert settings[bucket] in str(refused.value)
    assert s3.secret_key not in str(refused.value) and "not-the-key" not in str(refused.value)
    # a checkpoint directory: refused naming the option
    options = PipelineOptions(streaming=True, checkpoint_dir=f"s3a://{bucket}/ck", available_now=True)
    input_dir = tmp_path / "in"
    input_dir.mkdir()
    (input_dir / "a.txt").write_text("x\n")
    with pytest.raises(ValueError, match=f"--checkpoint_dir: s3a://{bucket}/ck cannot be used: ") as refused, beam.Pipeline(options=options) as p:
        p | beam.io.ReadFromTextStream(str(input_dir)) | beam.Map(touch)
    assert said in str(refused.value)
    assert not touched.exists()
