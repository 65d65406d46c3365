"""Ctrl-C and SIGTERM during a run: a clean stop in seconds, one line on how to resume.

While a run goes on in the main thread, the first SIGINT or SIGTERM stops a stream at the
end of the step in progress, as ``cancel()`` does: the sources' queries stop, a checkpoint
is written (with ``--checkpoint_dir``), and the program exits with 130 (SIGINT) or 143
(SIGTERM) after one line saying how to resume. A second signal abandons the step in
progress (its Spark jobs are cancelled): the checkpoint before it and the step journal
resume it exactly, as after a crash. A third exits at once. A batch run is one step: the
first signal cancels its jobs.

Spark's JVM runs in a process session of its own (``session.py``), so a terminal's Ctrl-C
and a SIGTERM to the driver's process group reach the driver only: the executors finish
the step instead of dying under it. Nothing of this applies to a run in a background
thread (``--no_block_on_run``), which ``cancel()`` stops.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["stop_on_signals"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Interrupts:
    """The signals a run received, and what they asked for."""

    def __init__(self, execution: Any) -> None:
        self.execution = execution
        self.received: list[int] = []
        self.abandoned = False

    def handle(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        count = len(self.received)
        if count >= 3:
            os._exit(128 + self.received[0])
        batch = self.execution.loop.batch
        if count == 1 and not batch:
            # A thread of its own: a handler must not take locks the interrupted code may hold.
            threading.Thread(target=self.execution.cancel, name="sparkbeam-stop", daemon=True).start()
        else:
            self.abandoned = True
            threading.Thread(target=self._abandon, name="sparkbeam-abandon", daemon=True).start()

    def _abandon(self) -> None:
        self.execution.cancel()
        with contextlib.suppress(Exception):  # Spark may be going down already
            self.execution.backend.cancel_jobs()

    def resume_line(self) -> str | None:
        """What happened, and how to go on; None if the run failed for a reason of its own
        (its error is then raised as usual)."""
        from sparkbeam.runner import PipelineState

        name = signal.Signals(self.received[0]).name
        execution = self.execution
        loop = execution.loop
        stream_run = execution.stream_run
        if execution.state == PipelineState.FAILED and not self.abandoned:
            return None
        if loop.batch:
            if execution.state == PipelineState.DONE:
                return f"sparkbeam: {name} arrived as the batch run finished; its outputs are complete"
            return f"sparkbeam: batch run cancelled on {name}; run it again to start over"
        if execution.state == PipelineState.DONE:
            return f"sparkbeam: {name} arrived as the stream finished, after step {loop.step - 1}"
        where = f"step {loop.step} abandoned" if self.abandoned else f"after step {loop.step - 1}"
        if stream_run is None or stream_run.temporary:
            return (
                f"sparkbeam: stopped on {name}, {where}; without --checkpoint_dir nothing is kept, "
                "so a new run starts from the beginning"
            )
        root = stream_run.store.root
        newest = stream_run.store.newest()
        resume_at = 0 if newest is None else newest["step"]
        if self.abandoned:
            return (
                f"sparkbeam: stopped on {name}, {where}; run again with --checkpoint_dir={root} to "
                f"resume from the checkpoint of step {resume_at}, replaying the journaled steps after it"
            )
        return (
            f"sparkbeam: stopped on {name} {where}, checkpoint written; run again with "
            f"--checkpoint_dir={root} to resume at step {resume_at}"
        )


@contextlib.contextmanager
def stop_on_signals(execution: Any) -> Iterator[None]:
    """Around a run in the main thread: SIGINT and SIGTERM stop it cleanly (see above), and
    the program exits with 128 + the signal's number once the run has cleaned up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupts = _Interrupts(execution)
    previous = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    for signum in _SIGNALS:
        signal.signal(signum, interrupts.handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if interrupts.received:
        line = interrupts.resume_line()
        if line is not None:
            print(line, file=sys.stderr, flush=True)
            raise SystemExit(128 + interrupts.received[0])
