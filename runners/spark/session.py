"""The Spark session a run uses: the active one, or an embedded ``local[*]`` the runner starts.

Executors run Python with the driver's interpreter (``PYSPARK_PYTHON``), so sparkbeam and
the user's modules import there as on the driver. For a master that is not local, the
sparkbeam package is zipped and shipped with ``addPyFile``.

With a session already active, ``--spark_conf`` settings that Spark can change at runtime
(SQL settings such as ``spark.sql.session.timeZone``) are set for the run and restored
after it; a setting fixed when the session started (``spark.executor.memory``, static SQL
settings) is refused, naming it, unless the session already has that value.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import sys
import tempfile
import zipfile
from typing import Any

import attrs

from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.spark.spark_log import (
    SparkLog,
    current_log,
    java_options,
    logs_to_file,
    reconfigure_jvm,
)

__all__ = [
    "RuntimeSettings",
    "apply_runtime_settings",
    "executors_share_this_interpreter",
    "get_session",
    "parse_spark_conf",
    "ship_for_run",
    "ship_package",
]

_LOG = logging.getLogger(__name__)

_DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    # Executors must not wait for a slot they will never get on a small machine.
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    # A stream reads each micro-batch's write-ahead log as a new Hadoop RDD; without cloning,
    # Spark caches each one's JobConf (~100 KB) under its RDD id in a soft-valued map that
    # the JVM empties only when its heap runs low, so the live heap grows step by step.
    "spark.hadoop.cloneConf": "true",
}

#: sparkbeam's own setting: the SparkContext's log level
LOG_LEVEL = "sparkbeam.log_level"

#: Settings Spark reads only when the SparkContext starts, even those it does not register
#: (a runtime ``conf.set`` of them is accepted by Spark and has no effect).
_READ_AT_START = (
    "spark.executorEnv.", "spark.driver.", "spark.executor.", "spark.jars", "spark.files",
    "spark.submit.", "spark.yarn.", "spark.kubernetes.", "spark.master", "spark.app.",
)


#: what a Spark setting's name looks like (spark.executor.memory, spark.executorEnv.HOME)
_SETTING_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def _is_local(master: str) -> bool:
    return master.startswith("local")


def parse_spark_conf(conf: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--spark_conf key=value`` items as a dict (the last one wins for a repeated key)."""
    settings: dict[str, str] = {}
    for number, item in enumerate(conf, 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # Values may be secrets (passwords, tokens): a malformed item is quoted only
            # when it can be nothing but a setting's name.
            shown = repr(item) if _SETTING_NAME.fullmatch(item) else f"item {number} (not shown: it may hold a secret)"
            msg = f"--spark_conf takes key=value, got {shown}"
            raise ValueError(msg)
        settings[key.strip()] = value.strip()
    return settings


@attrs.frozen
class RuntimeSettings:
    """The settings a run changed on a session it did not start, with their previous
    values (None: unset), so that ``restore`` leaves the session as the user had it."""

    session: Any
    previous: tuple[tuple[str, str | None], ...] = ()

    def restore(self) -> None:
        for key, value in reversed(self.previous):
            if value is None:
                self.session.conf.unset(key)
            else:
                self.session.conf.set(key, value)


def _current(session: Any, key: str, *, connect: bool) -> str | None:
    value = session.conf.get(key, None)
    if value is None and not connect:  # a Connect session has no SparkContext of its own
        value = session.sparkContext.getConf().get(key, None)
    return value


def apply_runtime_settings(session: Any, requested: dict[str, str], *, connect: bool = False) -> RuntimeSettings:
    """Set ``requested`` on a running session (``connect``: a Spark Connect session, whose
    server started before the run), or change nothing and raise naming every setting Spark
    cannot change while the session runs."""
    previous: list[tuple[str, str | None]] = []
    refused: list[str] = []
    runtime: dict[str, str] = {}
    for key, value in requested.items():
        if key == LOG_LEVEL:
            if connect:
                refused.append(key)  # the server's log, set when it starts
            continue
        current = _current(session, key, connect=connect)
        if current == value:
            continue  # already what the run asks for, fixed or not
        if session.conf.isModifiable(key):
            runtime[key] = value
        elif key.startswith(_READ_AT_START):
            refused.append(key)
        else:
            # Not a SQL setting: Spark refuses static and core settings, and keeps others
            # (spark.hadoop.*, an application's own keys) as session settings.
            try:
                session.conf.set(key, value)
            except Exception:
                refused.append(key)
            else:
                previous.append((key, current))
    if refused:
        RuntimeSettings(session, tuple(previous)).restore()
        # Names only: values, asked for or the session's, may be secrets (passwords, tokens).
        if connect:
            msg = (
                f"--spark_conf: the Spark Connect server fixes these settings when it starts, and they differ from "
                f"what the run asks: {', '.join(refused)} (values not shown). Start the server with them "
                "(start-connect-server.sh --conf key=value), or drop them; settings a session may change "
                "(spark.sql.*, spark.hadoop.*...) are set for the run and put back after it"
            )
            raise UnsupportedError(msg)
        msg = (
            "--spark_conf: a SparkSession is already running in this process, and Spark cannot change "
            f"these settings on a running session, which has other values for them: {', '.join(refused)} "
            "(values not shown). Stop the session (spark.stop()) so that the runner starts one with "
            "them, or pass them when you create the session (SparkSession.builder.config(key, value) "
            "or spark-submit --conf)"
        )
        raise RuntimeError(msg)
    for key, value in runtime.items():
        previous.append((key, session.conf.get(key, None)))
        session.conf.set(key, value)
    if LOG_LEVEL in requested and not connect:
        session.sparkContext.setLogLevel(requested[LOG_LEVEL])
    if previous:
        _LOG.info("set on the running SparkSession for this run: %s", ", ".join(k for k, _ in previous))
    return RuntimeSettings(session, tuple(previous))


def get_session(
    master: str | None = None,
    conf: list[str] | tuple[str, ...] = (),
    app_name: str | None = None,
    log: SparkLog | None = None,
) -> tuple[Any, RuntimeSettings]:
    """The active SparkSession if there is one (and it has a compatible master), with the
    run's settings applied, else a new one whose Spark log goes where ``log`` says; and
    what to restore after the run. Without a ``master``, a script run by ``spark-submit``
    gets the master given to it, any other an embedded ``local[*]``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    requested = parse_spark_conf(conf)
    active = SparkSession.getActiveSession()
    if active is not None:
        active_master = active.sparkContext.master
        if master not in (None, "local[*]", active_master):
            msg = (
                f"a SparkSession with master {active_master!r} is already running in this process; "
                f"stop it before running with --spark_master={master}, or drop that option to use it"
            )
            raise RuntimeError(msg)
        applied = apply_runtime_settings(active, requested)
        ship_for_run(active.sparkContext)
        return active, applied
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # spark-submit started the JVM
    if master is None and not submitted:
        master = "local[*]"
    log = log if log is not None else SparkLog()
    settings = {**_DEFAULT_CONF, **requested}
    level = settings.pop(LOG_LEVEL, "WARN" if log.path is not None else "ERROR")
    settings = _start_jvm(master, app_name or "sparkbeam", settings, log, level)
    builder = SparkSession.builder.appName(app_name or "sparkbeam")
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if log.path is not None and current_log().path is not None and not logs_to_file(session.sparkContext._jvm):
        reconfigure_jvm(session.sparkContext._jvm, log, level)  # Spark reset it as it started
    session.sparkContext.setLogLevel(level)
    ship_for_run(session.sparkContext)
    return session, RuntimeSettings(session)


def _start_jvm(master: str | None, app_name: str, settings: dict[str, str], log: SparkLog, level: str) -> dict[str, str]:
    """Start Spark's JVM (or join the one ``spark-submit`` started) before the SparkContext,
    so that Spark's log goes where ``log`` says from the start; the settings to start the
    SparkContext with.

    A JVM started here runs in a process session of its own, with its executors' Python
    workers: Ctrl-C in a terminal (which signals the whole foreground process group) and a
    SIGTERM to the driver's group reach the driver alone, which stops the run cleanly at a
    step boundary; the JVM still ends with the driver, when its stdin closes.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        SparkContext._ensure_initialized()  # joins spark-submit's JVM, or keeps this process's
        reconfigure_jvm(SparkContext._jvm, log, level)
        return settings
    settings = java_options(log, level, settings)
    launch = SparkConf().setMaster(master or "local[*]").setAppName(app_name).setAll(list(settings.items()))
    gateway = launch_gateway(launch, popen_kwargs={"start_new_session": True})
    SparkContext._ensure_initialized(gateway=gateway)
    return settings


def _same_interpreter(python: str | None) -> bool:
    if not python:
        return False
    try:
        return os.path.samefile(python, sys.executable) or os.path.realpath(python) == os.path.realpath(sys.executable)
    except OSError:
        return False


def executors_share_this_interpreter(spark_context: Any) -> bool:
    """A local (or local-cluster) master whose executors run this very interpreter on this
    machine: they import what the driver can import from its installation."""
    return _is_local(spark_context.master) and _same_interpreter(spark_context.pythonExec)


def ship_for_run(spark_context: Any) -> str | None:
    """Ship sparkbeam to the executors unless they already import it: on a local master
    whose executors run this very interpreter on this machine, they import sparkbeam from
    where the driver does, so nothing is shipped (and the log says so)."""
    master = spark_context.master
    if executors_share_this_interpreter(spark_context):
        _LOG.info(
            "not shipping sparkbeam: the executors of %s run this interpreter (%s) on this machine "
            "and import sparkbeam from where the driver does",
            master,
            sys.executable,
        )
        return None
    return ship_package(spark_context)


def ship_package(spark_context: Any) -> str:
    """Zip the installed sparkbeam package and add it to every executor's Python path
    (once per SparkContext: Spark refuses a second file of the same name)."""
    shipped = getattr(spark_context, "_sparkbeam_shipped", None)
    if shipped is not None:
        return shipped
    # A folder of this run's own (mkdtemp: 0700), removed when the process ends: Spark serves
    # the file from this path to executors for as long as the SparkContext lives.
    folder = tempfile.mkdtemp(prefix="sparkbeam-ship-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    target = os.path.join(folder, "sparkbeam.zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for module in _package_files():
            archive.write(module[0], module[1])
    spark_context.addPyFile(target)
    spark_context._sparkbeam_shipped = target
    _LOG.info("shipped sparkbeam to executors as %s", target)
    return target


def _package_files() -> list[tuple[str, str]]:
    """(path on disk, path in the archive) for every module of the sparkbeam package tree.

    The repository maps several folders onto one package (sdk -> sparkbeam, transforms ->
    sparkbeam.transforms, ...), so the archive is assembled from each subpackage's location.
    """
    import importlib

    files = []
    for name in ("sparkbeam", "sparkbeam.transforms", "sparkbeam.runners"):
        package_file = importlib.import_module(name).__file__
        if package_file is None:
            continue
        root = os.path.dirname(os.path.abspath(package_file))
        prefix = name.replace(".", "/")
        for folder, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not (name == "sparkbeam" and folder == root and d in ("transforms", "runners"))]
            for filename in filenames:
                if filename.endswith((".py", ".csv", ".typed")):
                    path = os.path.join(folder, filename)
                    files.append((path, os.path.join(prefix, os.path.relpath(path, root))))
    return files
