"""User metrics on Spark: each task's updates travel back with the task's result.

Every Python task has one ``MetricsContainer`` (made when the task's first sparkbeam
function runs; a new task attempt gets a new one). The functions a stage runs on
executors are wrapped by ``metered``: when one ends, what the task's container holds is
added to the step's accumulator, which Spark merges on the driver once per successful
task (a failed attempt's accumulator updates are dropped, and a task Spark retries
reports again only from the attempt that succeeds): that is the *committed* value.

A failed attempt's updates would be lost with it, so the task sends them, as it fails,
to a small listener on the driver (``AttemptReports``): they are the difference between
*attempted* and committed. The report is JSON (never unpickled) and carries the run's
token; a report that cannot be sent (an unreachable driver) is logged by the executor
and leaves attempted short of that attempt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyspark.accumulators import AccumulatorParam

from sparkbeam.metrics.cells import BoundedTrieData, DistributionData, GaugeData
from sparkbeam.metrics.execution import (
    MetricKey,
    MetricsContainer,
    MetricsEnvironment,
    MetricUpdates,
)
from sparkbeam.metrics.metricbase import MetricName

__all__ = ["AttemptReports", "MetricsChannel", "MetricsParam", "metered", "task_container", "task_failed"]

_LOG = logging.getLogger(__name__)


class MetricsParam(AccumulatorParam):
    """Spark's accumulator over ``MetricUpdates``."""

    def zero(self, value: MetricUpdates) -> MetricUpdates:
        return MetricUpdates()

    def addInPlace(self, value1: MetricUpdates, value2: MetricUpdates) -> MetricUpdates:
        return value1.combine(value2)


def updates_to_json(updates: MetricUpdates) -> str:
    rows: list[list[Any]] = []
    for kind in MetricUpdates.KINDS:
        for key, value in getattr(updates, kind).items():
            if kind == "distributions":
                data: Any = [value.sum, value.count, value.min, value.max]
            elif kind == "gauges":
                data = [value.value, value.timestamp]
            elif kind == "string_sets":
                data = sorted(value)
            elif kind == "bounded_tries":
                data = [value.bound, [list(path) for path in value.paths]]
            else:
                data = value
            rows.append([kind, key.step, key.metric.namespace, key.metric.name, data])
    return json.dumps(rows)


def updates_from_json(text: str) -> MetricUpdates:
    kinds: dict[str, dict] = {kind: {} for kind in MetricUpdates.KINDS}
    for kind, step, namespace, name, data in json.loads(text):
        key = MetricKey(step, MetricName(namespace, name))
        if kind == "distributions":
            value: Any = DistributionData(*data)
        elif kind == "gauges":
            value = GaugeData(*data)
        elif kind == "string_sets":
            value = frozenset(data)
        elif kind == "bounded_tries":
            bound, paths = data
            value = BoundedTrieData(frozenset(tuple(path) for path in paths), bound)
        elif kind == "counters":
            value = data
        else:
            continue
        kinds[kind][key] = value
    return MetricUpdates(**kinds)


class _ReportHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        reports: AttemptReports = self.server.reports  # type: ignore[attr-defined]
        token = self.rfile.readline().strip().decode("ascii", "replace")
        if not secrets.compare_digest(token, reports.token):
            return
        try:
            updates = updates_from_json(self.rfile.read().decode("utf-8"))
        except (ValueError, TypeError):
            _LOG.warning("ignored a malformed report of a failed task attempt's metrics")
            return
        reports.add(updates)


#: How often the listener's thread looks whether it is to stop. ``close`` waits for that
#: look, which ends every run: socketserver's default (0.5 s) added up to half a second to
#: every run's wall-clock time; an idle look costs a few microseconds.
SHUTDOWN_POLL_SECONDS = 0.02


class AttemptReports:
    """The driver's listener for failed task attempts' metric updates."""

    def __init__(self, host: str) -> None:
        self.token = secrets.token_hex(16)
        self._lock = threading.Lock()
        self._pending = MetricUpdates()
        self._server = socketserver.ThreadingTCPServer((host, 0), _ReportHandler)
        self._server.daemon_threads = True
        self._server.reports = self  # type: ignore[attr-defined]
        self.address = (host, self._server.server_address[1])
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            name="sparkbeam-attempt-metrics",
            daemon=True,
        ).start()

    def add(self, updates: MetricUpdates) -> None:
        with self._lock:
            self._pending = self._pending.combine(updates)

    def take(self) -> MetricUpdates:
        """The reports received since the last ``take``."""
        with self._lock:
            taken, self._pending = self._pending, MetricUpdates()
        return taken

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class MetricsChannel:
    """What a task needs to report its metrics: the step's accumulator and where failed
    attempts are reported (shipped with the stage's functions)."""

    def __init__(self, accumulator: Any, address: tuple[str, int], token: str) -> None:
        self.accumulator = accumulator
        self.address = address
        self.token = token

    def report_failure(self, updates: MetricUpdates) -> None:
        try:
            with socket.create_connection(self.address, timeout=5) as connection:
                connection.sendall(self.token.encode("ascii") + b"\n" + updates_to_json(updates).encode("utf-8"))
        except OSError as error:
            _LOG.warning("could not report a failed task attempt's metrics to the driver at %s: %s", self.address, error)


class _Task:
    """This process's current task attempt: its container and everything it drained."""

    def __init__(self, attempt: int | None) -> None:
        self.attempt = attempt
        self.container = MetricsContainer()
        self.drained = MetricUpdates()
        self.channel: MetricsChannel | None = None
        self.reported = False

    def drain(self) -> MetricUpdates:
        updates = self.container.drain()
        self.drained = self.drained.combine(updates)
        return updates

    def fail(self) -> None:
        if self.reported or self.channel is None:
            return
        self.reported = True  # the failure passes through every wrapper of the task: once
        self.channel.report_failure(self.drained.combine(self.container.updates()))


_TASK: _Task | None = None


def task_container() -> _Task:
    """The task attempt running in this process, with its container installed."""
    global _TASK
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.taskAttemptId() if context is not None else None
    if _TASK is None or _TASK.attempt != attempt:
        _TASK = _Task(attempt)
        MetricsEnvironment.install(_TASK.container)
    return _TASK


@contextlib.contextmanager
def driver_task() -> Iterator[None]:
    """A task attempt run in the driver's process (``driver_stages.py``): a container of its
    own, installed only meanwhile (whatever container the thread had is put back)."""
    global _TASK
    previous_task, previous_container = _TASK, MetricsEnvironment.install(None)
    _TASK = None
    try:
        yield
    finally:
        _TASK = previous_task
        MetricsEnvironment.install(previous_container)


def task_failed() -> None:
    """User code failed where no ``metered`` function sees it (a combine inside Spark's
    own shuffle code): report this attempt's updates now."""
    if _TASK is not None:
        _TASK.fail()


def metered(channel: MetricsChannel, function: Callable[..., Iterable[Any]], *args: Any) -> Iterator[Any]:
    """``function(*args)``'s items, with the task's metric updates sent on at its end."""
    task = task_container()
    task.channel = channel
    try:
        yield from function(*args)
    except GeneratorExit:
        raise  # the consumer stopped reading: not a failure
    except BaseException:
        task.fail()
        raise
    channel.accumulator.add(task.drain())
