"""``SparkRunner`` for apache_beam pipelines: ``--runner=sparkbeam.SparkRunner``.

Beam resolves a dotted runner name by importing the module and instantiating the
attribute (``apache_beam.runners.runner.create_runner``); ``beam.Pipeline(runner=...)``
requires an instance of Beam's ``PipelineRunner``. So ``sparkbeam.SparkRunner`` is, when
apache_beam is installed, this class: sparkbeam's Spark runner and a Beam
``PipelineRunner`` at once. Given a sparkbeam pipeline it runs it as always; given a Beam
pipeline it translates Beam's graph (``translate.py``) into the same ops and runs them on
the same engine, so the result has every stage's watermarks (``result.watermarks()``),
stages named by Beam's labels.

While the pipeline is built it records, for each transform's label, the user's file and
line that applied it, so errors name the user's code.
"""

from __future__ import annotations

import sys
from typing import Any

from apache_beam.options.pipeline_options import TypeOptions
from apache_beam.pipeline import Pipeline as BeamPipeline
from apache_beam.runners.pipeline_utils import group_by_key_input_visitor
from apache_beam.runners.runner import PipelineRunner as BeamPipelineRunner

from sparkbeam.runners.beam.capture import captured_in
from sparkbeam.runners.beam.kafka import is_kafka, substitute
from sparkbeam.runners.beam.options import SparkBeamOptions, sparkbeam_settings
from sparkbeam.runners.beam.translate import translate
from sparkbeam.runners.spark import runner as spark_runner

__all__ = ["BeamPipelineResult", "SparkBeamOptions", "SparkRunner", "run_beam_pipeline"]

_NOT_USER_CODE = ("sparkbeam", "apache_beam", "importlib", "contextlib", "functools")


def _user_location() -> str:
    """The innermost stack frame outside sparkbeam, apache_beam and Python's machinery."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        # Beam's own test modules (apache_beam.*_test) are user code to the runner.
        if module.split(".", 1)[0] not in _NOT_USER_CODE or module.endswith("_test"):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def _pipeline_of(pvalueish: Any) -> Any:
    if isinstance(pvalueish, (tuple, list)):
        pvalueish = next(iter(pvalueish), None)
    elif isinstance(pvalueish, dict):
        pvalueish = next(iter(pvalueish.values()), None)
    return getattr(pvalueish, "pipeline", None)


class BeamPipelineResult(spark_runner.SparkPipelineResult):
    """The result of a Beam pipeline's run: Beam's result API and sparkbeam's timeline."""

    def metrics(self) -> Any:
        """Beam's metrics (``Metrics.counter``, ``distribution``, ``gauge``, ``string_set``)
        as Beam's result types; queried with Beam's ``MetricsFilter``."""
        from sparkbeam.runners.beam.metrics import BeamMetricResults

        return BeamMetricResults(super().metrics())


class SparkRunner(spark_runner.SparkRunner, BeamPipelineRunner):
    """Runs sparkbeam pipelines and apache_beam pipelines on Spark.

    >>> import apache_beam as beam, sparkbeam
    >>> with beam.Pipeline(runner=sparkbeam.SparkRunner()) as p:   # doctest: +SKIP
    ...     p | beam.Create([1, 2, 3]) | beam.Map(print)
    """

    def __init__(self, clock: Any = None) -> None:
        super().__init__(clock)
        #: Beam transform label -> the user's file:line that applied it
        self.locations: dict[str, str] = {}

    def apply(self, transform: Any, input: Any, options: Any) -> Any:
        pipeline = _pipeline_of(input)
        stack = getattr(pipeline, "transforms_stack", None)
        if stack:
            self.locations[stack[-1].full_label] = _user_location()
        if is_kafka(transform):
            # Beam would ask a Java expansion service to expand it: sparkbeam reads and writes
            # Kafka with Spark's connector instead (kafka.py), checked here, before the run.
            label = stack[-1].full_label if stack else type(transform).__name__
            return substitute(transform, input, f"'{label}' (applied at {self.locations.get(label, _user_location())})")
        return BeamPipelineRunner.apply(self, transform, input, options)

    def run_pipeline(self, pipeline: Any, options: Any) -> Any:
        if isinstance(pipeline, BeamPipeline):
            return run_beam_pipeline(self, pipeline, options)
        return super().run_pipeline(pipeline, options)  # a sparkbeam pipeline: the Spark backend's runner


def run_beam_pipeline(runner: spark_runner.SparkRunner, pipeline: Any, options: Any) -> BeamPipelineResult:
    """Translate a Beam pipeline and run it with ``runner`` (before Spark starts, anything
    that cannot be translated raises NotImplementedError naming the transform)."""
    if not isinstance(pipeline, BeamPipeline):
        msg = f"sparkbeam's SparkRunner runs sparkbeam or apache_beam pipelines, not {pipeline!r}"
        raise TypeError(msg)
    options = options if options is not None else pipeline.options
    settings = sparkbeam_settings(options)
    deterministic = not options.view_as(TypeOptions).allow_non_deterministic_key_coders
    # As Beam's runners do: a GroupByKey's input is typed as (key, value), which picks its coders.
    pipeline.visit(group_by_key_input_visitor(deterministic))
    captured, logs = captured_in(pipeline)
    lowered = translate(
        pipeline,
        locations=getattr(runner, "locations", {}),
        captured=captured,
        capture_logs=logs,
        deterministic_keys=deterministic,
        drain=bool(options.view_as(SparkBeamOptions).drain),
        streaming=settings.streaming,
    )
    result = runner.run_lowered(lowered, settings, BeamPipelineResult)
    assert isinstance(result, BeamPipelineResult)  # run_lowered builds the class it is given
    return result
