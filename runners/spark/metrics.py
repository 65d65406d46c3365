"""User metrics on Spark: each task's updates travel back with the task's result.

Every Python task has one ``MetricsContainer`` (made when the task's first sparkbeam
function runs; a new task attempt gets a new one). The functions a stage runs on
executors are wrapped by ``metered``: when one ends, what the task's container holds is
added to the step's accumulator, which Spark merges on the driver once per successful
task (a failed attempt's accumulator updates are dropped, and a task Spark retries
reports again only from the attempt that succeeds): that is the *committed* value.

A failed attempt's updates would be lost with it, so the task sends them, as it fails,
to a small listener on the driver (``attempt_reports.py``): they are the difference
between *attempted* and committed. The report is JSON (never unpickled), authenticated
with the run's key; a report that cannot be sent (an unreachable driver) is logged by the
executor and leaves attempted short of that attempt.

The channel also carries the run's key for user errors: a ``UserCodeError`` made into
text while one of the run's tasks runs here is signed with it (``runners/core/lowering/errors.py``),
so that the driver can tell the payload its executors made from one a record holds.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyspark.accumulators import AccumulatorParam

from sparkbeam.metrics.execution import MetricsContainer, MetricsEnvironment, MetricUpdates
from sparkbeam.runners.core.lowering import errors
from sparkbeam.runners.spark import worker_gc
from sparkbeam.runners.spark.attempt_reports import ReportChannel

__all__ = ["MetricsChannel", "MetricsParam", "metered", "metered_by", "task_container", "task_failed", "with_channel"]


class MetricsParam(AccumulatorParam):
    """Spark's accumulator over ``MetricUpdates``."""

    def zero(self, value: MetricUpdates) -> MetricUpdates:
        return MetricUpdates()

    def addInPlace(self, value1: MetricUpdates, value2: MetricUpdates) -> MetricUpdates:
        return value1.combine(value2)


class MetricsChannel:
    """What a task needs to report to the driver (shipped with the stage's functions): the
    step's accumulator, where failed attempts are reported (None: nowhere), and the run's
    key for signing user errors."""

    def __init__(self, accumulator: Any, reports: ReportChannel | None, error_key: bytes) -> None:
        self.accumulator = accumulator
        self.reports = reports
        self.error_key = error_key

    def report_failure(self, updates: MetricUpdates) -> None:
        if self.reports is not None:
            self.reports.send(updates)


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


def _attempt_running() -> int | None:
    """Spark's id of the task attempt running in this process; None in the driver's."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.taskAttemptId() if context is not None else None


def _error_key_of_running_task() -> bytes | None:
    # Only the attempt that was given the key signs with it: a task of another run in a
    # reused Python worker, given no channel, must not sign with this one's key.
    task = _TASK
    if task is None or task.channel is None or task.attempt != _attempt_running():
        return None
    return task.channel.error_key


errors.sign_payloads_with(_error_key_of_running_task)


def task_container() -> _Task:
    """The task attempt running in this process, with its container installed."""
    global _TASK
    attempt = _attempt_running()
    if _TASK is None or _TASK.attempt != attempt:
        _TASK = _Task(attempt)
        MetricsEnvironment.install(_TASK.container)
        if attempt is not None:  # a Python worker's task, not the driver's
            worker_gc.task_starts()
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


def with_channel(channel: MetricsChannel, function: Callable[..., Iterable[Any]], *args: Any) -> Iterable[Any]:
    """``function(*args)`` itself, its task given ``channel`` first: for a function that runs
    no user code but may raise a ``UserCodeError`` (its own, or a read's it pulls from),
    which then carries the run's key. Unlike ``metered``, nothing stands between its items
    and Spark: a generator around it cost about 90 ns an element."""
    task_container().channel = channel
    return function(*args)


def metered_by(channel: MetricsChannel | None, function: Callable[..., Iterable[Any]]) -> Callable[..., Iterable[Any]]:
    """``function`` for ``mapPartitions`` (or ``WithIndex``), metered when a channel is given
    (a write called on its own, in a test, has none)."""
    return function if channel is None else functools.partial(metered, channel, function)
