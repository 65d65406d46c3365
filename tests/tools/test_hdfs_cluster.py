"""tools/hdfs_cluster.py without a JVM: which jars it asks for, and what it says without Java.
The cluster itself is started by the ``hdfs`` fixture (tests/runners/test_hdfs.py)."""

from __future__ import annotations

import pytest

from tools import hdfs_cluster
from tools.object_store import pyspark_hadoop_version


def test_the_minicluster_is_of_the_hadoop_version_of_pysparks_client():
    version = pyspark_hadoop_version()
    assert hdfs_cluster.minicluster_coordinates() == f"org.apache.hadoop:hadoop-client-minicluster:{version}"


def test_without_java_the_cluster_refuses_to_start_saying_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(hdfs_cluster.shutil, "which", lambda name: None)
    cluster = hdfs_cluster.HdfsCluster(tmp_path)
    with pytest.raises(RuntimeError, match=r"needs Java .*apt-get install openjdk-17-jre-headless"):
        cluster.start()
    assert cluster.process is None and list(tmp_path.iterdir()) == []


def test_urls_name_the_namenode_on_loopback(tmp_path):
    cluster = hdfs_cluster.HdfsCluster(tmp_path)
    cluster.port = 9000
    assert cluster.url("ck", "/scores/") == "hdfs://127.0.0.1:9000/ck/scores"
    assert cluster.url() == "hdfs://127.0.0.1:9000/"
