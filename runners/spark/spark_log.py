"""Where Spark's own log goes: a file whose path failures print, or the terminal.

Spark logs every failed task with the executor's Python traceback and the JVM's stack,
and Py4J logs its connection errors; on a terminal that is 80 to 180 lines around one
exception in a ``Map``. By default the runner sends Spark's log (log4j) and Py4J's to a
file, and a failure names that file; ``--verbose_errors`` keeps them on the terminal (and
the full chained traceback). A session the user started keeps the logging they gave it.

- A JVM the runner launches reads the file's log4j configuration when it starts (so even
  Spark's start-up warnings go there);
- a JVM already running without a SparkContext (``spark-submit`` started it before the
  script) is reconfigured before the SparkContext starts.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

import attrs

from sparkbeam.runners.core.lowering.settings import RunSettings
from sparkbeam.runners.spark.private_temp import (
    create_private_file,
    folder_for,
    open_private_file,
    remove_older_than,
)

__all__ = [
    "SparkLog",
    "choose_log",
    "current_log",
    "java_options",
    "logs_to_file",
    "reconfigure_jvm",
    "redirect_python_loggers",
    "remove_old_logs",
]

_LOG = logging.getLogger(__name__)

#: Loggers quieter than the root in Spark's own defaults (their chatter is not news).
_QUIET = {
    "org.sparkproject.jetty": "warn",
    "org.sparkproject.jetty.util.component.AbstractLifeCycle": "error",
    "org.apache.hadoop.hive.metastore.RetryingHMSHandler": "fatal",
    "org.apache.parquet.CorruptStatistics": "error",
}


@attrs.frozen
class SparkLog:
    """Where Spark's log goes for a run: ``path`` (None: the terminal), and whether the
    user asked for full traces on the terminal."""

    path: str | None = None
    verbose: bool = False
    #: where the log4j configuration goes: this user's private logs folder (or the run's own)
    folder: str | None = None
    #: the file is one of sparkbeam's own in ``folder`` (created 0600, never through a symlink)
    private: bool = False

    def note(self) -> str | None:
        """The line a failure adds to say where the rest of the story is."""
        if self.path is None:
            return None
        return f"Spark's log, with the executors' traces: {self.path} (--verbose_errors prints them here)"


_CURRENT = SparkLog()


def current_log() -> SparkLog:
    """Where Spark's log of this process goes (Spark logs per process, not per run)."""
    return _CURRENT


_CONFIG_SUFFIX = ".log4j2.properties"


def _ours(name: str) -> bool:
    """sparkbeam's own files in the logs folder (what the age limit may remove)."""
    return (name.startswith("spark-") and name.endswith(".log")) or name.endswith(_CONFIG_SUFFIX)


def remove_old_logs(folder: str, max_age_days: float, now: float) -> list[str]:
    """Remove sparkbeam's log files and their log4j configurations in ``folder`` that were
    last written more than ``max_age_days`` before ``now`` (a running stream's log keeps
    being written, so it stays); the names removed."""
    removed = remove_older_than(folder, max_age_days * 86400.0, _ours, now)
    if removed:
        _LOG.info("removed %d Spark log files older than %g days from %s", len(removed), max_age_days, folder)
    return removed


def choose_log(settings: RunSettings, now: float | None = None) -> SparkLog:
    """The run's choice: ``--verbose_errors`` keeps the terminal; else ``--spark_log`` or a
    new file in this user's private logs folder, ``<tmp>/sparkbeam-<uid>/logs``, where logs
    older than ``--spark_log_max_age_days`` are removed first."""
    if settings.verbose_errors:
        return SparkLog(None, verbose=True)
    now = time.time() if now is None else now
    folder, is_user_folder = folder_for("logs")
    if is_user_folder:  # a run's own fallback folder holds nothing old
        remove_old_logs(folder, settings.spark_log_max_age_days, now)
    path = settings.spark_log
    if path is not None:
        return SparkLog(os.path.abspath(path), folder=folder)
    # Unique per run even for runs of one process within a second (Spark logs per JVM, but
    # a new SparkContext after spark.stop() gets a file of its own).
    name = f"spark-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{os.getpid()}-{uuid.uuid4().hex[:6]}.log"
    return SparkLog(os.path.join(folder, name), folder=folder, private=True)


def _prepare_file(log: SparkLog) -> None:
    """Create the log file: sparkbeam's own new (0600, no symlink followed) or, if this run
    already made it, checked to be a private file of this user's; a ``--spark_log`` path
    is the user's and is written where they say."""
    if log.path is None:
        return
    if not log.private:
        os.makedirs(os.path.dirname(log.path), exist_ok=True)
        return
    try:
        create_private_file(log.path).close()
    except FileExistsError:
        open_private_file(log.path, "ab").close()


def _write_config(log: SparkLog, level: str) -> str:
    """A log4j2 configuration that appends everything at ``level`` and above to the log
    file, written as a new private file in the logs folder."""
    _prepare_file(log)
    path = log.path
    lines = [
        f"rootLogger.level = {level.lower()}",
        "rootLogger.appenderRef.file.ref = file",
        "appender.file.type = File",
        "appender.file.name = file",
        f"appender.file.fileName = {path}",
        "appender.file.append = true",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
    ]
    for index, (name, quiet_level) in enumerate(_QUIET.items()):
        lines += [f"logger.quiet{index}.name = {name}", f"logger.quiet{index}.level = {quiet_level}"]
    # Beside the other private files, never beside a --spark_log path (which may be in a
    # folder others can write, such as /tmp itself).
    folder = log.folder if log.folder is not None else folder_for("logs")[0]
    config = os.path.join(folder, f"{os.path.basename(str(path))}-{uuid.uuid4().hex[:8]}{_CONFIG_SUFFIX}")
    with create_private_file(config) as handle:
        handle.write(("\n".join(lines) + "\n").encode())
    return config


def java_options(log: SparkLog, level: str, conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the driver JVM told to log to the file when it starts; unchanged when
    the log stays on the terminal or the user configured log4j themselves."""
    global _CURRENT
    key = "spark.driver.extraJavaOptions"
    given = conf.get(key, "")
    if log.path is None or "log4j" in given:
        _CURRENT = SparkLog(None, log.verbose)
        return conf
    config = _write_config(log, level)
    _CURRENT = log
    redirect_python_loggers(log)
    return {**conf, key: f"{given} -Dlog4j2.configurationFile=file:{config}".strip()}


def reconfigure_jvm(jvm: Any, log: SparkLog, level: str) -> None:
    """Send the log of a JVM already running (``spark-submit``'s) to the file."""
    global _CURRENT
    if log.path is None:
        _CURRENT = SparkLog(None, log.verbose)
        return
    config = _write_config(log, level)
    uri = jvm.java.io.File(config).toURI()
    jvm.java.lang.System.setProperty("log4j2.configurationFile", uri.toString())
    _forget_spark_default_config(jvm)
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(uri)
    _CURRENT = log
    redirect_python_loggers(log)


def logs_to_file(jvm: Any) -> bool:
    """Whether the JVM's root logger writes to the file (and nowhere else)."""
    appenders = jvm.org.apache.logging.log4j.LogManager.getRootLogger().getAppenders()
    return list(appenders.keySet()) == ["file"]


def _forget_spark_default_config(jvm: Any) -> None:
    """Spark reloads its default log configuration when a SparkContext starts if it loaded
    it when the JVM started (as under ``spark-submit``): clear that mark so that it keeps
    ours. Best effort: if this Spark keeps the mark elsewhere, the runner reconfigures once
    the SparkContext has started (and Spark's start-up lines reach the terminal)."""
    try:
        logging_object = jvm.java.lang.Class.forName("org.apache.spark.internal.Logging$")
        for field in logging_object.getDeclaredFields():
            if field.getName().endswith("defaultSparkLog4jConfig"):
                field.setAccessible(True)
                field.setBoolean(None, False)
    except Exception:
        _LOG.debug("could not clear Spark's default-log4j mark", exc_info=True)


def redirect_python_loggers(log: SparkLog) -> None:
    """Py4J's own log (connection errors, e.g. while a run is interrupted) to the file."""
    if log.path is None:
        return
    py4j = logging.getLogger("py4j")
    if any(isinstance(h, logging.FileHandler) and h.baseFilename == log.path for h in py4j.handlers):
        return
    handler = logging.FileHandler(log.path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    py4j.addHandler(handler)
    py4j.propagate = False
