"""The metric interfaces user code updates (Beam's ``apache_beam.metrics.metricbase``).

A metric is named by a namespace and a name (``MetricName``); ``Metrics.counter(...)``
and its siblings (``sparkbeam.metrics.metric``) return objects with these interfaces,
whose updates go to the step the runner is executing.

>>> MetricName("my.namespace", "parsed")
MetricName(namespace=my.namespace, name=parsed)
"""

from __future__ import annotations

from typing import Any

import attrs

from sparkbeam.beam_surface import module_getattr

__all__ = ["Counter", "Distribution", "Gauge", "Metric", "MetricName", "StringSet"]


def _non_empty(what: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if not isinstance(value, str) or not value:
            msg = f"a metric's {what} must be a non-empty string, got {value!r}"
            raise ValueError(msg)

    return check


@attrs.frozen(repr=False)
class MetricName:
    """A metric's namespace and name; metrics with equal names are the same metric."""

    namespace: str = attrs.field(validator=_non_empty("namespace"))
    name: str = attrs.field(validator=_non_empty("name"))

    def __repr__(self) -> str:
        return f"MetricName(namespace={self.namespace}, name={self.name})"

    __str__ = __repr__


class Metric:
    """A metric object, as ``Metrics`` creates them."""

    def __init__(self, metric_name: MetricName) -> None:
        self.metric_name = metric_name


class Counter(Metric):
    """A count that user code increments (or decrements); the runner sums its updates."""

    def inc(self, n: int = 1) -> None:
        raise NotImplementedError

    def dec(self, n: int = 1) -> None:
        self.inc(-n)


class Distribution(Metric):
    """Integer values whose sum, count, min and max the runner keeps."""

    def update(self, value: int) -> None:
        raise NotImplementedError


class Gauge(Metric):
    """The latest integer value set (by the time it was set, across workers)."""

    def set(self, value: int) -> None:
        raise NotImplementedError


class StringSet(Metric):
    """The set of distinct strings added."""

    def add(self, value: str) -> None:
        raise NotImplementedError

# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.metrics.metricbase")
