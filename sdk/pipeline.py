"""``Pipeline``: owns the graph of applied transforms that a user builds with ``|``.

The graph is frozen description: applying a transform records an ``AppliedTransform``
node (label, inputs, outputs, the user's file and line) and expands composites into
their parts. A runner receives the finished pipeline and never changes it.

>>> with Pipeline() as p:                      # doctest: +SKIP
...     p | Create([1, 2, 3]) | Map(print)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from sparkbeam import element_types, pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.errors import (
    PipelineConstructionError,
    UserLocation,
    caller_location,
    engine_frames_hidden,
)
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.ptransform import PTransform
from sparkbeam.runner import PipelineResult, PipelineRunner, create_runner

__all__ = ["AppliedTransform", "Pipeline", "capture"]


@attrs.define(eq=False, repr=False)
class AppliedTransform:
    """One application of a transform: a node of the pipeline graph."""

    full_label: str
    transform: PTransform | None
    inputs: tuple[pvalue.PValue, ...]
    parent: AppliedTransform | None
    location: UserLocation
    outputs: dict[str | None, pvalue.PValue] = attrs.field(factory=dict)
    parts: list[AppliedTransform] = attrs.field(factory=list)
    side_inputs: tuple[pvalue.AsSideInput, ...] = ()

    @property
    def is_primitive(self) -> bool:
        return self.transform is not None and self.transform.is_primitive

    @property
    def main_output(self) -> pvalue.PValue:
        if None in self.outputs:
            return self.outputs[None]
        return next(iter(self.outputs.values()))

    def walk(self) -> Iterator[AppliedTransform]:
        """This node and its descendants, parents before children, in application order."""
        yield self
        for part in self.parts:
            yield from part.walk()

    def __repr__(self) -> str:
        return f"<AppliedTransform {self.full_label!r} at {self.location}>"


class Pipeline:
    """A pipeline: build it with ``|``, run it with ``run()`` or by leaving a ``with`` block."""

    def __init__(
        self,
        runner: str | PipelineRunner | None = None,
        options: PipelineOptions | None = None,
        argv: list[str] | None = None,
    ) -> None:
        if options is not None and argv is not None:
            msg = "Pipeline takes options= or argv=, not both"
            raise ValueError(msg)
        if options is None:
            options = PipelineOptions(argv or [])
        elif not isinstance(options, PipelineOptions):
            msg = f"Pipeline options must be a PipelineOptions, not {options!r}"
            raise TypeError(msg)
        if options.runtime_type_check or options.performance_runtime_type_check:
            flag = "runtime_type_check" if options.runtime_type_check else "performance_runtime_type_check"
            msg = (
                f"--{flag} is not supported by sparkbeam: element types are checked when the "
                "pipeline is built (--pipeline_type_check, on by default), not while it runs"
            )
            raise NotImplementedError(msg)
        self._options = options
        if runner is None:
            runner = options.get_all_options()["runner"]
        self.runner = runner
        self.root = AppliedTransform("", None, (), None, caller_location())
        self._stack = [self.root]
        self._labels: dict[str, AppliedTransform] = {}
        self._result: PipelineResult | None = None
        self.captured: list[pvalue.PCollection] = []
        #: where a captured PCollection's full history of emissions goes, by id() of its handle
        self.capture_logs: dict[int, str] = {}

    @property
    def options(self) -> PipelineOptions:
        return self._options

    # -- building ---------------------------------------------------------------
    def __or__(self, transform: Any) -> Any:
        """``pipeline | transform``: a root transform, applied to the pipeline's begin (as
        ``pcoll | transform`` is applied by the PCollection)."""
        if not isinstance(transform, PTransform):
            return NotImplemented  # the right operand's __ror__ may know the pipeline
        return self.apply(transform, pvalue.PBegin(self))

    def apply(self, transform: Any, pvalueish: Any = None, label: str | None = None) -> Any:
        if not isinstance(transform, PTransform):
            msg = (
                f"cannot apply {transform!r}: only PTransforms can be applied "
                "(wrap a function with beam.Map or beam.ParDo)"
            )
            raise TypeError(msg)
        if pvalueish is None:
            pvalueish = pvalue.PBegin(self)
        if label is not None:
            transform = label >> transform
        parent = self._stack[-1]
        full_label = f"{parent.full_label}/{transform.label}" if parent.full_label else transform.label
        location = caller_location()
        if full_label in self._labels:
            first = self._labels[full_label]
            msg = (
                f"a transform labelled '{full_label}' already exists (applied at {first.location}); "
                f"the one applied at {location} needs another label: 'Name' >> transform"
            )
            raise PipelineConstructionError(msg)
        inputs = tuple(_flatten_inputs(pvalueish))
        for pv in inputs:
            if pv.pipeline is not self:
                msg = f"'{full_label}' (at {location}): its input {pv!r} belongs to another pipeline"
                raise PipelineConstructionError(msg)
        node = AppliedTransform(full_label, transform, inputs, parent, location)
        self._labels[full_label] = node
        parent.parts.append(node)
        self._stack.append(node)
        type_check = self._options.pipeline_type_check
        try:
            if type_check:
                element_types.check_input_types(node, transform, pvalueish)
            result = transform.expand(pvalueish)
        finally:
            self._stack.pop()
        for tag, pv in _output_items(result):
            if isinstance(pv, (pvalue.PCollection, pvalue.PDone)) and pv.producer is None:
                pv.producer = node
                if isinstance(pv, pvalue.PCollection) and pv.tag is None:
                    pv.tag = tag
            node.outputs[tag] = pv
        if type_check:
            element_types.set_output_types(node, transform, result)
        return result

    def current_transform(self) -> AppliedTransform:
        """The transform being expanded (for error messages that name it)."""
        return self._stack[-1]

    # -- running -----------------------------------------------------------------
    def run(self, test_runner_api: Any = None) -> PipelineResult:
        runner = create_runner(self.runner)
        try:
            self._result = runner.run_pipeline(self, self._options)
        except Exception as error:
            if not engine_frames_hidden(error):
                raise
            failure = error  # your code's, raised on Spark: shown without the engine's frames
        else:
            return self._result
        raise failure.with_traceback(None)  # your code failed on Spark: the notes below say where

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.run().wait_until_finish()

    # -- inspecting ---------------------------------------------------------------
    def transforms(self) -> Iterator[AppliedTransform]:
        """Every applied transform, composites and primitives, in application order."""
        for part in self.root.parts:
            yield from part.walk()

    def primitives(self) -> list[AppliedTransform]:
        return [node for node in self.transforms() if node.is_primitive]

    def __repr__(self) -> str:
        return f"<Pipeline with {len(self._labels)} transforms>"


def _flatten_inputs(pvalueish: Any) -> Iterator[pvalue.PValue]:
    if isinstance(pvalueish, pvalue.PBegin):
        return
    if isinstance(pvalueish, pvalue.PValue):
        yield pvalueish
    elif isinstance(pvalueish, pvalue.DoOutputsTuple):
        yield from pvalueish
    elif isinstance(pvalueish, dict):
        for value in pvalueish.values():
            yield from _flatten_inputs(value)
    elif isinstance(pvalueish, (list, tuple)):
        for value in pvalueish:
            yield from _flatten_inputs(value)


def _output_items(result: Any) -> Iterator[tuple[str | None, Any]]:
    if isinstance(result, pvalue.PValue):
        yield None, result
    elif isinstance(result, pvalue.DoOutputsTuple):
        yield from result._outputs.items()
    elif isinstance(result, dict):
        for key, value in result.items():
            if isinstance(value, pvalue.PValue):
                yield str(key), value
    elif isinstance(result, (list, tuple)):
        for index, value in enumerate(result):
            if isinstance(value, pvalue.PValue):
                yield str(index), value


#: ``capture`` for the PCollections of another SDK's pipeline, by the top-level package of the
#: PCollection's type, installed by the front end that runs them (``runners/beam/capture.py``
#: installs apache_beam's), so that the SDK names no runner
_FOREIGN_CAPTURES: dict[str, Callable[[Any, str | os.PathLike[str] | None], Any]] = {}


def register_capture(package: str, capture_fn: Callable[[Any, str | os.PathLike[str] | None], Any]) -> None:
    """Make ``capture`` hand the PCollections whose type comes from ``package`` (another
    SDK's, e.g. ``"apache_beam"``) to ``capture_fn``; for a front end, once, when it loads."""
    _FOREIGN_CAPTURES[package] = capture_fn


def capture(pcoll: pvalue.PCollection, log: str | os.PathLike[str] | None = None) -> pvalue.PCollection:
    """Record every element ``pcoll`` emits, with its timestamp, window, pane and the step
    that emitted it; read them after the run with ``result.emissions(pcoll)``.

    Returns ``pcoll`` so it chains: ``totals = sparkbeam.capture(pcoll | CombinePerKey(sum))``.

    A stream keeps the emissions of its last ``--timeline_retention_steps`` steps in memory;
    ``log=path`` also writes every emission to ``path`` as a JSON line, the lines of each
    step appended and flushed as the step ends, so the full history survives (see
    ``sparkbeam.runners.core.loop.history`` for the fields). The file is this run's: a run that
    starts afresh empties it, and one that resumes from a checkpoint cuts it back to what
    that checkpoint had written before it replays the steps after it, so each emission is
    in it once.
    """
    package = type(pcoll).__module__.partition(".")[0]
    if package != "sparkbeam":
        foreign = _FOREIGN_CAPTURES.get(package)
        if foreign is not None:  # e.g. an apache_beam pipeline run with --runner=sparkbeam.SparkRunner
            return foreign(pcoll, log)
        if package == "apache_beam":
            msg = (
                f"capture({pcoll!r}): an apache_beam PCollection is captured by sparkbeam's Beam front "
                "end, which is not loaded: make the pipeline with --runner=sparkbeam.SparkRunner "
                "(or runner=sparkbeam.SparkRunner()) before applying capture"
            )
            raise TypeError(msg)
    if not isinstance(pcoll, pvalue.PCollection):
        msg = f"capture takes a PCollection, not {pcoll!r}"
        raise TypeError(msg)
    pipeline = pcoll.pipeline
    if log is not None:
        if not isinstance(log, (str, os.PathLike)) or not os.fspath(log):
            msg = f"capture({pcoll.label}): log must be a file path, got {log!r}"
            raise TypeError(msg)
        path = os.path.abspath(os.fspath(log))
        given = pipeline.capture_logs.get(id(pcoll))
        if given is not None and given != path:
            msg = f"capture({pcoll.label}): already captured with log={given!r}; one log per PCollection"
            raise ValueError(msg)
        for other in pipeline.captured:
            if other is not pcoll and pipeline.capture_logs.get(id(other)) == path:
                msg = f"capture({pcoll.label}): log={path!r} is already the log of {other.label}; give each its own file"
                raise ValueError(msg)
        pipeline.capture_logs[id(pcoll)] = path
    if pcoll not in pipeline.captured:
        pipeline.captured.append(pcoll)
    return pcoll


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.pipeline")
