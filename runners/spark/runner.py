"""``SparkRunner``: plans a pipeline into stages and runs them on Spark, step by step.

Bounded pipelines run as batch: one step, the watermark going from -inf to +inf. Pipelines
with unbounded input (or ``--streaming``) run as a stream of steps. Either way the result
has every stage's watermark timeline (``result.watermarks()``), what captured
PCollections emitted (``result.emissions(pcoll)``), the user's metrics
(``result.metrics()``, Beam's metric results) and how each stage ran
(``result.physical_plan()``, ``runners/core/plan/physical.py``).

``run()`` waits for the end of the run unless ``--no_block_on_run``: then the run goes on
in a background thread and the result is RUNNING until it ends; ``wait_until_finish``
waits for it and ``cancel()`` stops it at a step boundary (with a checkpoint).
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from sparkbeam.errors import engine_frames_hidden, hide_engine_frames
from sparkbeam.pipeline import Pipeline
from sparkbeam.runner import PipelineResult, PipelineRunner, PipelineState
from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.elements.metrics import RunMetrics
from sparkbeam.runners.core.loop.clock import Clock, ManualClock, WallClock
from sparkbeam.runners.core.loop.history import run_history
from sparkbeam.runners.core.loop.side_input_wait import refuse_side_inputs_never_ready
from sparkbeam.runners.core.loop.steps import StepLoop
from sparkbeam.runners.core.loop.timeline import Emissions, Timeline, emissions_of
from sparkbeam.runners.core.lowering.errors import add_note
from sparkbeam.runners.core.lowering.ops import LoweredPipeline, lower
from sparkbeam.runners.core.lowering.settings import RunMode, RunSettings
from sparkbeam.runners.core.lowering.validation import check_inputs_and_outputs
from sparkbeam.runners.core.plan.physical import PhysicalPlan, plan_physical
from sparkbeam.runners.core.plan.plan import StagePlan, plan_stages
from sparkbeam.runners.spark.cluster_failures import cluster_failure
from sparkbeam.runners.spark.interrupts import stop_on_signals
from sparkbeam.runners.spark.progress import run_progress
from sparkbeam.runners.spark.spark_log import current_log

__all__ = ["SparkPipelineResult", "SparkRunner", "check_picklable"]

_LOG = logging.getLogger(__name__)


def check_picklable(plan: StagePlan) -> None:
    """Fail before Spark starts if a DoFn or CombineFn cannot be shipped to executors."""
    from pyspark import cloudpickle

    for stage in plan.stages:
        ops = [*stage.body, *([stage.head] if stage.head is not None else [])]
        for op in ops:
            for what, value in kind_of(op).shipped_parts(op):
                try:
                    cloudpickle.dumps(value)
                except Exception as error:
                    msg = (
                        f"the {what} of '{op.label}' (applied at {op.location}) cannot be pickled to "
                        f"ship it to Spark executors: {type(error).__name__}: {error}. Create "
                        "unpicklable resources (clients, connections, locks) in DoFn.setup instead"
                    )
                    raise TypeError(msg) from None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _lower(pipeline: Pipeline, settings: RunSettings) -> LoweredPipeline:
    """The pipeline's ops, each schema'd segment one SQL plan unless it cannot be one (the
    reason noted on its stage) or ``--no_sql_plans`` keeps the general path."""
    from sparkbeam.runners.core.schema.schema_segments import find_segments

    reason = None
    if settings.streaming:
        reason = "a streaming run (SQL plans run in batch only)"
    elif not settings.sql_plans:
        reason = "--no_sql_plans"
    elif not _installed("pyarrow"):
        # The plan's groups come back through Arrow; without it the general path is exact too.
        reason = "pyarrow is not installed (pip install 'sparkbeam[parquet]' for SQL plans)"
    segments = find_segments(pipeline, general_path_reason=reason)
    return lower(pipeline, substitutes=segments.substitutes, notes=segments.notes)


def _check_supported(plan: StagePlan) -> None:
    """Refuse, before Spark starts, an op the Spark backend does not run, and a text sink
    off the local and shared file systems, in batch and streaming alike (a stream would
    otherwise fail at its first step with output; the other file sinks refuse such paths
    when they are constructed)."""
    from sparkbeam.runners.spark import sinks
    from sparkbeam.runners.spark.backend import SPARK

    SPARK.check(plan)
    for stage in plan.stages:
        for sink in stage.sinks:
            sinks.check(sink)


def _check_cluster_paths(plan: StagePlan, settings: RunSettings) -> None:
    """Once Spark is up, before the first step: the checkpoint directory and the file
    sinks' folders on cluster file systems (``s3a://``, ``hdfs://``...) must be reachable
    with the session's settings, or the run is refused naming the option or transform."""
    from sparkbeam.runners.core.lowering.ops import WriteFilesThroughDriverOp
    from sparkbeam.runners.spark import files_through_driver, remote_files, sinks

    checkpoint_dir = settings.checkpoint_dir
    if checkpoint_dir and remote_files.is_remote(checkpoint_dir):
        remote_files.check_reachable(checkpoint_dir, "--checkpoint_dir")
    for stage in plan.stages:
        for op in stage.sinks:
            if isinstance(op, WriteFilesThroughDriverOp):  # WriteToFiles: its path is its folder
                remote_files.check_reachable(op.files.path, f"'{files_through_driver.user_label(op)}' (applied at {op.location})")
                continue
            if not sinks.writes_files(op):
                continue  # a Kafka sink: its brokers are checked on their own
            prefix = sinks.step_prefix(op)
            if remote_files.is_remote(prefix):
                remote_files.check_reachable(sinks.prefix_directory(prefix), f"'{op.label}' (applied at {op.location})")


def _uses_kafka(plan: StagePlan) -> bool:
    from sparkbeam.runners.core.lowering.ops import StreamReadOp, WriteKafkaOp

    return any(
        isinstance(op, WriteKafkaOp) or (isinstance(op, StreamReadOp) and op.spec.format == "kafka")
        for stage in plan.stages
        for op in [*((stage.head,) if stage.head is not None else ()), *stage.sinks]
    )


class _Execution:
    """One run of a planned pipeline: the step loop and what it holds open (the sources'
    queries, the backend, settings changed on the user's session), run in the caller's
    thread or in a background one. Cleans up once, whichever way the run ends."""

    def __init__(self, loop: StepLoop, stream_run: Any, backend: Any, cleanups: list[Callable[[], None]]) -> None:
        self.loop = loop
        self.stream_run = stream_run
        self.backend = backend
        self.cleanups = cleanups
        self.state = PipelineState.RUNNING
        self.error: BaseException | None = None
        self.seconds: float | None = None
        self.done = threading.Event()
        self._started = time.perf_counter()

    def run(self) -> None:
        """Run to the end (or to a cancel); never raises: the failure is kept in ``error``."""
        state = PipelineState.FAILED
        try:
            with self.backend.running():
                if self.stream_run is not None:
                    self.stream_run.attach(self.loop)
                self.loop.run()
                if self.loop.cancelled and self.stream_run is not None:
                    self.stream_run.checkpoint_on_stop()
                elif self.stream_run is not None:
                    self.stream_run.checkpoint_on_finish()
            state = PipelineState.CANCELLED if self.loop.cancelled else PipelineState.DONE
        except BaseException as error:  # kept for the caller: raised by run() or wait_until_finish()
            self.error = self._told(error)
        finally:
            state = self._clean_up(state)
            self.seconds = time.perf_counter() - self._started
            self.state = state
            self.done.set()

    def _told(self, error: BaseException) -> BaseException:
        """A failure of the cluster's (``cluster_failures.py``) as a short error naming the
        cause and how to resume; any other error as it is."""
        stream_run = self.stream_run
        checkpoint_dir = None if stream_run is None or stream_run.temporary else stream_run.store.root
        resume_step = None
        if checkpoint_dir is not None:
            try:
                newest = stream_run.store.newest()
            except Exception:  # the checkpoint store may be what failed: the message does without
                newest = None
            resume_step = newest["step"] if newest is not None else None
        told = cluster_failure(error, checkpoint_dir=checkpoint_dir, resume_step=resume_step)
        if told is None:
            return error
        log = current_log()
        note = log.note()
        if note is not None:
            add_note(told, note)
        if log.verbose:
            told.__cause__ = error
            return told
        told.__suppress_context__ = True
        return hide_engine_frames(told)

    def _clean_up(self, state: PipelineState) -> PipelineState:
        for cleanup in [*(() if self.stream_run is None else (self.stream_run.close,)), self.backend.close, *self.cleanups]:
            try:
                cleanup()
            except Exception as error:
                if self.error is None:
                    self.error = self._told(error)
                    state = PipelineState.FAILED
                else:
                    # The run's own error says what happened; this one, in a line (its trace at debug level).
                    _LOG.warning("cleaning up after the failed run: %s", str(error).strip().splitlines()[0][:300] if str(error).strip() else repr(error))
                    _LOG.debug("the clean-up's failure", exc_info=True)
        return state

    def start(self, name: str) -> None:
        global _EXIT_HOOK_REGISTERED
        if not _EXIT_HOOK_REGISTERED:
            # Registered after Spark's gateway registered its own exit hook (which kills the
            # JVM), so that it runs first: exit hooks run last registered, first.
            atexit.register(_cancel_background_runs)
            _EXIT_HOOK_REGISTERED = True
        _BACKGROUND_RUNS.add(self)
        threading.Thread(target=self.run, name=f"sparkbeam-run-{name}", daemon=True).start()

    def cancel(self) -> None:
        self.loop.request_stop()
        if self.stream_run is not None:
            self.stream_run.request_stop()


#: Background runs still going: cancelled cleanly (checkpoint included) if the program
#: ends without waiting for them, instead of being killed mid-step with its daemon thread.
_BACKGROUND_RUNS: weakref.WeakSet[_Execution] = weakref.WeakSet()
_EXIT_HOOK_REGISTERED = False


def _cancel_background_runs() -> None:
    for execution in list(_BACKGROUND_RUNS):
        if not execution.done.is_set():
            execution.cancel()
            execution.done.wait()


class SparkPipelineResult(PipelineResult):
    """A run: its state, stage plan, watermark timeline and captured emissions.

    While the run goes on (``--no_block_on_run``), ``state`` is RUNNING and the timeline
    and emissions are those of the steps run so far.
    """

    def __init__(self, plan: StagePlan, execution: _Execution) -> None:
        super().__init__(PipelineState.RUNNING)
        self.plan = plan
        self._execution = execution

    @property
    def state(self) -> PipelineState:
        return self._execution.state

    @property
    def seconds(self) -> float | None:
        """How long the run took (None while it runs)."""
        return self._execution.seconds

    def wait_until_finish(self, duration: Any = None) -> PipelineState:
        """Wait for the run to end, at most ``duration`` milliseconds (None or 0: no limit,
        as Beam's); return its state, RUNNING if it is still going. A failed run raises its
        error."""
        if duration is not None and (isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0):
            msg = f"wait_until_finish: duration is a number of milliseconds, got {duration!r}"
            raise ValueError(msg)
        self._execution.done.wait(duration / 1000 if duration else None)
        error = self._execution.error
        if error is not None:
            # A failure of the user's code shows their frames, not the background thread's.
            raise error.with_traceback(None) if engine_frames_hidden(error) else error
        return self.state

    def cancel(self) -> PipelineState:
        """Stop the run at the next step boundary, write a checkpoint if the run has a
        ``--checkpoint_dir``, and return the final state: CANCELLED, or the state it had
        already reached (a batch run is one step, which is not interrupted)."""
        if not self._execution.done.is_set():
            self._execution.cancel()
            self._execution.done.wait()
        return self.state

    def physical_plan(self) -> PhysicalPlan:
        """How each stage runs: its strategy (a fused map, a lifted grouping, a run on the
        driver...), why, on which steps something else runs instead, and why the other
        strategies were declined. ``print(result.physical_plan())`` lists it."""
        return self._execution.loop.physical

    def watermarks(self) -> Timeline:
        """Every stage's input and output watermark per step, with what holds it back."""
        timeline = self._execution.loop.history.timeline([stage.name for stage in self.plan.stages])
        timeline.notes.update(self.plan.stage_notes())
        return timeline

    def emissions(self, pcoll: Any) -> Emissions:
        """What a captured PCollection emitted: value, timestamp, window, pane, step, time."""
        labels = {info.id: info.label for info in self.plan.lowered.pcollections}
        return emissions_of(self.plan, self._execution.loop.history.emitted(labels), pcoll)

    def plot_watermarks(self, panes: Any = None, **kwargs: Any) -> Any:
        """A matplotlib figure of the watermark timeline (see ``sparkbeam.plotting``)."""
        from sparkbeam.plotting import plot_watermarks

        return plot_watermarks(self, panes, **kwargs)

    def metrics(self) -> RunMetrics:
        """The user's metrics (``sparkbeam.metrics.Metrics``), as Beam's result has them:
        ``result.metrics().query(MetricsFilter().with_name("lines"))["counters"]``. Each
        successful task is committed once; ``attempted`` adds what failed attempts did.
        While the run goes on, the steps run so far."""
        return self._execution.loop.metrics


def _files_elsewhere(settings: RunSettings) -> bool:
    """The run's files are those of a Spark Connect server on another machine, which this
    process cannot check (the server matches the reads, and makes the outputs' folders)."""
    from sparkbeam.runners.spark.connect import server_files
    from sparkbeam.runners.spark.connect.session import connect_target

    target = connect_target(settings)
    return target is not None and server_files.server_is_elsewhere(target)


class SparkRunner(PipelineRunner):
    """Runs pipelines on Spark: the embedded ``local[*]`` by default, any master with ``--spark_master``."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock

    def run_pipeline(self, pipeline: Any, options: Any) -> Any:
        if not isinstance(pipeline, Pipeline):
            # apache_beam pipelines are the Beam front end's (runners/beam/runner.py, whose
            # SparkRunner runs them and hands sparkbeam's own here): this backend knows no front end.
            msg = (
                f"the Spark backend's runner runs sparkbeam pipelines, not {pipeline!r}: run an apache_beam "
                "pipeline with --runner=sparkbeam.SparkRunner (with apache-beam installed: pip install 'sparkbeam[beam]')"
            )
            raise TypeError(msg)
        settings = RunSettings.from_options(options)
        if not _files_elsewhere(settings):
            # Before Spark starts: reads that match nothing, outputs that cannot be written.
            check_inputs_and_outputs(pipeline)
        return self.run_lowered(_lower(pipeline, settings), settings)

    def run_lowered(
        self,
        lowered: LoweredPipeline,
        settings: RunSettings,
        result_type: type[SparkPipelineResult] | None = None,
    ) -> SparkPipelineResult:
        """Plan and run lowered ops (from sparkbeam's SDK or from Beam's graph) with the
        run's settings (``RunSettings.from_options``)."""
        from sparkbeam.runners.spark.connect.session import connect_target

        target = connect_target(settings)
        if target is not None:
            # No RDDs, no SparkContext: the DataFrame-only backend (runners/spark/connect).
            from sparkbeam.runners.spark.connect.runner import run_on_connect

            return run_on_connect(lowered, settings, target, result_type or SparkPipelineResult, self.clock)
        plan = plan_stages(lowered)
        _LOG.debug("stage plan:\n%s", plan.describe())
        mode = settings.mode(unbounded_input=any(not pc.is_bounded for pc in lowered.pcollections))
        streaming = mode is RunMode.STREAMING
        _check_supported(plan)
        refuse_side_inputs_never_ready(plan, sources_end=settings.available_now and not settings.keep_open)
        check_picklable(plan)
        from sparkbeam.runners.spark.backend import SparkBackend
        from sparkbeam.runners.spark.dependencies import (
            check_dependency_options,
            install_for_executors,
        )
        from sparkbeam.runners.spark.session import executors_share_this_interpreter, get_session
        from sparkbeam.runners.spark.spark_log import choose_log

        check_dependency_options(settings.requirements_file, settings.setup_file)
        real_sources = any(kind_of(op).endless for op in lowered.ops)
        if real_sources:
            from sparkbeam.runners.spark.streaming import check_before_start

            check_before_start(plan, settings)
        spark, session_settings = get_session(
            settings.spark_master, list(settings.spark_conf), settings.job_name, log=choose_log(settings)
        )
        cleanups: list[Callable[[], None]] = [session_settings.restore]
        # hdfs://, s3a://, gs://... through Hadoop's API while this session is up; file://
        # URLs too with --file_urls_through_hadoop (for this run only)
        from sparkbeam.runners.spark import hadoop_filesystem

        hadoop_filesystem.serve_file_urls(settings.file_urls_through_hadoop)
        cleanups.append(lambda: hadoop_filesystem.serve_file_urls(False))
        backend = None
        try:
            _check_cluster_paths(plan, settings)
            context = spark.sparkContext
            cleanups.append(
                install_for_executors(
                    context,
                    settings.requirements_file,
                    settings.setup_file,
                    same_machine=executors_share_this_interpreter(context),
                )
            )
            backend = SparkBackend(
                spark,
                num_partitions=settings.state_partitions,
                overlapping_window_rule=settings.overlapping_window_rule,
            )
            if _uses_kafka(plan):
                from sparkbeam.runners.spark.kafka import check_before_first_step

                check_before_first_step(spark, plan)
            scripted_time = any(kind_of(op).scripts_processing_time for op in lowered.ops)
            clock = self.clock or (ManualClock() if scripted_time else WallClock())
            stream_run = None
            if real_sources:
                from sparkbeam.runners.spark.streaming import StreamRun

                stream_run = StreamRun(spark, plan, backend, settings)
                clock = stream_run.clock
            history = run_history(lowered, settings, streaming=streaming)
            progress = run_progress(settings, backend, stream_run, plan, batch=not streaming)
            physical = plan_physical(plan, mode, backend.capabilities())
            _LOG.debug("%s", physical)  # formatted only when debug logging is on
            loop = StepLoop(
                plan,
                backend,
                clock,
                batch=not streaming,
                max_steps=settings.max_steps,
                hooks=progress or stream_run,
                on_record=progress.on_record if progress is not None else None,
                history=history,
                physical=physical,
            )
            if progress is not None:
                cleanups.append(progress.close)
        except BaseException:
            if backend is not None:
                backend.close()
            for cleanup in cleanups:
                cleanup()
            raise
        execution = _Execution(loop, stream_run, backend, cleanups)
        result = (result_type or SparkPipelineResult)(plan, execution)
        if not settings.block_on_run:
            execution.start(settings.job_name or "pipeline")
            return result
        with stop_on_signals(execution):
            execution.run()
        if execution.error is not None:
            raise execution.error
        return result
