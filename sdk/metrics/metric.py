"""``Metrics`` for user code, ``MetricsFilter`` and ``MetricResults`` for queries
(Beam's ``apache_beam.metrics.metric``).

In a DoFn, a CombineFn or any user code a pipeline runs::

    class ParseFn(beam.DoFn):
        def __init__(self):
            self.errors = Metrics.counter(self.__class__, "parse_errors")

        def process(self, line):
            ...
            self.errors.inc()

After the run, ``result.metrics().query(MetricsFilter().with_name("parse_errors"))``
returns ``{"counters": [MetricResult(key, committed, attempted)], "distributions": [...],
"gauges": [...], "string_sets": [...], ...}``, one result per step that updated it.

>>> Metrics.counter(MetricsFilter, "n").metric_name
MetricName(namespace=sparkbeam.metrics.metric.MetricsFilter, name=n)
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkbeam.beam_surface import module_getattr
from sparkbeam.metrics.execution import _CURRENT, MetricKey, MetricResult
from sparkbeam.metrics.metricbase import Counter, Distribution, Gauge, Metric, MetricName, StringSet

__all__ = ["MetricResults", "Metrics", "MetricsFilter"]


class Metrics:
    """Creates the metric objects user code updates; a namespace is a class or a string."""

    @staticmethod
    def get_namespace(namespace: type | str) -> str:
        if isinstance(namespace, type):
            return f"{namespace.__module__}.{namespace.__name__}"
        if isinstance(namespace, str):
            return namespace
        msg = f"a metric's namespace is a class or a string, got {namespace!r}"
        raise ValueError(msg)

    @staticmethod
    def counter(namespace: type | str, name: str) -> Metrics.DelegatingCounter:
        return Metrics.DelegatingCounter(MetricName(Metrics.get_namespace(namespace), name))

    @staticmethod
    def distribution(namespace: type | str, name: str) -> Metrics.DelegatingDistribution:
        return Metrics.DelegatingDistribution(MetricName(Metrics.get_namespace(namespace), name))

    @staticmethod
    def gauge(namespace: type | str, name: str) -> Metrics.DelegatingGauge:
        return Metrics.DelegatingGauge(MetricName(Metrics.get_namespace(namespace), name))

    @staticmethod
    def string_set(namespace: type | str, name: str) -> Metrics.DelegatingStringSet:
        return Metrics.DelegatingStringSet(MetricName(Metrics.get_namespace(namespace), name))

    # Each update goes to the container of the work being executed, if any (Beam's rule:
    # an update outside a running pipeline is dropped).
    class DelegatingCounter(Counter):
        def inc(self, n: int = 1) -> None:
            container = _CURRENT.container
            if container is not None:
                container.update_counter(self.metric_name, n)

    class DelegatingDistribution(Distribution):
        def update(self, value: int) -> None:
            container = _CURRENT.container
            if container is not None:
                container.update_distribution(self.metric_name, value)

    class DelegatingGauge(Gauge):
        def set(self, value: int) -> None:
            container = _CURRENT.container
            if container is not None:
                container.update_gauge(self.metric_name, value)

    class DelegatingStringSet(StringSet):
        def add(self, value: str) -> None:
            container = _CURRENT.container
            if container is not None:
                container.update_string_set(self.metric_name, value)


class MetricsFilter:
    """Which metrics a query returns: by name, namespace and step (each a set; empty
    matches all). A step matches a metric's step when its '/'-separated parts appear,
    consecutively, among the metric's (``"Parse"`` matches ``"Read/Parse/ParDo(Fn)"``)."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._namespaces: set[str] = set()
        self._steps: set[str] = set()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._names)

    @property
    def namespaces(self) -> frozenset[str]:
        return frozenset(self._namespaces)

    @property
    def steps(self) -> frozenset[str]:
        return frozenset(self._steps)

    def with_metric(self, metric: Metric) -> MetricsFilter:
        return self.with_name(metric.metric_name.name).with_namespace(metric.metric_name.namespace)

    def with_name(self, name: str) -> MetricsFilter:
        return self.with_names([name])

    def with_names(self, names: Iterable[str]) -> MetricsFilter:
        if isinstance(names, str):
            msg = f"with_names takes a collection of names, not the string {names!r} (use with_name)"
            raise ValueError(msg)
        self._names.update(names)
        return self

    def with_namespace(self, namespace: type | str) -> MetricsFilter:
        return self.with_namespaces([namespace])

    def with_namespaces(self, namespaces: Iterable[type | str]) -> MetricsFilter:
        if isinstance(namespaces, str):
            msg = f"with_namespaces takes a collection of namespaces, not the string {namespaces!r} (use with_namespace)"
            raise ValueError(msg)
        self._namespaces.update(Metrics.get_namespace(namespace) for namespace in namespaces)
        return self

    def with_step(self, step: str) -> MetricsFilter:
        return self.with_steps([step])

    def with_steps(self, steps: Iterable[str]) -> MetricsFilter:
        if isinstance(steps, str):
            msg = f"with_steps takes a collection of steps, not the string {steps!r} (use with_step)"
            raise ValueError(msg)
        self._steps.update(steps)
        return self


def _is_sub_list(needle: list[str], haystack: list[str]) -> bool:
    size = len(needle)
    return any(haystack[i : i + size] == needle for i in range(len(haystack) - size + 1))


class MetricResults:
    """What ``result.metrics()`` returns: ``query(filter)`` gives the matching metrics."""

    COUNTERS = "counters"
    DISTRIBUTIONS = "distributions"
    GAUGES = "gauges"
    STRINGSETS = "string_sets"
    BOUNDED_TRIES = "bounded_tries"
    HISTOGRAMS = "histograms"

    @staticmethod
    def _matches_name(metric_filter: MetricsFilter, key: MetricKey) -> bool:
        if metric_filter.namespaces and key.metric.namespace not in metric_filter.namespaces:
            return False
        return not (metric_filter.names and key.metric.name not in metric_filter.names)

    @staticmethod
    def _matches_sub_path(actual_scope: str, filter_scope: str) -> bool:
        return bool(actual_scope) and _is_sub_list(filter_scope.split("/"), actual_scope.split("/"))

    @staticmethod
    def _matches_scope(metric_filter: MetricsFilter, key: MetricKey) -> bool:
        if not metric_filter.steps:
            return True
        return any(MetricResults._matches_sub_path(key.step, step) for step in metric_filter.steps)

    @staticmethod
    def matches(metric_filter: MetricsFilter | None, key: MetricKey) -> bool:
        if metric_filter is None:
            return True
        return MetricResults._matches_name(metric_filter, key) and MetricResults._matches_scope(metric_filter, key)

    def query(self, filter: MetricsFilter | None = None) -> dict[str, list[MetricResult]]:
        raise NotImplementedError

# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.metrics.metric")
