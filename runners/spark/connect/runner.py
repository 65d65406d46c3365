"""A run through Spark Connect: the same plan, physical plan and step loop as a classic
run, over ``ConnectBackend``. ``SparkRunner.run_lowered`` hands a run here when
``session.connect_target`` names a server or session; both front ends arrive there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.loop.clock import Clock, ManualClock, WallClock
from sparkbeam.runners.core.loop.history import run_history
from sparkbeam.runners.core.loop.side_input_wait import refuse_side_inputs_never_ready
from sparkbeam.runners.core.loop.steps import StepLoop
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import LoweredPipeline
from sparkbeam.runners.core.lowering.settings import RunMode, RunSettings
from sparkbeam.runners.core.plan.physical import plan_physical
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.runners.spark.connect import server_files
from sparkbeam.runners.spark.connect.backend import CONNECT, ConnectBackend
from sparkbeam.runners.spark.connect.kafka import check_on_server
from sparkbeam.runners.spark.connect.refusals import refuse_what_connect_cannot_run
from sparkbeam.runners.spark.connect.session import ConnectTarget, connect_session
from sparkbeam.runners.spark.dependencies import check_dependency_options, ship_to_connect

if TYPE_CHECKING:
    from sparkbeam.runners.spark.runner import SparkPipelineResult

__all__ = ["run_on_connect"]


def run_on_connect(
    lowered: LoweredPipeline,
    settings: RunSettings,
    target: ConnectTarget,
    result_type: type[SparkPipelineResult],
    clock: Clock | None = None,
) -> Any:
    """Plan ``lowered``, refuse what Connect does not run yet, reach the server, and run
    the step loop on it (see ``SparkRunner.run_lowered`` for the result)."""
    from sparkbeam.runners.spark.interrupts import stop_on_signals
    from sparkbeam.runners.spark.runner import _Execution, check_picklable

    plan = plan_stages(lowered)
    mode = settings.mode(unbounded_input=any(not pc.is_bounded for pc in lowered.pcollections))
    streaming = mode is RunMode.STREAMING
    refuse_what_connect_cannot_run(plan, mode, settings)
    refuse_side_inputs_never_ready(plan, sources_end=settings.available_now and not settings.keep_open)
    check_picklable(plan)
    # Before the server is reached: a stage the backend cannot run is refused, named.
    physical = plan_physical(plan, mode, CONNECT.capabilities())
    real_sources = any(kind_of(op).endless for op in lowered.ops)
    elsewhere = real_sources and server_files.server_is_elsewhere(target)
    if elsewhere:
        _check_server_paths(target.named_by, settings)
    elif real_sources:
        from sparkbeam.runners.spark.streaming import check_before_start

        # A checkpoint of another pipeline or key, held by a live run, or outputs it did
        # not write: refused before the server is reached, as on a classic session. (Of a
        # server elsewhere, under the lease once it is reached: StreamRun.attach.)
        check_before_start(plan, settings)
    check_dependency_options(settings.requirements_file, settings.setup_file)  # a missing file: before the server
    session = connect_session(target)
    # Kafka's brokers, topics and the server's connector: checked on the server, as a
    # classic run checks them from its driver, before anything is started.
    check_on_server(session, plan)
    ship_to_connect(session, settings.requirements_file, settings.setup_file)
    cleanups = []
    if settings.spark_conf:
        from sparkbeam.runners.spark.session import apply_runtime_settings, parse_spark_conf

        # For this run, on the server's session: put back when the run ends.
        cleanups.append(apply_runtime_settings(session, parse_spark_conf(settings.spark_conf), connect=True).restore)
    backend = ConnectBackend(
        session, num_partitions=settings.state_partitions, overlapping_window_rule=settings.overlapping_window_rule
    )
    history = run_history(lowered, settings, streaming=streaming)
    stream_run = None
    if real_sources:
        from sparkbeam.runners.spark.connect.stream_intake import ConnectStreamRun

        # Real sources: their queries on the server, their batches taken step by step.
        try:
            files = None
            if elsewhere or not server_files.server_sees_client_files(session):
                # The stream's directories are the server's files: reached through it.
                _check_server_paths(target.named_by, settings)
                files = server_files.ServerFileSystem(session)
                cleanups.extend(server_files.serve_stream_directories(files, plan, settings.checkpoint_dir))
            stream_run = ConnectStreamRun(session, plan, backend, settings, files=files)
        except BaseException:
            for cleanup in cleanups:  # no run to clean up after: the session as it was
                cleanup()
            raise
        clock = stream_run.clock
    if clock is None:
        # A TestStream scripts processing time; any other stream (of bounded sources, with
        # --streaming) steps on the wall clock, as on a classic session.
        scripted = any(kind_of(op).scripts_processing_time for op in lowered.ops)
        clock = ManualClock() if scripted or not streaming else WallClock()
    loop = StepLoop(
        plan,
        backend,
        clock,
        batch=not streaming,
        max_steps=settings.max_steps,
        hooks=stream_run,
        history=history,
        physical=physical,
    )
    execution = _Execution(loop, stream_run, backend, cleanups)
    result = result_type(plan, execution)
    if not settings.block_on_run:
        execution.start(settings.job_name or "pipeline")
        return result
    with stop_on_signals(execution):
        execution.run()
    if execution.error is not None:
        raise execution.error
    return result



def _check_server_paths(named_by: str, settings: RunSettings) -> None:
    """A stream's directory on a server elsewhere is named as the server sees it: a relative
    one would be made absolute in the client's working directory, which is not the server's."""
    given = settings.checkpoint_dir
    if given is not None and "://" not in given and not given.startswith("/"):
        msg = (
            f"--checkpoint_dir={given}: the Spark Connect server ({named_by}) is on another machine, whose files the "
            "stream's checkpoints are; give the directory as an absolute path as the server sees it (such as "
            "/dbfs/... or /Volumes/... on Databricks)"
        )
        raise UnsupportedError(msg)
