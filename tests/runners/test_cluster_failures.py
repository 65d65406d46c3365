"""A run stopped by its cluster is told in a few lines: the cause and how to resume
(``runners/spark/cluster_failures.py``, #27 item 4). Spark's error texts here are cut from
the ones the executor-loss runs and a stopped master gave."""

from __future__ import annotations

import pytest

from sparkbeam.runners.spark.cluster_failures import (
    ClusterFailureError,
    cluster_failure,
    is_spark_failure,
)

WAL_GONE = (
    "An error occurred while calling o2146.saveAsTextFile.\n: org.apache.spark.SparkException: Job aborted.\n"
    "\tat org.apache.spark.internal.io.SparkHadoopWriter$.write(SparkHadoopWriter.scala:106)\n"
    "Caused by: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 199.0 failed 4 times, "
    "most recent failure: Lost task 0.3 in stage 199.0 (TID 161) (127.0.0.1 executor 0): java.io.FileNotFoundException: "
    "File file:/data/ck/sources/0/wal/0000000000/part-00000 does not exist\n"
)
EXECUTORS_LOST = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 7.0 failed 4 times, most recent "
    "failure: Lost task 1.3 in stage 7.0 (TID 40) (127.0.0.1 executor 3): ExecutorLostFailure (executor 3 exited caused by "
    "one of the running tasks) Reason: Remote RPC client disassociated.\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages"
)
MASTER_GONE = (
    "An error occurred while calling o55.collect.\n: java.lang.IllegalStateException: Cannot call methods on a stopped "
    "SparkContext.\nThis stopped SparkContext was created at: ...\n"
)
STORE_UNREACHABLE = (
    "An error occurred while calling o9.create.\n: java.net.ConnectException: Call From host/127.0.0.1 to namenode:8020 "
    "failed on connection exception: java.net.ConnectException: Connection refused\n\tat org.apache.hadoop.ipc.Client.call"
)

DISK_FULL = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 31.0 failed 1 times, most recent "
    "failure: Lost task 1.0 in stage 31.0 (TID 52) (127.0.0.1 executor driver): com.esotericsoftware.kryo.KryoException: "
    "java.io.IOException: No space left on device\n\tat com.esotericsoftware.kryo.io.Output.flush(Output.java:165)\n"
)


class Py4JJavaError(Exception):
    """Stands in for py4j's (matched by name: the runner imports no Py4J to tell it)."""


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (WAL_GONE, "a file it needs is gone: file:/data/ck/sources/0/wal/0000000000/part-00000, in --checkpoint_dir=/data/ck"),
        (EXECUTORS_LOST, "executors were lost faster than Spark replaced them (a task lost its executor 4 times; are any executors left?)"),
        (MASTER_GONE, "Spark stopped under it"),
        (STORE_UNREACHABLE, "a file system it writes to cannot be reached: java.net.ConnectException: Call From host/127.0.0.1 to namenode:8020"),
        (DISK_FULL, "a local disk of Spark's is full (No space left on device): the executors' local directories (spark.local.dir"),
    ],
    ids=["log-batch-gone", "executors-lost", "master-gone", "store-unreachable", "local-disk-full"],
)
def test_a_cluster_failure_names_its_cause_and_how_to_resume(text, cause):
    told = cluster_failure(Py4JJavaError(text), checkpoint_dir="/data/ck", resume_step=9)
    assert isinstance(told, ClusterFailureError)
    message = str(told)
    assert message.startswith(f"the run stopped: {cause}")
    assert message.endswith("run again with --checkpoint_dir=/data/ck to resume at step 9 from its last checkpoint")
    assert "\tat " not in message and len(message) < 700


def test_without_a_checkpoint_directory_it_says_how_to_get_one():
    message = str(cluster_failure(Py4JJavaError(EXECUTORS_LOST), checkpoint_dir=None, resume_step=None))
    assert message.endswith("run it again (a stream given --checkpoint_dir resumes where it stopped)")


def test_python_errors_are_not_the_clusters():
    assert not is_spark_failure(ValueError(WAL_GONE))
    python_failed = EXECUTORS_LOST.replace("ExecutorLostFailure", "org.apache.spark.api.python.PythonException: ValueError")
    assert cluster_failure(Py4JJavaError(python_failed), checkpoint_dir="/data/ck", resume_step=3) is None
    assert cluster_failure(ValueError(WAL_GONE), checkpoint_dir="/data/ck", resume_step=3) is None
    assert is_spark_failure(Py4JJavaError(WAL_GONE))
