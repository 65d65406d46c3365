"""Metrics in the engine: user code runs with its step named, and a run sums what its
units of work committed (and what failed attempts did) into Beam's metric results.

- ``StepScopedRunner`` and ``StepScopedCombineFn`` name the step around each call into
  user code, so that ``Metrics.counter(...).inc()`` lands under the transform's label. A
  combine's phases are named as Beam's portable runner names them:
  ``<label>/Precombine`` (create, add, compact), ``<label>/Merge`` and
  ``<label>/ExtractOutputs``.
- ``RunMetrics`` is ``result.metrics()``: the run's committed and attempted totals, and
  the committed updates of each step (micro-batch) kept with the timeline's retention.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from sparkbeam.combine import CombineFn
from sparkbeam.metrics.cells import BoundedTrieData
from sparkbeam.metrics.execution import (
    MetricKey,
    MetricResult,
    MetricUpdates,
    call_in_step,
    in_step_1,
)
from sparkbeam.metrics.metric import MetricResults, MetricsFilter

__all__ = ["RunMetrics", "StepMetrics", "StepScopedCombineFn", "StepScopedRunner"]


class StepScopedRunner:
    """An element runner (``ParDoOp.element_runner``) whose calls run in its step."""

    def __init__(self, step: str, runner: Any) -> None:
        self.step = step
        self.runner = runner
        # Made once, called per element.
        self.process: Callable[[Any], None] = in_step_1(step, runner.process)

    def _call(self, method: Any, *args: Any) -> Any:
        return call_in_step(self.step, method, *args)

    def start(self) -> None:
        self._call(self.runner.start)

    def finish(self) -> None:
        self._call(self.runner.finish)

    def teardown(self) -> None:
        self._call(self.runner.teardown)

    def finalize_bundle(self) -> None:
        self._call(self.runner.finalize_bundle)


class StepScopedCombineFn(CombineFn):
    """A grouping's CombineFn whose calls run in the phases' steps (see the module docs)."""

    def __init__(self, fn: CombineFn, label: str) -> None:
        self.fn = fn
        self.label = label
        self.precombine = f"{label}/Precombine"
        self.merge = f"{label}/Merge"
        self.extract = f"{label}/ExtractOutputs"

    def _in(self, step: str, method: Any, *args: Any) -> Any:
        return call_in_step(step, method, *args)

    def default_label(self) -> str:
        return self.fn.default_label()

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._in(self.label, self.fn.setup)

    def create_accumulator(self, *args: Any, **kwargs: Any) -> Any:
        return self._in(self.precombine, self.fn.create_accumulator)

    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        return self._in(self.precombine, self.fn.add_input, mutable_accumulator, element)

    def add_inputs(self, mutable_accumulator: Any, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return self._in(self.precombine, self.fn.add_inputs, mutable_accumulator, elements)

    def compact(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self._in(self.precombine, self.fn.compact, accumulator)

    def merge_accumulators(self, accumulators: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return self._in(self.merge, self.fn.merge_accumulators, accumulators)

    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self._in(self.extract, self.fn.extract_output, accumulator)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._in(self.label, self.fn.teardown)


def step_scoped(fn: CombineFn | None, label: str) -> Any:
    return None if fn is None else StepScopedCombineFn(fn, label)


@attrs.frozen
class StepMetrics:
    """What one step (micro-batch) of a run committed, and what its failed attempts did."""

    step: int
    committed: MetricUpdates
    failed_attempts: MetricUpdates = attrs.field(factory=MetricUpdates)


def _result(kind: str, value: Any) -> Any:
    if kind in ("distributions", "gauges"):
        return value.get_result()
    if kind == "string_sets":
        return set(value)
    return value


_IDENTITY = {"counters": 0, "string_sets": frozenset(), "bounded_tries": BoundedTrieData()}


class RunMetrics(MetricResults):
    """A run's metrics, as Beam's ``result.metrics()``: ``query(MetricsFilter)`` returns
    ``{"counters": [...], "distributions": [...], "gauges": [...], "string_sets": [...],
    "bounded_tries": [...], "histograms": []}`` of ``MetricResult(key, committed, attempted)``.

    ``committed`` sums each successful unit of work once; ``attempted`` adds what failed
    attempts (retried tasks) did before they failed. ``steps()`` lists each step's updates
    (a stream keeps its last ``--timeline_retention_steps``).
    """

    def __init__(self, retention_steps: int | None = None) -> None:
        self.committed = MetricUpdates()
        self.attempted = MetricUpdates()
        self._steps: collections.deque[StepMetrics] = collections.deque(maxlen=retention_steps)

    def add_step(self, step: int, committed: MetricUpdates, failed_attempts: MetricUpdates) -> None:
        self.committed = self.committed.combine(committed)
        self.attempted = self.attempted.combine(committed).combine(failed_attempts)
        if committed or failed_attempts:
            self._steps.append(StepMetrics(step, committed, failed_attempts))

    def steps(self) -> list[StepMetrics]:
        """The kept steps that updated a metric, oldest first."""
        return list(self._steps)

    def query(self, filter: MetricsFilter | None = None) -> dict[str, list[MetricResult]]:
        results: dict[str, list[MetricResult]] = {}
        for kind in MetricUpdates.KINDS:
            committed: dict[MetricKey, Any] = getattr(self.committed, kind)
            attempted: dict[MetricKey, Any] = getattr(self.attempted, kind)
            identity = _IDENTITY.get(kind)
            rows = []
            for key in sorted(attempted, key=lambda k: (k.step, k.metric.namespace, k.metric.name)):
                if not self.matches(filter, key):
                    continue
                value = committed.get(key)
                if value is None:
                    committed_result = identity if identity is not None else None
                else:
                    committed_result = _result(kind, value)
                rows.append(MetricResult(key, committed_result, _result(kind, attempted[key])))
            results[kind] = rows
        results[self.HISTOGRAMS] = []
        return results

    def snapshot(self) -> dict[str, Any]:
        return {"committed": self.committed, "attempted": self.attempted, "steps": list(self._steps)}

    def restore(self, data: dict[str, Any]) -> None:
        self.committed = data["committed"]
        self.attempted = data["attempted"]
        self._steps.clear()
        self._steps.extend(data["steps"])
