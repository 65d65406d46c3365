"""Beam's metrics in the engine: a Beam DoFn's or CombineFn's ``Metrics.counter(...).inc()``
(or distribution, gauge, string set, bounded trie) lands in sparkbeam's metrics, and
``result.metrics()`` answers with Beam's result types.

Beam's ``Metrics`` update the metrics container of the *state tracker* current in the
thread (``apache_beam.runners.worker.statesampler``). While the engine calls a Beam DoFn or
CombineFn, ``beam_metrics`` makes a tracker current whose updates go to sparkbeam's
container of the running task, under the step the engine has named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apache_beam.metrics import cells as beam_cells
from apache_beam.metrics import execution as beam_execution
from apache_beam.metrics import metricbase as beam_metricbase
from apache_beam.metrics.metric import MetricResults
from apache_beam.runners.worker import statesampler

from sparkbeam.metrics.cells import BoundedTrieData, DistributionResult, GaugeResult
from sparkbeam.metrics.execution import MetricsEnvironment, current_container, current_step
from sparkbeam.metrics.metricbase import MetricName
from sparkbeam.runners.core.elements.metrics import RunMetrics

__all__ = ["BeamMetricResults", "beam_metrics", "task_tracker", "tracking_for_the_task", "tracking_in_place"]


class _EngineTracker:
    """Stands for Beam's state tracker: receives Beam's metric updates.

    It keeps the task's container and step as they were where it was made, because Beam may
    run user code in a thread of its own and hand it the current tracker (a DoFn's
    ``with_exception_handling(timeout=...)``); there sparkbeam's per-thread container is
    unset, and the update would otherwise be lost."""

    def __init__(self, container: Any, step: str) -> None:
        self.container = container
        self.step = step

    def update_metric(self, typed_metric_name: Any, value: Any) -> None:
        container = MetricsEnvironment.current_container()
        if container is None:  # another thread than the task's
            if self.container is None:
                return  # made outside a run: dropped, as Beam drops updates outside a pipeline
            with MetricsEnvironment.container_scope(self.container), MetricsEnvironment.step_scope(self.step):
                self.update_metric(typed_metric_name, value)
            return
        cell_type = typed_metric_name.cell_type
        beam_name = typed_metric_name.metric_name
        name = MetricName(beam_name.namespace, beam_name.name)
        if cell_type is beam_cells.CounterCell:
            container.update_counter(name, value)
        elif cell_type is beam_cells.DistributionCell:
            container.update_distribution(name, value)
        elif cell_type is beam_cells.GaugeCell:
            container.update_gauge(name, value)
        elif cell_type is beam_cells.StringSetCell:
            container.update_string_set(name, value)
        elif name.namespace == "lineage":
            return  # Beam's IO records lineage (sources and sinks) as bounded tries: not user metrics
        elif cell_type is beam_cells.BoundedTrieCell:
            container.update_bounded_trie(name, tuple(value))
        else:
            msg = f"Beam's {getattr(cell_type, '__name__', cell_type)} metrics ({name.namespace}:{name.name}) are not supported by sparkbeam"
            raise NotImplementedError(msg)


#: the tracker made last: a lifted combine calls Beam's CombineFn once per element, in one
#: task and step, so one tracker serves every call (made again when either changes)
_last_tracker = _EngineTracker(None, "")


def task_tracker() -> _EngineTracker:
    """A tracker for the running task's container and step (made in the task's thread)."""
    global _last_tracker
    tracker = _last_tracker
    container, step = current_container(), current_step()
    if tracker.container is not container or tracker.step != step:
        tracker = _last_tracker = _EngineTracker(container, step)
    return tracker


_get_tracker = statesampler.get_current_tracker
_set_tracker = statesampler.set_current_tracker


def tracking_in_place() -> bool:
    """Whether Beam's metric updates in this thread already go to the running task's
    container (``tracking_for_the_task`` is in force): then Beam code may be called as it is."""
    tracker = _get_tracker()
    return type(tracker) is _EngineTracker and tracker.container is current_container() and tracker.container is not None


def _no_change() -> None:
    return None


def tracking_for_the_task() -> Callable[[], None]:
    """Make Beam's metric updates in this thread go to the running task's container until
    the function returned is called (once per bundle, where ``beam_metrics`` is once per
    call). In the task's thread the tracker reads the current step at each update, so one
    serves every step of the bundle; one already current for the task is kept."""
    if tracking_in_place():
        return _no_change
    previous = _get_tracker()
    tracker = task_tracker()
    _set_tracker(tracker)

    def stop() -> None:
        # Put back what was current, unless something later did so already.
        if _get_tracker() is tracker:
            _set_tracker(previous)

    return stop


def beam_metrics(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` with Beam's metric updates going to sparkbeam's container."""
    tracker = _last_tracker
    if tracker.container is not current_container() or tracker.step != current_step():
        tracker = task_tracker()
    previous = _get_tracker()
    _set_tracker(tracker)
    try:
        return call(*args)
    finally:
        _set_tracker(previous)


def _beam_value(kind: str, value: Any) -> Any:
    if isinstance(value, DistributionResult):
        data = value.data
        return beam_cells.DistributionResult(beam_cells.DistributionData(data.sum, data.count, data.min, data.max))
    if isinstance(value, GaugeResult):
        return beam_cells.GaugeResult(beam_cells.GaugeData(value.value, value.timestamp))
    if isinstance(value, BoundedTrieData):
        return _beam_bounded_trie(value)
    return value


def _beam_bounded_trie(trie: BoundedTrieData) -> Any:
    """Beam's ``BoundedTrieData`` holding the same sequences (truncated ones included), as
    Beam's runners return a bounded trie's committed value."""
    from apache_beam.portability.api import metrics_pb2

    def node(paths: list[tuple]) -> Any:
        if any(path == (True,) for path in paths):
            return metrics_pb2.BoundedTrieNode(truncated=True)
        below: dict[str, list[tuple]] = {}
        for path in paths:
            if len(path) > 1:
                below.setdefault(path[0], []).append(path[1:])
        return metrics_pb2.BoundedTrieNode(children={name: node(rest) for name, rest in below.items()})

    if not trie.paths:
        return beam_cells.BoundedTrieData(bound=trie.bound)
    proto = metrics_pb2.BoundedTrie(bound=trie.bound, root=node(list(trie.paths)))
    return beam_cells.BoundedTrieData.from_proto(proto)


class BeamMetricResults(MetricResults):
    """A run's metrics as Beam's classes: ``query(MetricsFilter)`` with Beam's filter gives
    Beam's ``MetricResult``, ``MetricKey``, ``DistributionResult`` and ``GaugeResult``."""

    def __init__(self, run_metrics: RunMetrics) -> None:
        self.run_metrics = run_metrics

    def query(self, filter: Any = None) -> dict[str, list]:
        results: dict[str, list] = {}
        for kind, rows in self.run_metrics.query(filter).items():
            results[kind] = [
                beam_execution.MetricResult(
                    beam_execution.MetricKey(row.key.step, beam_metricbase.MetricName(row.key.metric.namespace, row.key.metric.name)),
                    _beam_value(kind, row.committed),
                    _beam_value(kind, row.attempted),
                )
                for row in rows
            ]
        return results
