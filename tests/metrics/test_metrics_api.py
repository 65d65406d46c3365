"""The metrics API without a runner: names, filters and what bad input says."""

from __future__ import annotations

import pickle

import pytest

from sparkbeam.metrics import Metrics, MetricsFilter
from sparkbeam.metrics.cells import DistributionData, GaugeData
from sparkbeam.metrics.execution import (
    MetricKey,
    MetricsContainer,
    MetricsEnvironment,
    MetricUpdates,
)
from sparkbeam.metrics.metric import MetricResults
from sparkbeam.metrics.metricbase import MetricName


def test_a_namespace_is_a_class_or_a_string():
    assert Metrics.counter(MetricsFilter, "n").metric_name == MetricName("sparkbeam.metrics.metric.MetricsFilter", "n")
    with pytest.raises(ValueError, match="namespace is a class or a string, got 3"):
        Metrics.counter(3, "n")
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        Metrics.distribution("ns", "")


def test_filters_refuse_a_string_where_a_collection_is_due():
    for method in ("with_names", "with_namespaces", "with_steps"):
        with pytest.raises(ValueError, match="not the string 'abc'"):
            getattr(MetricsFilter(), method)("abc")


@pytest.mark.parametrize(
    ("step", "filter_step", "matches"),
    [
        ("Read/Parse/ParDo(Fn)", "Parse", True),
        ("Read/Parse/ParDo(Fn)", "Read/Parse", True),
        ("Read/Parse/ParDo(Fn)", "Parse/ParDo(Fn)", True),
        ("Read/Parse/ParDo(Fn)", "Read/ParDo(Fn)", False),  # not consecutive
        ("Read/Parse/ParDo(Fn)", "Pars", False),  # whole parts only
        ("", "Parse", False),
    ],
)
def test_step_names_match_as_sub_paths(step, filter_step, matches):
    key = MetricKey(step, MetricName("ns", "n"))
    assert MetricResults.matches(MetricsFilter().with_step(filter_step), key) is matches


def test_updates_combine_by_kind_and_travel_pickled():
    container = MetricsContainer()
    counter, dist, gauge, strings = (
        Metrics.counter("ns", "c"), Metrics.distribution("ns", "d"), Metrics.gauge("ns", "g"), Metrics.string_set("ns", "s"))
    with MetricsEnvironment.container_scope(container), MetricsEnvironment.step_scope("Step"):
        counter.inc(2)
        counter.dec()
        dist.update(4)
        dist.update(1)
        gauge.set(5)
        strings.add("x")
    updates = pickle.loads(pickle.dumps(container.updates()))
    both = updates.combine(updates)
    key = lambda name: MetricKey("Step", MetricName("ns", name))  # noqa: E731
    assert both.counters[key("c")] == 2
    assert both.distributions[key("d")] == DistributionData(10, 4, 1, 4)
    assert both.gauges[key("g")].value == 5
    assert both.string_sets[key("s")] == frozenset({"x"})
    later = MetricUpdates(gauges={key("g"): GaugeData(9, updates.gauges[key("g")].timestamp + 1)})
    assert updates.combine(later).gauges[key("g")].value == 9  # the latest set wins
    with pytest.raises(TypeError, match="takes strings, got 3"), MetricsEnvironment.container_scope(container):
        strings.add(3)


def test_the_failed_attempts_listener_stops_without_the_default_half_second_wait(monkeypatch):
    import socketserver

    from sparkbeam.metrics.execution import MetricUpdates
    from sparkbeam.runners.spark import attempt_reports

    intervals = []
    serve = socketserver.BaseServer.serve_forever

    def watched(self, poll_interval=0.5):
        intervals.append(poll_interval)
        serve(self, poll_interval)

    monkeypatch.setattr(socketserver.BaseServer, "serve_forever", watched)
    reports = attempt_reports.AttemptReports("127.0.0.1")
    try:
        reports.channel().send(MetricUpdates())
    finally:
        reports.close()
    assert intervals == [attempt_reports.SHUTDOWN_POLL_SECONDS] and attempt_reports.SHUTDOWN_POLL_SECONDS <= 0.05
