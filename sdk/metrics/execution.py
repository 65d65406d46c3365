"""Where metric updates go while a pipeline runs (Beam's ``apache_beam.metrics.execution``).

A runner makes one ``MetricsContainer`` per unit of work it commits (on Spark, a task) and
installs it with ``MetricsEnvironment.container_scope``; around each call into user code
it names the step being executed (the transform's label). The running thread's step is
read and named through this module's functions alone, the one API runner code uses:
``current_step``; ``enter_step``/``leave_step`` around a run of calls (a chunk of
elements); ``in_step``/``in_step_1``/``in_step_2`` for a function always called in one step (made once,
called per element); ``thread_steps`` for a per-element path that names its step inline,
with no wrapper call (the engine's fast paths); ``call_in_step`` for one call; ``MetricsEnvironment.step_scope`` as a
``with`` block. A metric
updated outside any container (at pipeline construction, in a test calling a DoFn by
hand) goes nowhere, as in Beam. ``MetricUpdates`` is a container's content: plain,
picklable values that combine, so a runner can ship them from workers and sum them.

>>> container = MetricsContainer()
>>> with MetricsEnvironment.container_scope(container), MetricsEnvironment.step_scope("Parse"):
...     container.update_counter(MetricName("ns", "lines"), 2)
>>> container.updates().counters
{MetricKey(step=Parse, metric=MetricName(namespace=ns, name=lines)): 2}
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from sparkbeam.beam_surface import module_getattr
from sparkbeam.metrics.cells import BoundedTrieData, DistributionData, GaugeData
from sparkbeam.metrics.metricbase import MetricName

__all__ = [
    "MetricKey",
    "MetricResult",
    "MetricUpdates",
    "MetricsContainer",
    "MetricsEnvironment",
    "call_in_step",
    "current_container",
    "current_step",
    "enter_step",
    "in_step",
    "in_step_1",
    "in_step_2",
    "leave_step",
    "thread_steps",
]


@attrs.frozen(repr=False)
class MetricKey:
    """A metric in one step: the step's name (the transform's full label) and the metric's name."""

    step: str
    metric: MetricName

    def __repr__(self) -> str:
        return f"MetricKey(step={self.step}, metric={self.metric})"

    __str__ = __repr__


@attrs.frozen(repr=False)
class MetricResult:
    """A metric's value over a run: ``committed`` counts the work the runner committed
    (each successful task once), ``attempted`` every attempt, failed ones included."""

    key: MetricKey
    committed: Any
    attempted: Any

    @property
    def result(self) -> Any:
        """The committed value, or the attempted one where nothing was committed (Beam's)."""
        return self.committed if self.committed else self.attempted

    def __repr__(self) -> str:
        return f"MetricResult(key={self.key}, committed={self.committed}, attempted={self.attempted})"

    __str__ = __repr__


def _combine(kind: str, left: Any, right: Any) -> Any:
    if kind == "counters":
        return left + right
    if kind == "string_sets":
        return left | right
    return left.combine(right)


@attrs.frozen
class MetricUpdates:
    """Metric values by ``MetricKey``, one dict per kind; ``combine`` sums two of them."""

    counters: dict[MetricKey, int] = attrs.field(factory=dict)
    distributions: dict[MetricKey, DistributionData] = attrs.field(factory=dict)
    gauges: dict[MetricKey, GaugeData] = attrs.field(factory=dict)
    string_sets: dict[MetricKey, frozenset[str]] = attrs.field(factory=dict)
    bounded_tries: dict[MetricKey, BoundedTrieData] = attrs.field(factory=dict)

    KINDS = ("counters", "distributions", "gauges", "string_sets", "bounded_tries")

    def __bool__(self) -> bool:
        return any(getattr(self, kind) for kind in self.KINDS)

    def combine(self, other: MetricUpdates) -> MetricUpdates:
        if not other:
            return self
        if not self:
            return other
        merged = {}
        for kind in self.KINDS:
            values = dict(getattr(self, kind))
            for key, value in getattr(other, kind).items():
                values[key] = _combine(kind, values[key], value) if key in values else value
            merged[kind] = values
        return MetricUpdates(**merged)


_EMPTY_TRIE = BoundedTrieData()


class MetricsContainer:
    """The metric updates of one unit of work, by step and metric name."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, MetricName], int] = {}
        self.distributions: dict[tuple[str, MetricName], DistributionData] = {}
        self.gauges: dict[tuple[str, MetricName], GaugeData] = {}
        self.string_sets: dict[tuple[str, MetricName], set[str]] = {}
        self.bounded_tries: dict[tuple[str, MetricName], BoundedTrieData] = {}

    def update_counter(self, name: MetricName, n: int) -> None:
        key = (_CURRENT.step, name)
        self.counters[key] = self.counters.get(key, 0) + n

    def update_distribution(self, name: MetricName, value: int) -> None:
        key = (_CURRENT.step, name)
        single = DistributionData.singleton(int(value))
        known = self.distributions.get(key)
        self.distributions[key] = single if known is None else known.combine(single)

    def update_gauge(self, name: MetricName, value: int) -> None:
        self.gauges[(_CURRENT.step, name)] = GaugeData(int(value), time.time())

    def update_string_set(self, name: MetricName, value: str) -> None:
        if not isinstance(value, str):
            msg = f"StringSet {name.namespace}:{name.name} takes strings, got {value!r}"
            raise TypeError(msg)
        self.string_sets.setdefault((_CURRENT.step, name), set()).add(value)

    def update_bounded_trie(self, name: MetricName, segments: tuple[str, ...]) -> None:
        key = (_CURRENT.step, name)
        self.bounded_tries[key] = self.bounded_tries.get(key, _EMPTY_TRIE).add(segments)

    def updates(self) -> MetricUpdates:
        """What this container holds, keyed by ``MetricKey``."""

        def keyed(cells: dict, convert: Callable[[Any], Any] = lambda value: value) -> dict:
            return {MetricKey(step, name): convert(value) for (step, name), value in cells.items()}

        return MetricUpdates(
            keyed(self.counters), keyed(self.distributions), keyed(self.gauges), keyed(self.string_sets, frozenset), keyed(self.bounded_tries)
        )

    def drain(self) -> MetricUpdates:
        """``updates()``, after which the container is empty."""
        updates = self.updates()
        self.counters, self.distributions, self.gauges, self.string_sets, self.bounded_tries = {}, {}, {}, {}, {}
        return updates

    def __bool__(self) -> bool:
        return bool(self.counters or self.distributions or self.gauges or self.string_sets or self.bounded_tries)


class _Current(threading.local):
    container: MetricsContainer | None = None
    #: the step whose user code is running; a metric updated outside any names no step
    step: str = ""


_CURRENT = _Current()


class _MetricsEnvironment:
    """The container and step that metric updates go to, per thread."""

    def current_container(self) -> MetricsContainer | None:
        return _CURRENT.container

    def current_step(self) -> str:
        return _CURRENT.step

    @contextlib.contextmanager
    def container_scope(self, container: MetricsContainer | None) -> Iterator[MetricsContainer | None]:
        previous = _CURRENT.container
        _CURRENT.container = container
        try:
            yield container
        finally:
            _CURRENT.container = previous

    @contextlib.contextmanager
    def step_scope(self, step: str) -> Iterator[None]:
        previous = _CURRENT.step
        _CURRENT.step = step
        try:
            yield
        finally:
            _CURRENT.step = previous

    def install(self, container: MetricsContainer | None) -> MetricsContainer | None:
        """Make ``container`` current in this thread for good (a worker's task), returning
        the one it replaces."""
        previous = _CURRENT.container
        _CURRENT.container = container
        return previous


MetricsEnvironment = _MetricsEnvironment()


def current_step() -> str:
    """The step whose code the running thread executes ("" outside any)."""
    return _CURRENT.step


def current_container() -> MetricsContainer | None:
    """Where the running thread's metric updates go (None: nowhere)."""
    return _CURRENT.container


def enter_step(step: str) -> str:
    """Name ``step`` the running thread's step; returns the step it replaces, which
    ``leave_step`` puts back (a run of calls in one step: a chunk of elements)."""
    current = _CURRENT
    previous = current.step
    current.step = step
    return previous


def leave_step(previous: str) -> None:
    """Put back the step ``enter_step`` replaced."""
    _CURRENT.step = previous


def call_in_step(step: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` in ``step``, the caller's step put back after."""
    current = _CURRENT
    previous = current.step
    current.step = step
    try:
        return call(*args)
    finally:
        current.step = previous


def in_step(step: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` with the current step set to ``step`` while it runs (and restored after,
    so that a call made from inside another step's code returns to that step)."""
    current = _CURRENT

    def stepped(*args: Any, **kwargs: Any) -> Any:
        previous = current.step
        current.step = step
        try:
            return call(*args, **kwargs)
        finally:
            current.step = previous

    return stepped


def thread_steps() -> threading.local:
    """The holder of every thread's step, for a per-element path that names its step
    inline, as ``in_step_1`` does but with no call around it: ``holder.__dict__`` is the
    running thread's own namespace (looked up per call: a path may run in another thread
    than the one that built it), whose ``"step"`` is the step (absent: none named, ``""``)."""
    return _CURRENT


def in_step_1(step: str, call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``in_step`` for a function of one argument (called per element: no packing of
    arguments)."""
    current, unnamed = _CURRENT, _Current.step

    def stepped(argument: Any) -> Any:
        # Through this thread's own dict of ``_CURRENT``: one thread-local lookup, not three.
        names = current.__dict__
        previous = names.get("step", unnamed)
        names["step"] = step
        try:
            return call(argument)
        finally:
            names["step"] = previous

    return stepped


def in_step_2(step: str, call: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``in_step_1`` for a function of two arguments (a CombineFn's ``add_input``)."""
    current, unnamed = _CURRENT, _Current.step

    def stepped(first: Any, second: Any) -> Any:
        names = current.__dict__  # as in in_step_1
        previous = names.get("step", unnamed)
        names["step"] = step
        try:
            return call(first, second)
        finally:
            names["step"] = previous

    return stepped


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.metrics.execution")
