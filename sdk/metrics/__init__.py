"""Beam's metrics API (``apache_beam.metrics``): counters, distributions, gauges and string
sets that user code updates while a pipeline runs, queried from the run's result.

>>> from sparkbeam.metrics import Metrics, MetricsFilter
>>> lines = Metrics.counter("wordcount", "lines")
>>> lines.inc()  # outside a running pipeline: counted nowhere, as in Beam

``result.metrics().query(MetricsFilter().with_name("lines"))["counters"]`` then lists a
``MetricResult`` per step, with ``committed`` and ``attempted`` values.
"""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.metrics.metric import Metrics, MetricsFilter

__all__ = ["Metrics", "MetricsFilter"]

# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.metrics")
