"""What SIGINT and SIGTERM do to a run in the main thread, with a stand-in run (no Spark):
the first stops a stream at a step boundary, the second abandons the step (its Spark jobs
cancelled), the third exits at once; the program exits with 128 + the signal's number
after one line on how to resume. ``test_stream_recovery.py`` does it to a real stream."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import pytest

from sparkbeam.runner import PipelineState
from sparkbeam.runners.spark import interrupts
from sparkbeam.runners.spark.interrupts import stop_on_signals


class FakeStore:
    def __init__(self, root: str, newest_step: int | None) -> None:
        self.root = root
        self._newest = newest_step

    def newest(self):
        return None if self._newest is None else {"step": self._newest}


class FakeStreamRun:
    def __init__(self, root: str = "/data/ck", newest_step: int | None = None, temporary: bool = False) -> None:
        self.store = FakeStore(root, newest_step)
        self.temporary = temporary


class FakeLoop:
    def __init__(self, batch: bool) -> None:
        self.batch = batch
        self.step = 0


class FakeBackend:
    job_group = "sparkbeam-test"

    def __init__(self) -> None:
        self.cancelled_groups: list[str] = []

    def running(self):
        return contextlib.nullcontext()

    def cancel_jobs(self) -> None:
        self.cancelled_groups.append(self.job_group)


class FakeExecution:
    """A run of ``steps`` steps that sends its own process the next of ``signals`` as each
    step starts, and stops at a step boundary once cancelled (or fails once its Spark jobs
    are cancelled)."""

    def __init__(self, *, batch=False, steps=50, signals=(), stream_run=None) -> None:
        self.loop = FakeLoop(batch)
        self.backend = FakeBackend()
        self.stream_run = stream_run
        self.steps = steps
        self.signals = list(signals)
        self.cancelled = threading.Event()
        self.state = PipelineState.RUNNING

    def cancel(self) -> None:
        self.cancelled.set()

    def run(self) -> None:
        for _ in range(self.steps):
            if self.signals:
                os.kill(os.getpid(), self.signals.pop(0))
            self.cancelled.wait(0.05)  # a step; the handler's thread sets it meanwhile
            if self.backend.cancelled_groups:
                self.state = PipelineState.FAILED  # Spark reports the cancelled jobs
                return
            self.loop.step += 1
            if self.cancelled.is_set() and not self.loop.batch:
                if self.stream_run is not None:
                    self.stream_run.store._newest = self.loop.step
                self.state = PipelineState.CANCELLED
                return
        self.state = PipelineState.DONE


def run_and_exit(execution) -> tuple[int, PipelineState]:
    with pytest.raises(SystemExit) as exit_, stop_on_signals(execution):
        execution.run()
    return exit_.value.code, execution.state


def test_sigint_stops_a_stream_at_a_step_boundary_with_a_checkpoint(capsys):
    execution = FakeExecution(signals=[signal.SIGINT], stream_run=FakeStreamRun())
    code, state = run_and_exit(execution)
    assert (code, state) == (130, PipelineState.CANCELLED)
    assert execution.backend.cancelled_groups == []  # the step was finished, not abandoned
    assert capsys.readouterr().err.splitlines() == [
        "sparkbeam: stopped on SIGINT after step 0, checkpoint written; "
        "run again with --checkpoint_dir=/data/ck to resume at step 1"
    ]


def test_sigterm_exits_143_and_a_stream_without_checkpoint_dir_says_nothing_is_kept(capsys):
    execution = FakeExecution(signals=[signal.SIGTERM], stream_run=FakeStreamRun(temporary=True))
    assert run_and_exit(execution) == (143, PipelineState.CANCELLED)
    assert capsys.readouterr().err == (
        "sparkbeam: stopped on SIGTERM, after step 0; without --checkpoint_dir nothing is kept, "
        "so a new run starts from the beginning\n"
    )


def test_a_second_signal_abandons_the_step_and_cancels_its_spark_jobs(capsys, monkeypatch):
    execution = FakeExecution(signals=[signal.SIGINT, signal.SIGINT], stream_run=FakeStreamRun(newest_step=9))
    execution.cancel = lambda: None  # the step in progress does not end by itself
    code, state = run_and_exit(execution)
    assert (code, state) == (130, PipelineState.FAILED)
    assert execution.backend.cancelled_groups == ["sparkbeam-test"]
    assert capsys.readouterr().err == (
        "sparkbeam: stopped on SIGINT, step 1 abandoned; run again with --checkpoint_dir=/data/ck "
        "to resume from the checkpoint of step 9, replaying the journaled steps after it\n"
    )


def test_a_third_signal_exits_at_once(monkeypatch):
    exits = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    execution = FakeExecution(stream_run=FakeStreamRun())
    handler = interrupts._Interrupts(execution)
    for _ in range(3):
        handler.handle(signal.SIGTERM, None)
    assert exits == [143]


def test_a_batch_run_is_cancelled_by_the_first_signal(capsys):
    execution = FakeExecution(batch=True, signals=[signal.SIGINT])
    assert run_and_exit(execution) == (130, PipelineState.FAILED)
    assert execution.backend.cancelled_groups == ["sparkbeam-test"]
    assert capsys.readouterr().err == "sparkbeam: batch run cancelled on SIGINT; run it again to start over\n"


def test_a_run_that_fails_on_its_own_while_stopping_keeps_its_error():
    execution = FakeExecution(signals=[signal.SIGINT], stream_run=FakeStreamRun())

    def fail_at_the_boundary():
        execution.state = PipelineState.FAILED  # e.g. the checkpoint could not be written

    execution.cancel = fail_at_the_boundary
    with stop_on_signals(execution):  # no SystemExit: the runner raises the run's error
        os.kill(os.getpid(), signal.SIGINT)
        threading.Event().wait(0.2)
    assert execution.state == PipelineState.FAILED


def test_handlers_are_restored_after_the_run():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stop_on_signals(FakeExecution(steps=1)):
        assert signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_run_outside_the_main_thread_is_left_to_cancel():
    seen = []

    def in_thread():
        with stop_on_signals(FakeExecution(steps=1)):
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert seen == [before]
