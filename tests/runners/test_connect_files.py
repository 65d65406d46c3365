"""Files under Spark Connect (#25, step 2): WriteToText staged per task attempt and committed
by one task on the server (runners/spark/connect/writes.py), the README's main example run
against a Connect server exactly as the README writes it. The oracle pairs of ReadFromText
and WriteToText run on both session kinds in test_batch_oracle.py and tests/io (text, CSV,
JSON, Parquet), the apache_beam front end's ReadFromText in test_connect.py."""

from __future__ import annotations

import collections
import csv
import json
import os
import shlex
import subprocess
import sys

import pytest

import sparkbeam as beam
from sparkbeam.examples import hourly_team_score
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS
from sparkbeam.runners.core.lowering.ops import WriteTextOp
from sparkbeam.runners.spark.connect import tasks, writes
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
from tests.io.conftest import listing
from tests.runners import file_sinks

pytestmark = pytest.mark.spark

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
#: the README's command that runs the main example on a Connect server (its URL replaced)
EXAMPLE_ON_CONNECT = "python -m sparkbeam.examples.hourly_team_score --spark_remote=sc://localhost:15002"


def _write(options, prefix, values, **sink_options):
    p = beam.Pipeline(options=PipelineOptions(**options))
    _ = p | beam.Create(values) | "Out" >> beam.io.WriteToText(prefix, **sink_options)
    p.run()


def test_empty_input_writes_one_empty_shard_or_none_with_skip_if_empty(connect_server, tmp_path):
    options = {"spark_remote": connect_server.url}
    _write(options, str(tmp_path / "a" / "out"), [], header="h")
    assert listing(tmp_path / "a") == ["out-00000-of-00001"]
    assert (tmp_path / "a" / "out-00000-of-00001").read_text() == "h\n"
    _write(options, str(tmp_path / "b" / "out"), [], skip_if_empty=True)
    assert not (tmp_path / "b").exists() or listing(tmp_path / "b") == []


@pytest.fixture
def file_sinks_by_value():
    """The server's Python workers cannot import the tests' modules: file_sinks' functions
    travel by value."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(file_sinks)
    yield
    cloudpickle.unregister_pickle_by_value(file_sinks)


def _files(folder):
    return {name: (folder / name).read_bytes() for name in listing(folder)}


@pytest.mark.usefixtures("file_sinks_by_value")
def test_every_batch_file_sink_writes_on_connect_what_it_writes_on_the_classic_session(spark, connect_server, tmp_path):
    """Text, CSV, JSON, Parquet, a gzip file and WriteToFiles: composites of ParDos and
    groupings whose commit is a task (WriteToText's is the backend's own), so they need
    nothing else from the backend. The same records under the same names, where the shards
    are fixed (JSON and Parquet leave their count to the runner: one per bundle)."""
    for kind, options in (("classic", {}), ("connect", {"spark_remote": connect_server.url})):
        p = beam.Pipeline(options=PipelineOptions(**options))
        file_sinks.write_everything(p, str(tmp_path / kind))
        file_sinks.write_files(p, str(tmp_path / kind / "files"))
        p.run()
    on_connect, on_classic = _files(tmp_path / "connect"), _files(tmp_path / "classic")
    fixed = ["csv-00000-of-00001", "gz.gz", "text-00000-of-00002", "text-00001-of-00002"]
    for names in (on_connect, on_classic):
        assert [name for name in names if not name.startswith(("json", "parquet", "files"))] == fixed
        for family in ("json", "parquet"):
            shards = sorted(name for name in names if name.startswith(family))
            assert shards == [f"{family}-{n:05d}-of-{len(shards):05d}" for n in range(len(shards))]
    assert _records(on_connect) == _records(on_classic)
    assert all(len(records) == 40 for family, records in _records(on_connect).items() if family != "gz")
    assert _records(on_connect)["gz"] == [f"line {n}" for n in range(10)]  # one file named by '': every line
    assert file_sinks.by_window_and_destination(_files(tmp_path / "connect" / "files")) == file_sinks.by_window_and_destination(
        _files(tmp_path / "classic" / "files")
    )


def _records(files):
    """Each sink's records, sorted (how they fall into shards follows the partitions)."""
    import gzip
    import io

    import pyarrow.parquet as pq

    def lines(family):
        return sorted(line for name, data in files.items() if name.startswith(family) for line in data.decode().splitlines())

    parquet = [tuple(row.values()) for name, data in files.items() if name.startswith("parquet") for row in pq.read_table(io.BytesIO(data)).to_pylist()]
    return {
        "text": lines("text"),
        "csv": [line for line in lines("csv") if line != "name,score,ok"],
        "json": lines("json"),
        "parquet": sorted(parquet),
        "gz": sorted(gzip.decompress(files["gz.gz"]).decode().splitlines()),
    }


def test_a_failed_write_commits_nothing_and_leaves_nothing_staged(connect_server, tmp_path):
    class Refuses(beam.coders.coders.Coder):
        def encode(self, value):
            if value == "bad":
                raise ValueError("cannot encode 'bad'")
            return value.encode()

        def decode(self, data):
            return data.decode()

    p = beam.Pipeline(options=PipelineOptions(spark_remote=connect_server.url))
    _ = p | beam.Create(["good", "bad", "fine"]) | "Out" >> beam.io.WriteToText(str(tmp_path / "out"), coder=Refuses())
    with pytest.raises(ValueError, match="cannot encode 'bad'") as raised:
        p.run()
    assert "'Out'" in " ".join(getattr(raised.value, "__notes__", []))
    assert listing(tmp_path) == []


def _rows(batch):
    return list(tasks.rows_of([batch]))


def _elements_batch(pcoll, values):
    output = tasks.Output()
    for value in values:
        output.add(pcoll, WindowedValue(value, MIN_TIMESTAMP.micros, GLOBAL_WINDOWS, PANE_INFO_UNKNOWN))
    return output.close()


def test_only_the_attempts_the_commit_receives_are_committed_and_the_staging_folder_goes(tmp_path):
    """Two attempts of partition 0 stage a file each; the commit task gets the row of the
    attempt that succeeded (as Spark's shuffle gives it only those) and commits that one."""
    op = WriteTextOp(label="Out", location="here", inputs=(0,), outputs=(), sink=beam.io.WriteToText(str(tmp_path / "out")))
    staging = str(tmp_path / ".sparkbeam-temp-out-1")
    key = b"k" * 32
    first = _rows(next(writes.write_shard_task(op, staging, key, [_elements_batch(0, ["lost"])])))
    second = _rows(next(writes.write_shard_task(op, staging, key, [_elements_batch(0, ["kept", "too"])])))
    assert len(os.listdir(staging)) == 2
    marker = tasks.batch_of([(writes.MARKER, 0, b"")])
    (committed,) = writes.commit_task(op, str(tmp_path / "out"), staging, key, [tasks.batch_of(second), marker])
    finals = [json.loads(chunk) for kind, _, chunk in _rows(committed) if kind == writes.COMMITTED]
    assert finals == [str(tmp_path / "out-00000-of-00001")]
    assert (tmp_path / "out-00000-of-00001").read_text() == "kept\ntoo\n"
    assert listing(tmp_path) == ["out-00000-of-00001"]  # the lost attempt's file went with the staging folder
    assert first != second
    # A retried commit (the first renamed, then failed) finds the shard committed already.
    os.makedirs(staging)
    (again,) = writes.commit_task(op, str(tmp_path / "out"), staging, key, [tasks.batch_of(second), marker])
    assert [json.loads(chunk) for kind, _, chunk in _rows(again) if kind == writes.COMMITTED] == finals


def test_a_prefix_only_the_jvm_serves_is_refused_before_the_run(tmp_path):
    from sparkbeam.runners.core.lowering.errors import UnsupportedError

    p = beam.Pipeline(options=PipelineOptions(spark_remote="sc://127.0.0.1:1"))
    _ = p | beam.Create(["a"]) | "Out" >> beam.io.WriteToText("hdfs://namenode/out")
    with pytest.raises(UnsupportedError, match=r"'Out.*WriteToText to 'hdfs://namenode/out' is not yet under Spark Connect"):
        p.run()


def test_a_stream_file_sink_on_a_file_system_only_the_jvm_serves_is_refused_before_the_run():
    from sparkbeam.runners.core.lowering.errors import UnsupportedError
    from sparkbeam.testing.test_stream import TestStream

    p = beam.Pipeline(options=PipelineOptions(spark_remote="sc://127.0.0.1:1", streaming=True))
    _ = p | TestStream().add_elements([{"a": 1}]) | "Rows" >> beam.io.WriteToJson("hdfs://namenode/rows")
    with pytest.raises(UnsupportedError, match=r"'Rows/.*a file sink to 'hdfs://namenode/rows' is not yet under Spark Connect"):
        p.run()


def test_the_readme_runs_the_main_example_on_a_connect_server(connect_server, tmp_path):
    with open(README) as handle:
        assert EXAMPLE_ON_CONNECT in handle.read()
    words = shlex.split(EXAMPLE_ON_CONNECT.replace("sc://localhost:15002", connect_server.url))
    completed = subprocess.run(
        [sys.executable if word == "python" else word for word in words],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = completed.stdout.splitlines()
    expected: collections.Counter = collections.Counter()
    with open(hourly_team_score.SAMPLE_DATA) as handle:
        for _user, team, score, millis, _ in csv.reader(handle):
            expected[(int(millis) // 3_600_000, team)] += int(score)
    assert len(rows) == len(expected) == 48  # 8 teams x 6 hours
    assert sum(int(row.split()[-1]) for row in rows) == sum(expected.values())
