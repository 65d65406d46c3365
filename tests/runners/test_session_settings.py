"""``--spark_conf`` with a SparkSession already running: what Spark can change at runtime is
set for the run and restored after it; what it cannot is refused, naming each setting,
before anything changes. And whether sparkbeam is shipped to the executors, and why."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.spark import session as session_module
from sparkbeam.runners.spark.session import apply_runtime_settings, parse_spark_conf, ship_for_run

ZONE = "spark.sql.session.timeZone"
PARTITIONS = "spark.sql.shuffle.partitions"


@pytest.mark.spark
def test_runtime_settings_are_set_and_restored(spark):
    zone_before = spark.conf.get(ZONE)
    partitions_before = spark.conf.get(PARTITIONS)
    applied = apply_runtime_settings(
        spark, {ZONE: "Asia/Kolkata", PARTITIONS: "7", "sparkbeam.test.own_key": "x"}
    )
    assert (spark.conf.get(ZONE), spark.conf.get(PARTITIONS), spark.conf.get("sparkbeam.test.own_key")) == (
        "Asia/Kolkata",
        "7",
        "x",
    )
    applied.restore()
    assert (spark.conf.get(ZONE), spark.conf.get(PARTITIONS)) == (zone_before, partitions_before)
    assert spark.conf.get("sparkbeam.test.own_key", None) is None


@pytest.mark.spark
def test_settings_fixed_at_start_are_refused_by_name_and_nothing_changes(spark):
    partitions_before = spark.conf.get(PARTITIONS)
    with pytest.raises(RuntimeError) as failure:
        apply_runtime_settings(
            spark,
            {
                PARTITIONS: "9",
                "spark.executor.memory": "7g",  # a core setting
                "spark.sql.warehouse.dir": "/elsewhere",  # a static SQL setting
                "spark.executorEnv.DB_PASSWORD": "hunter2",  # read when the context starts
            },
        )
    message = str(failure.value)
    assert "spark.executor.memory, spark.sql.warehouse.dir, spark.executorEnv.DB_PASSWORD (values not shown)" in message
    # Values may be secrets: neither the ones asked for nor the session's are printed.
    for value in ("7g", "/elsewhere", "hunter2", spark.conf.get("spark.sql.warehouse.dir"), spark.conf.get("spark.executor.memory", "1g")):
        assert value not in message
    assert PARTITIONS not in message
    assert "Stop the session" in message and "SparkSession.builder.config" in message
    assert spark.conf.get(PARTITIONS) == partitions_before


@pytest.mark.spark
def test_a_fixed_setting_the_session_already_has_is_accepted(spark):
    master = spark.sparkContext.master
    applied = apply_runtime_settings(spark, {"spark.master": master, "spark.app.name": spark.sparkContext.appName})
    assert applied.previous == ()


@pytest.mark.spark
def test_a_pipeline_with_a_setting_spark_cannot_change_fails_before_running(spark):
    partitions_before = spark.conf.get(PARTITIONS)
    p = beam.Pipeline(options=PipelineOptions(spark_conf=[f"{PARTITIONS}=5", "spark.executor.memory=7g"]))
    _ = p | beam.Create([1]) | beam.Map(lambda x: x)
    with pytest.raises(RuntimeError, match=r"on a running session, which has other values for them: spark.executor.memory \(values not shown\)"):
        p.run()
    assert spark.conf.get(PARTITIONS) == partitions_before


@pytest.mark.spark
def test_a_pipeline_runs_with_its_runtime_settings_and_leaves_the_session_as_it_was(spark, monkeypatch):
    partitions_before = spark.conf.get(PARTITIONS)
    during_run = []
    restore = session_module.RuntimeSettings.restore

    def note_then_restore(self):
        during_run.append(spark.conf.get(PARTITIONS))  # what the run ran with, as it ends
        restore(self)

    monkeypatch.setattr(session_module.RuntimeSettings, "restore", note_then_restore)
    p = beam.Pipeline(options=PipelineOptions(spark_conf=[f"{PARTITIONS}=3"]))
    out = beam.capture(p | beam.Create([1, 2]) | beam.Map(lambda x: x))
    result = p.run()
    assert sorted(e.value for e in result.emissions(out)) == [1, 2]
    assert during_run == ["3"]
    assert spark.conf.get(PARTITIONS) == partitions_before


def test_spark_conf_items_must_be_key_value():
    assert parse_spark_conf(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError, match="--spark_conf takes key=value, got 'oops'"):
        parse_spark_conf(["oops"])
    # What is not a setting's name alone may hold a secret: not shown.
    for item in ("spark.ssl.keyPassword hunter2", "=hunter2"):
        with pytest.raises(ValueError, match=r"--spark_conf takes key=value, got item 2 \(not shown: it may hold a secret\)") as failure:
            parse_spark_conf(["a=1", item])
        assert "hunter2" not in str(failure.value)


class FakeContext:
    def __init__(self, master, python):
        self.master = master
        self.pythonExec = python
        self.added = []

    def addPyFile(self, path):
        self.added.append(path)


def test_local_executors_running_this_interpreter_get_nothing_shipped_and_the_log_says_why(caplog):
    context = FakeContext("local[2]", sys.executable)
    with caplog.at_level(logging.INFO, logger="sparkbeam.runners.spark.session"):
        assert ship_for_run(context) is None
    assert context.added == []
    assert "not shipping sparkbeam: the executors of local[2] run this interpreter" in caplog.text


def test_other_executors_get_the_package_once_per_context():
    for context in (FakeContext("spark://host:7077", sys.executable), FakeContext("local[2]", "/opt/other/python3")):
        first = ship_for_run(context)
        assert ship_for_run(context) == first
        assert len(context.added) == 1 and context.added[0].endswith("sparkbeam.zip")


def test_the_package_shipped_to_executors_is_whole_private_and_gone_when_the_process_ends(tmp_path):
    """``ship_package`` (executors that run another interpreter, or on other machines): one zip
    of the whole package tree in a folder of the process's own, which no run leaves behind."""
    script = tmp_path / "ship.py"
    script.write_text(
        "import json, os, stat, zipfile\n"
        "from sparkbeam.runners.spark.session import ship_package\n"
        "class Context:\n"
        "    added = []\n"
        "    def addPyFile(self, path):\n"
        "        self.added.append(path)\n"
        "context = Context()\n"
        "path = ship_package(context)\n"
        "assert ship_package(context) == path and context.added == [path]  # once per context\n"
        "names = zipfile.ZipFile(path).namelist()\n"
        "print(json.dumps({'path': path, 'mode': stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 'names': names}))\n"
    )
    finished = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert finished.returncode == 0, finished.stderr[-3000:]
    shipped = json.loads(finished.stdout.splitlines()[-1])
    assert shipped["mode"] == 0o700
    names = set(shipped["names"])
    for module in ("sparkbeam/__init__.py", "sparkbeam/transforms/__init__.py", "sparkbeam/runners/spark/session.py", "sparkbeam/runners/core/__init__.py"):
        assert module in names, module
    assert not any("__pycache__" in name for name in names)
    assert not os.path.exists(os.path.dirname(shipped["path"]))
