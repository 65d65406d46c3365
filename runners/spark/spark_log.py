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
import tempfile
import time
from typing import Any

import attrs

__all__ = [
    "SparkLog",
    "choose_log",
    "current_log",
    "java_options",
    "logs_to_file",
    "reconfigure_jvm",
    "redirect_python_loggers",
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

    def note(self) -> str | None:
        """The line a failure adds to say where the rest of the story is."""
        if self.path is None:
            return None
        return f"Spark's log, with the executors' traces: {self.path} (--verbose_errors prints them here)"


_CURRENT = SparkLog()


def current_log() -> SparkLog:
    """Where Spark's log of this process goes (Spark logs per process, not per run)."""
    return _CURRENT


def choose_log(settings: dict[str, Any]) -> SparkLog:
    """The run's choice: ``--verbose_errors`` keeps the terminal; else ``--spark_log`` or a
    new file under the temporary directory."""
    if settings["verbose_errors"]:
        return SparkLog(None, verbose=True)
    path = settings["spark_log"]
    if path is None:
        folder = os.path.join(tempfile.gettempdir(), "sparkbeam-logs")
        path = os.path.join(folder, f"spark-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
    return SparkLog(os.path.abspath(path))


def _write_config(path: str, level: str) -> str:
    """A log4j2 configuration that appends everything at ``level`` and above to ``path``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
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
    config = path + ".log4j2.properties"
    with open(config, "w") as handle:
        handle.write("\n".join(lines) + "\n")
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
    config = _write_config(log.path, level)
    _CURRENT = log
    redirect_python_loggers(log)
    return {**conf, key: f"{given} -Dlog4j2.configurationFile=file:{config}".strip()}


def reconfigure_jvm(jvm: Any, log: SparkLog, level: str) -> None:
    """Send the log of a JVM already running (``spark-submit``'s) to the file."""
    global _CURRENT
    if log.path is None:
        _CURRENT = SparkLog(None, log.verbose)
        return
    config = _write_config(log.path, level)
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
