"""A local S3-compatible server for the tests and benchmarks, and what Spark needs to reach it.

The server is moto's (moto's S3 with flask and flask-cors, in the test extra) in a process of
its own, on loopback and a port the system chooses, with authentication on: one user with
an access key allowed ``s3:*``, so a wrong key is refused as S3 refuses it. Spark reaches
it through Hadoop's ``s3a`` connector, ``hadoop-aws`` of the installed PySpark's Hadoop
version and its AWS SDK bundle, fetched from Maven Central by ``tools/maven_jars.py`` into
the per-user cache (about 660 MB the first time, then reused)::

    from tools.object_store import S3Server, hadoop_aws_jars
    with S3Server() as server:
        server.create_bucket("sparkbeam-tests")
        conf = server.spark_conf("sparkbeam-tests")    # spark.hadoop.fs.s3a.bucket.<b>.* settings
        # SparkSession.builder.config("spark.jars", ",".join(map(str, hadoop_aws_jars())))...

Settings are per bucket (``fs.s3a.bucket.<bucket>.endpoint``...), so buckets of one session
can point at other endpoints or carry other credentials (the bad-input tests), and retries
are few so that an unreachable endpoint fails in seconds rather than minutes.

``python -m tools.object_store`` serves until its standard input closes, printing one JSON
line (port and key) first: how ``S3Server`` runs it, so the server dies with its parent.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["S3Server", "hadoop_aws_coordinates", "hadoop_aws_jars", "pyspark_hadoop_version"]

REGION = "us-east-1"
# Requests moto serves before it starts checking keys: the three that create the user.
_SETUP_REQUESTS = 3


def pyspark_hadoop_version() -> str:
    """The Hadoop version of the installed PySpark's jars (``hadoop-client-api-X.jar``)."""
    import pyspark

    found = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    versions = [m.group(1) for m in (re.search(r"hadoop-client-api-(.+)\.jar$", f) for f in found) if m]
    if len(versions) != 1:
        msg = f"cannot tell the Hadoop version of PySpark's jars (hadoop-client-api jars found: {found})"
        raise RuntimeError(msg)
    return versions[0]


def hadoop_aws_coordinates() -> str:
    """``org.apache.hadoop:hadoop-aws`` of PySpark's Hadoop version: another version's
    connector does not load against PySpark's Hadoop classes."""
    return f"org.apache.hadoop:hadoop-aws:{pyspark_hadoop_version()}"


def hadoop_aws_jars() -> list[Path]:
    """hadoop-aws and what it needs at run time (the AWS SDK bundle), from the cache or Maven."""
    from tools.maven_jars import fetch

    return fetch([hadoop_aws_coordinates()])


class S3Server:
    """moto's S3 in a child process on 127.0.0.1 (see the module docs)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self.access_key = ""
        self.secret_key = ""

    def start(self) -> S3Server:
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_REQUESTS)}
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tools.object_store"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        line = self.process.stdout.readline() if self.process.stdout is not None else ""
        if not line:
            self.stop()
            msg = "the local S3 server (moto) did not start: are moto[s3], flask and flask-cors installed? pip install -e '.[test]'"
            raise RuntimeError(msg)
        started = json.loads(line)
        self.endpoint = f"http://127.0.0.1:{started['port']}"
        self.access_key, self.secret_key = started["access_key"], started["secret_key"]
        return self

    def stop(self) -> None:
        if self.process is not None:
            if self.process.stdin is not None:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self) -> Any:
        """A boto3 S3 client with the server's key (to set up and inspect buckets)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def hadoop_settings(self, bucket: str, **overrides: str) -> dict[str, str]:
        """The s3a settings of ``bucket`` on this server (``fs.s3a.bucket.<bucket>.*``);
        ``overrides`` replace some by their short name (``endpoint``, ``secret.key``...)."""
        settings = {
            "endpoint": self.endpoint,
            "endpoint.region": REGION,
            "path.style.access": "true",
            "connection.ssl.enabled": "false",
            "access.key": self.access_key,
            "secret.key": self.secret_key,
            # a few quick attempts: an unreachable endpoint is refused in seconds
            "attempts.maximum": "1",
            "retry.limit": "1",
            "retry.interval": "100ms",
            "connection.establish.timeout": "2s",
            "connection.timeout": "5s",
            **overrides,
        }
        return {f"fs.s3a.bucket.{bucket}.{name}": value for name, value in settings.items()}

    def spark_conf(self, bucket: str, **overrides: str) -> dict[str, str]:
        """``hadoop_settings`` as Spark settings (``spark.hadoop.`` before each)."""
        return {f"spark.hadoop.{key}": value for key, value in self.hadoop_settings(bucket, **overrides).items()}


def _serve() -> None:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    iam = boto3.client(
        "iam", endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION,
        aws_access_key_id="setup", aws_secret_access_key="setup",
    )
    iam.create_user(UserName="sparkbeam")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName="sparkbeam", PolicyName="s3", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="sparkbeam")["AccessKey"]
    print(json.dumps({"port": port, "access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"]}), flush=True)
    sys.stdin.read()  # until the parent closes it (or dies)
    server.stop()


if __name__ == "__main__":
    _serve()
