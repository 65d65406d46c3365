"""Cluster file systems through Hadoop's FileSystem API in the driver's JVM, tested with
``file://`` URLs served by Hadoop's own local file system (``--file_urls_through_hadoop``).

Proof that Hadoop's API is taken: ``HadoopFileSystem.hadoop_class`` names the Java class
serving the URL, and Hadoop's checksumming local file system leaves a ``.NAME.crc`` beside
every file it writes, which Python's ``os`` never does.
"""

from __future__ import annotations

import json
import os

import pytest

from sparkbeam.io import commits
from sparkbeam.io.filesystems import FileSystems
from sparkbeam.io.localfilesystem import LocalFileSystem

pytestmark = pytest.mark.spark


@pytest.fixture
def through_hadoop(spark):
    from sparkbeam.runners.spark import hadoop_filesystem

    hadoop_filesystem.serve_file_urls(True)
    yield hadoop_filesystem
    hadoop_filesystem.serve_file_urls(False)


def test_cluster_schemes_are_hadoops_and_file_urls_only_when_asked(spark):
    from sparkbeam.runners.spark import hadoop_filesystem

    for scheme in ("hdfs", "s3a", "gs", "abfs", "viewfs"):
        assert isinstance(FileSystems.get_filesystem(f"{scheme}://host/x"), hadoop_filesystem.HadoopFileSystem)
    assert isinstance(FileSystems.get_filesystem("file:///tmp/x"), LocalFileSystem)
    hadoop_filesystem.serve_file_urls(True)
    try:
        served = FileSystems.get_filesystem("file:///tmp/x")
        assert isinstance(served, hadoop_filesystem.HadoopFileSystem)
        # Hadoop's LocalFileSystem (or Hive's subclass of it, which Spark's jars register)
        java_class = served.hadoop_class("file:///tmp/x")
        assert java_class.startswith("org.apache.hadoop.") and java_class.endswith("LocalFileSystem"), java_class
        assert isinstance(FileSystems.get_filesystem("/tmp/x"), LocalFileSystem)  # plain paths stay with os
    finally:
        hadoop_filesystem.serve_file_urls(False)


def test_commits_through_hadoop(tmp_path, through_hadoop):
    root = f"file://{tmp_path}/store"
    commits.makedirs(root)
    commits.write_bytes(commits.join(root, "a.json"), b'{"n": 1}')
    commits.write_bytes(commits.join(root, "a.json"), b'{"n": 2}')  # replaces
    assert json.loads(commits.read_bytes(commits.join(root, "a.json"))) == {"n": 2}
    assert os.path.exists(tmp_path / "store" / ".a.json.crc")  # written by Hadoop's LocalFileSystem
    assert sorted(n for n in commits.list_names(root) if not n.endswith(".crc")) == ["a.json"]
    with commits.staging_directory(commits.join(root, "step-1")) as temp:
        commits.write_bytes(commits.join(temp, "part"), b"x\n")
        commits.commit_directory(temp, commits.join(root, "step-1"))
    with commits.staging_directory(commits.join(root, "step-1")) as temp:
        commits.write_bytes(commits.join(temp, "part2"), b"y\n")
        commits.commit_directory(temp, commits.join(root, "step-1"))
    assert [n for n in commits.list_names(commits.join(root, "step-1")) if not n.endswith(".crc")] == ["part2"]
    assert not [n for n in os.listdir(tmp_path / "store") if commits.is_temporary(n)]
    with FileSystems.open(commits.join(root, "step-1", "part2")) as handle:
        assert handle.read() == b"y\n"
    found = FileSystems.match([f"file://{tmp_path}/store/**"])[0].metadata_list
    assert sorted(os.path.basename(m.path) for m in found) == ["a.json", "part2"]
    commits.remove(commits.join(root, "step-1"))
    assert not commits.exists(commits.join(root, "step-1"))
    with pytest.raises(FileNotFoundError):
        commits.remove(commits.join(root, "step-1"))
    commits.remove(commits.join(root, "step-1"), missing_ok=True)


def test_without_a_session_the_error_says_why(monkeypatch, spark):
    from pyspark import SparkContext

    from sparkbeam.runners.spark.hadoop_filesystem import HadoopFileSystem

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    with pytest.raises(RuntimeError, match="no Spark session is up"):
        HadoopFileSystem().exists("hdfs://nn/x")
