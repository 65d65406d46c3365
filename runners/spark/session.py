"""The Spark session a run uses: the active one, or an embedded ``local[*]`` the runner starts.

Executors run Python with the driver's interpreter (``PYSPARK_PYTHON``), so sparkbeam and
the user's modules import there as on the driver. For a master that is not local, the
sparkbeam package is zipped and shipped with ``addPyFile``.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from typing import Any

__all__ = ["get_session", "ship_package"]

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


def _is_local(master: str) -> bool:
    return master.startswith("local")


def get_session(master: str = "local[*]", conf: list[str] | tuple[str, ...] = (), app_name: str | None = None) -> Any:
    """The active SparkSession if there is one (and it has a compatible master), else a new one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active_master = active.sparkContext.master
        if master not in ("local[*]", active_master):
            msg = (
                f"a SparkSession with master {active_master!r} is already running in this process; "
                f"stop it before running with --spark_master={master}, or drop that option to use it"
            )
            raise RuntimeError(msg)
        return active
    builder = SparkSession.builder.master(master).appName(app_name or "sparkbeam")
    settings = dict(_DEFAULT_CONF)
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            msg = f"--spark_conf takes key=value, got {item!r}"
            raise ValueError(msg)
        settings[key.strip()] = value.strip()
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(settings.get("sparkbeam.log_level", "ERROR"))
    if not _is_local(master):
        ship_package(session.sparkContext)
    return session


def ship_package(spark_context: Any) -> str:
    """Zip the installed sparkbeam package and add it to every executor's Python path."""
    target = os.path.join(tempfile.mkdtemp(prefix="sparkbeam-ship-"), "sparkbeam.zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for module in _package_files():
            archive.write(module[0], module[1])
    spark_context.addPyFile(target)
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
