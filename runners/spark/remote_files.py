"""File sinks and checkpoints on file systems only the driver's JVM reaches (``s3a://``,
``hdfs://``... through Hadoop, ``hadoop_filesystem.py``): shards carried to the driver, and
paths checked before the first step.

**Shards through the driver.** A sink's shards are made by the executors' Python, with the
sink's own writer (Beam's bytes: text, CSV, JSON, Parquet, compressed or not), which cannot
open a Hadoop URL. So each task writes its shard to a private temporary file of its own
machine and sends it back in chunks of ``CHUNK`` bytes; the driver takes the tasks' output
one partition at a time (``toLocalIterator``: one partition's chunks in memory at once),
copies each shard to a local private file and hands it to Hadoop's ``copyFromLocalFile``,
which uploads it (a multipart upload on S3) without the bytes crossing Py4J. The files
then are committed as a local sink's are (``sinks.py``, ``textio.py``). The cost: a sink's
bytes cross the driver's network link once, and its uploads are one at a time.

**Checked before the first step.** ``check_reachable`` asks the file system whether a
path exists, which on S3 lists the bucket: an unreachable endpoint, a bucket that does not
exist, credentials that are refused or a connector that is missing stop the run there, with
a message naming the option or transform, the path and the setting to change (a setting's
name, and the endpoint's value; never a key's value).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from sparkbeam.io import commits

__all__ = ["CHUNK", "UnreachablePathError", "carry_shards", "check_reachable", "is_remote", "shard_chunks"]

#: bytes of a shard per record sent back to the driver
CHUNK = 4 << 20
_HEADER = -1


class UnreachablePathError(ValueError):
    """A path on a cluster file system that cannot be used (the message says why and how)."""


def is_remote(path: str) -> bool:
    """Whether ``path`` is served by a file system other than Python's own (the driver's
    Hadoop: the executors' Python cannot reach it)."""
    return commits.local_path(path) is None


# -- executors -------------------------------------------------------------------------
def shard_chunks(index: int, write: Any) -> Iterator[tuple[int, int, Any]]:
    """Runs ``write(path)`` (which writes one shard to the local ``path`` and returns its
    record count, or None for no shard) and yields ``(index, -1, records)`` then the file's
    bytes as ``(index, sequence, chunk)``: what ``carry_shards`` reassembles on the driver."""
    handle, path = tempfile.mkstemp(prefix="sparkbeam-shard-")  # 0600, this task's alone
    os.close(handle)
    try:
        records = write(path)
        if records is None:
            return
        yield index, _HEADER, records
        with open(path, "rb") as shard:
            sequence = 0
            while True:
                chunk = shard.read(CHUNK)
                if not chunk:
                    break
                yield index, sequence, chunk
                sequence += 1
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


# -- the driver ------------------------------------------------------------------------
def carry_shards(chunks: Any, remote_dir: str) -> list[tuple[int, str, int]]:
    """Uploads the shards ``shard_chunks`` sent (the RDD ``chunks``) into ``remote_dir``, one
    file each (``.part-00003``); returns ``(index, path, records)`` per shard, sorted."""
    from sparkbeam.io.filesystems import FileSystems

    hadoop = FileSystems.get_filesystem(remote_dir)
    staging = tempfile.mkdtemp(prefix="sparkbeam-upload-")  # 0700
    written: list[tuple[int, str, int]] = []
    current: tuple[int, str, int] | None = None
    local: Any = None

    def upload() -> None:
        nonlocal local
        if current is None:
            return
        local.close()
        local = None
        hadoop.upload(os.path.join(staging, "shard"), current[1])

    try:
        for index, sequence, payload in chunks.toLocalIterator(prefetchPartitions=False):
            if sequence == _HEADER:
                upload()
                current = (index, commits.join(remote_dir, f".part-{index:05d}"), payload)
                written.append(current)
                local = open(os.path.join(staging, "shard"), "wb")  # noqa: SIM115 (closed by upload)
            elif local is not None:
                local.write(payload)
        upload()
    finally:
        if local is not None:
            local.close()
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(written)


# -- checks ----------------------------------------------------------------------------
def _setting(conf: Any, scheme: str, bucket: str, name: str) -> tuple[str, str | None]:
    """The Hadoop key that sets ``name`` for this bucket (its per-bucket key if set), and
    its value."""
    if scheme in ("s3a", "gs") and bucket:
        per_bucket = f"fs.{scheme}.bucket.{bucket}.{name}"
        if conf.get(per_bucket) is not None:
            return per_bucket, conf.get(per_bucket)
    key = f"fs.{scheme}.{name}"
    return key, conf.get(key)


def _reason(error: Exception, path: str, conf: Any) -> str:
    text = str(error)
    scheme, _, rest = path.partition("://")
    bucket = rest.split("/", 1)[0]
    java = next((line.strip() for line in text.splitlines() if "Exception" in line), text.strip().splitlines()[0] if text.strip() else repr(error))
    java = java.removeprefix(": ")[:400]
    if "ClassNotFoundException" in text or "No FileSystem for scheme" in text:
        version = _hadoop_version()
        return (
            f"Spark has no {scheme}:// connector ({java}); add it when the session starts, for s3a:// "
            f"--spark_conf spark.jars.packages=org.apache.hadoop:hadoop-aws:{version} (Spark's Hadoop is {version})"
        )
    if scheme == "s3a":
        endpoint_key, endpoint = _setting(conf, scheme, bucket, "endpoint")
        if "NoSuchBucket" in text or "UnknownStoreException" in text:
            return (
                f"the bucket {bucket!r} does not exist at {endpoint or 'the default AWS endpoint'} "
                f"(spark.hadoop.{endpoint_key}); create it or correct the path"
            )
        if "AccessDenied" in text or "403" in text or "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text:
            access_key, _ = _setting(conf, scheme, bucket, "access.key")
            secret_key, _ = _setting(conf, scheme, bucket, "secret.key")
            provider, _ = _setting(conf, scheme, bucket, "aws.credentials.provider")
            return (
                f"the credentials were refused by {endpoint or 'the default AWS endpoint'} ({java}); check "
                f"spark.hadoop.{access_key} and spark.hadoop.{secret_key} (or spark.hadoop.{provider}) and the "
                f"bucket's access policy"
            )
        if any(word in text for word in ("ConnectException", "UnknownHostException", "SocketTimeout", "ConnectTimeout", "Unable to execute HTTP request")):
            return (
                f"its endpoint {endpoint or '(the default AWS endpoint)'} cannot be reached ({java}); check "
                f"spark.hadoop.{endpoint_key} (and fs.s3a.connection.ssl.enabled, fs.s3a.path.style.access)"
            )
    if scheme == "hdfs" and any(word in text for word in ("ConnectException", "UnknownHostException")):
        return f"its namenode {bucket} cannot be reached ({java}); check the host and port in the URL (or fs.defaultFS)"
    return java


def _hadoop_version() -> str:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None or sc._jvm is None:
        return "<Spark's Hadoop version>"
    return str(sc._jvm.org.apache.hadoop.util.VersionInfo.getVersion())


def check_reachable(path: str, who: str) -> None:
    """Refuse ``path`` (of ``who``: an option or a transform) if its file system cannot be
    used: asked whether the path exists, which reaches the store (and on S3 lists the bucket)."""
    from pyspark import SparkContext

    from sparkbeam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem(path).exists(path)
    except Exception as error:
        sc = SparkContext._active_spark_context
        conf = sc._jsc.hadoopConfiguration() if sc is not None else {}
        msg = f"{who}: {path} cannot be used: {_reason(error, path, conf)}"
        raise UnreachablePathError(msg) from None
