"""tools/kafka_broker.py without the network or a JVM: jar names, what goes on spark.jars, the broker's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import kafka_broker


def test_jar_names_give_their_artifact_and_version():
    jars = [Path("/c/kafka-clients-3.9.2.jar"), Path("/c/spark-sql-kafka-0-10_2.13-4.2.0.jar"), Path("/c/zstd-jni-1.5.6-4.jar")]
    assert [kafka_broker._artifact(jar) for jar in jars] == ["kafka-clients", "spark-sql-kafka-0-10_2.13", "zstd-jni"]
    assert kafka_broker._version(jars, "kafka-clients") == "3.9.2"
    assert kafka_broker._version(jars, "zstd-jni") == "1.5.6-4"
    assert kafka_broker._version(jars, "scala-library") is None


def test_the_connector_jars_say_whether_they_are_pysparks_version():
    jars = kafka_broker.ConnectorJars([Path("/c/a.jar"), Path("/c/b.jar")], "4.2.0", "3.9.2", "4.3.0")
    assert not jars.matches_spark
    assert jars.spark_conf() == "/c/a.jar,/c/b.jar"


def test_the_broker_listens_on_loopback_only_keeps_records_and_has_a_sasl_listener(tmp_path):
    broker = kafka_broker.KafkaBroker(tmp_path, "3.9.2")
    broker.port, broker.sasl_port, broker.controller_port = 9101, 9102, 9103
    settings = dict(line.split("=", 1) for line in broker._properties().splitlines() if line)
    assert settings["listeners"] == "PLAINTEXT://127.0.0.1:9101,SASL_PLAINTEXT://127.0.0.1:9102,CONTROLLER://127.0.0.1:9103"
    assert settings["process.roles"] == "broker,controller" and settings["controller.quorum.voters"] == "1@127.0.0.1:9103"
    assert settings["log.retention.ms"] == "-1" and settings["auto.create.topics.enable"] == "false"
    assert settings["log.dirs"] == str(tmp_path / "data")
    assert f'user_{kafka_broker.SASL_USER}="{kafka_broker.SASL_PASSWORD}"' in settings["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert broker.bootstrap == "127.0.0.1:9101" and broker.sasl_bootstrap == "127.0.0.1:9102"


def test_a_cache_that_cannot_be_used_is_a_fetch_error_naming_it(tmp_path, monkeypatch):
    # the conftest starts the session without the connector on a MavenFetchError, not on an OSError
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("SPARKBEAM_MAVEN_CACHE", str(blocked / "cache"))
    with pytest.raises(kafka_broker.MavenFetchError, match=r"cannot use the Maven jar cache .*file/cache.*SPARKBEAM_MAVEN_CACHE"):
        kafka_broker.connector_jars()
