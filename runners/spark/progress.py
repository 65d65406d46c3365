"""What a run shows while it goes on: a live line on a terminal, a log line otherwise.

- A stream, after each step: the step, the elements its sources read, each stage's output
  watermark as a lag behind the step's time (in seconds of event time when the clock is
  not the wall's, as with ``TestStream``), the data dropped and sent to dead letters, and how long
  the step took.
- A batch run, while it runs: the sparkbeam stage at work, named by its transform's label,
  and the Spark stage running for it with its tasks done (Spark's UI shows the same names:
  each Spark job's description is the stage's label).

On a terminal the line is rewritten in place; otherwise a line goes to the log
(``sparkbeam.progress``, or stderr when logging is not configured) every
``LOG_EVERY_SECONDS``, summing the steps since the last one, and a last one when the run
ends; a run shorter than that (a test, a notebook cell) logs nothing. ``--quiet`` turns
it off.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import attrs

from sparkbeam.runners.core.loop.timeline import WatermarkRecord, format_micros
from sparkbeam.runners.core.lowering.settings import RunSettings
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["LOG_EVERY_SECONDS", "ProgressLine", "RunProgress", "StepReport", "format_lag", "run_progress"]

_LOG = logging.getLogger("sparkbeam.progress")

#: At most one progress line per this many seconds in a log (a terminal gets every step).
LOG_EVERY_SECONDS = 10.0

#: How often a batch run's Spark stages are looked at.
_POLL_SECONDS = 0.5


def format_lag(seconds: float) -> str:
    """``3s``, ``2m05s``, ``1h02m``: how far a watermark is behind the step's time."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{seconds:.0f}s" if seconds >= 0 else "0s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _watermark_text(watermark: int, now: int | None) -> str:
    if watermark <= MIN_TIMESTAMP.micros:
        return "no watermark yet"
    if watermark >= MAX_TIMESTAMP.micros:
        return "done"
    if now is None:
        return f"{format_micros(watermark)}s"
    return format_lag((now - watermark) / 1_000_000)


@attrs.frozen
class StepReport:
    """What the line says about a span of steps (one on a terminal)."""

    first_step: int
    last_step: int
    elements_read: int
    dropped: int
    dead_letters: int
    seconds: float  # the steps' time, all together
    #: (stage, output watermark) after the last step
    watermarks: tuple[tuple[str, int], ...]
    #: the last step's time, for lags; None when the clock is not the wall's
    now: int | None

    def format(self) -> str:
        steps = self.last_step - self.first_step + 1
        span = f"step {self.last_step}" if steps == 1 else f"steps {self.first_step}-{self.last_step}"
        label = "lag" if self.now is not None else "watermark"
        marks = ", ".join(f"{stage} {_watermark_text(mark, self.now)}" for stage, mark in self.watermarks)
        parts = [span, f"read {self.elements_read}", f"{label} {marks}", f"dropped {self.dropped}"]
        if self.dead_letters:
            parts.append(f"dead letters {self.dead_letters}")
        parts.append(f"{self.seconds / steps:.2f}s/step" if steps > 1 else f"{self.seconds:.2f}s")
        return " | ".join(parts)


class ProgressLine:
    """Where progress goes: one line rewritten in place on a terminal, else a log line every
    ``log_every`` seconds from the start."""

    def __init__(
        self,
        out: IO[str] | None = None,
        *,
        terminal: bool | None = None,
        log_every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out if out is not None else sys.stderr
        self.terminal = terminal if terminal is not None else bool(getattr(self.out, "isatty", lambda: False)())
        self.log_every = LOG_EVERY_SECONDS if log_every is None else log_every
        self.clock = clock
        self._last_logged = clock()
        #: whether a log line was written (a run that wrote none ends without one)
        self.logged = False
        self._shown = False
        self._lock = threading.Lock()

    def due(self) -> bool:
        """Whether a line would be written now (always on a terminal)."""
        return self.terminal or self.clock() - self._last_logged >= self.log_every

    def show(self, text: str) -> None:
        with self._lock:
            if self.terminal:
                width = shutil.get_terminal_size((120, 24)).columns - 1
                self.out.write("\r" + text[:width] + "\x1b[K")
                self.out.flush()
                self._shown = True
                return
            self._last_logged = self.clock()
            self.logged = True
            if _LOG.hasHandlers():
                _LOG.info(text)
            else:  # logging not configured: Python would drop an INFO line
                print(f"{time.strftime('%H:%M:%S')} sparkbeam progress: {text}", file=self.out, flush=True)

    def end(self, keep: bool) -> None:
        """Leave the terminal's line (``keep``: as it is, on its own line; else erased)."""
        with self._lock:
            if self.terminal and self._shown:
                self.out.write("\n" if keep else "\r\x1b[K")
                self.out.flush()
                self._shown = False


class RunProgress:
    """The step loop's hooks around the run's own (a stream's checkpoints), reporting each
    step; and, while a batch run's one step goes on, its Spark stages."""

    def __init__(
        self,
        line: ProgressLine,
        *,
        inner: Any = None,
        backend: Any = None,
        source_stages: frozenset[int] = frozenset(),
        batch: bool = False,
        wall_clock: bool = True,
    ) -> None:
        self.line = line
        self.inner = inner
        self.backend = backend
        self.source_stages = source_stages
        self.batch = batch
        self.wall_clock = wall_clock
        self._started: float | None = None
        self._records: dict[int, list[WatermarkRecord]] = {}
        self._pending: StepReport | None = None
        self._stop_polling = threading.Event()
        self._poller: threading.Thread | None = None

    # -- the step loop's hooks ------------------------------------------------------------
    def before_step(self, step: int) -> None:
        if self.inner is not None:
            self.inner.before_step(step)  # a stream's pacing and journal: not the step's time
        self._started = time.perf_counter()
        if self.batch and self.backend is not None:
            self._stop_polling.clear()
            self._poller = threading.Thread(target=self._poll_spark, name="sparkbeam-progress", daemon=True)
            self._poller.start()

    def on_record(self, record: WatermarkRecord) -> None:
        self._records.setdefault(record.step, []).append(record)

    def after_step(self, step: int) -> None:
        seconds = time.perf_counter() - (self._started or time.perf_counter())
        records = self._records.pop(step, [])
        if self.batch:
            self._stop_poller()
            self.line.end(keep=False)
        elif records:
            self._report(step, records, seconds)
        if self.inner is not None:
            self.inner.after_step(step)

    def close(self) -> None:
        """At the end of the run, whichever way it ends: the last line stays, the poller stops."""
        self._stop_poller()
        if self._pending is not None and self.line.logged:
            self.line.show(self._pending.format())  # the steps since the last log line
        self._pending = None
        self.line.end(keep=not self.batch)

    # -- streams --------------------------------------------------------------------------
    def _report(self, step: int, records: list[WatermarkRecord], seconds: float) -> None:
        now = records[0].processing_time if self.wall_clock else None
        report = StepReport(
            first_step=step,
            last_step=step,
            elements_read=sum(r.elements_in for r in records if r.stage_id in self.source_stages),
            dropped=sum(r.dropped for r in records),
            dead_letters=sum(r.dead_letters for r in records),
            seconds=seconds,
            watermarks=tuple((r.stage, r.output_watermark) for r in records),
            now=now,
        )
        pending = self._pending
        if pending is not None:
            report = attrs.evolve(
                report,
                first_step=pending.first_step,
                elements_read=pending.elements_read + report.elements_read,
                dropped=pending.dropped + report.dropped,
                dead_letters=pending.dead_letters + report.dead_letters,
                seconds=pending.seconds + report.seconds,
            )
        if self.line.due():
            self.line.show(report.format())
            self._pending = None
        else:
            self._pending = report

    # -- batch ----------------------------------------------------------------------------
    def _poll_spark(self) -> None:
        backend = self.backend
        tracker = backend.sc.statusTracker()
        while not self._stop_polling.wait(_POLL_SECONDS):
            try:
                text = _batch_text(tracker, backend.job_group, backend.current_stage)
            except Exception:  # Spark going down as the run ends: nothing more to show
                return
            if text is not None and self.line.due():
                self.line.show(text)

    def _stop_poller(self) -> None:
        self._stop_polling.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None


def _batch_text(tracker: Any, job_group: str, stage: str | None) -> str | None:
    """``batch | SumPerTeam | Spark stage 7: 3/4 tasks`` for the run's running Spark stages."""
    running = []
    for job_id in tracker.getJobIdsForGroup(job_group):
        job = tracker.getJobInfo(job_id)
        if job is None or str(job.status) != "RUNNING":
            continue
        for stage_id in job.stageIds:
            info = tracker.getStageInfo(stage_id)
            if info is not None and info.numActiveTasks + info.numCompletedTasks > 0 and info.numCompletedTasks < info.numTasks:
                running.append(f"Spark stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
    if not running:
        return None
    return " | ".join(["batch", stage or "starting", *running])


def run_progress(settings: RunSettings, backend: Any, stream_run: Any, plan: Any, *, batch: bool) -> RunProgress | None:
    """The run's progress reporting, None with ``--quiet``."""
    if settings.quiet:
        return None
    return RunProgress(
        ProgressLine(),
        inner=stream_run,
        backend=backend,
        source_stages=frozenset(stage.id for stage in plan.stages if stage.is_source),
        batch=batch,
        wall_clock=stream_run is not None,
    )
