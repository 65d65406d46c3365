"""What a run keeps of its past steps: the watermark timeline and the captured emissions, bounded.

A stream may run for ever, so its step loop keeps the watermark records and the captured
emissions of only the last ``--timeline_retention_steps`` steps, in memory and in its
checkpoints; ``Timeline.first_step`` and ``Emissions.first_step`` say where what is kept
begins. The full history goes to files as each step ends:

- ``--timeline_log=path``: one JSON line per stage and step (``WatermarkRecord.as_dict()``),
  appended; a step replayed after a restart is appended again, with the same values.
- ``sparkbeam.capture(pcoll, log=path)``: one JSON line per element the PCollection
  emitted: ``step``, ``processing_time`` and ``timestamp`` (microseconds), ``value`` (as
  JSON; what JSON cannot hold, as its ``repr``), ``windows`` (as text, e.g. ``"[0, 60)"``)
  and ``pane`` (``is_first``, ``is_last``, ``timing``, ``index``, ``nonspeculative_index``).
  The file is the run's own: a run that starts afresh empties it, and one that resumes
  from a checkpoint cuts it back to the size that checkpoint recorded before replaying the
  steps after it, so each emission is in it once.

``pandas.read_json(path, lines=True)`` reads either. A batch run is one step, always kept.
"""

from __future__ import annotations

import collections
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkbeam.runners.core.loop.timeline import (
    Emission,
    Emissions,
    StepEmissions,
    Timeline,
    WatermarkRecord,
)
from sparkbeam.runners.core.lowering.settings import RunSettings

__all__ = ["RunHistory", "emission_json", "run_history"]

_LOG = logging.getLogger(__name__)


def emission_json(emission: Emission) -> str:
    """One line of a capture's log (see the module docs)."""
    try:
        value = json.dumps(emission.value, default=repr)
    except (TypeError, ValueError):  # e.g. a dict with tuple keys
        value = json.dumps(repr(emission.value))
    pane = emission.pane
    rest = json.dumps(
        {
            "timestamp": emission.timestamp.micros,
            "windows": [str(window) for window in emission.windows],
            "pane": {
                "is_first": pane.is_first,
                "is_last": pane.is_last,
                "timing": pane.timing.name,
                "index": pane.index,
                "nonspeculative_index": pane.nonspeculative_index,
            },
        }
    )
    return f'{{"step": {emission.step}, "processing_time": {emission.processing_time}, "value": {value}, {rest[1:]}'


def run_history(lowered: Any, settings: RunSettings, *, streaming: bool) -> RunHistory:
    """The history a run keeps, from its pipeline options (a batch run keeps its one step)."""
    return RunHistory(
        lowered.captured,
        retention_steps=settings.timeline_retention_steps if streaming else None,
        timeline_log=settings.timeline_log,
        capture_logs=lowered.capture_logs,
    )


class RunHistory:
    """The last ``retention_steps`` steps of a run's timeline and captured emissions, with
    the whole of both written to their logs (``None`` keeps every step in memory)."""

    def __init__(
        self,
        captured: Iterable[int],
        *,
        retention_steps: int | None = None,
        timeline_log: str | None = None,
        capture_logs: Mapping[int, str] | None = None,
    ) -> None:
        if retention_steps is not None and retention_steps < 1:
            msg = f"--timeline_retention_steps must keep at least one step, got {retention_steps}"
            raise ValueError(msg)
        self.retention_steps = retention_steps
        self.timeline_log = timeline_log
        self.capture_logs = dict(capture_logs or {})
        #: the first step still held; the steps before it are only in the logs
        self.first_step = 0
        # One entry per step, oldest first: (step, what that step recorded or emitted); a
        # step's emissions are usually held as its elements (``StepEmissions``).
        self._records: collections.deque[tuple[int, list[WatermarkRecord]]] = collections.deque()
        self._emissions: dict[int, collections.deque[tuple[int, Sequence[Emission]]]] = {
            pcoll: collections.deque() for pcoll in captured
        }
        # Sizes the capture logs had at the checkpoint a run resumes from (None: a fresh run).
        self._resume_log_sizes: dict[int, int] | None = None
        self._logs_ready = False
        self._told_trimming = False

    # -- adding -------------------------------------------------------------------------------
    def add_record(self, record: WatermarkRecord) -> None:
        if self._records and self._records[-1][0] == record.step:
            self._records[-1][1].append(record)
        else:
            self._records.append((record.step, [record]))

    def captures(self, pcoll: int) -> bool:
        return pcoll in self._emissions

    def add_emissions(self, pcoll: int, step: int, rows: Sequence[Emission]) -> None:
        if not rows:
            return
        kept = self._emissions[pcoll]
        if kept and kept[-1][0] == step:
            held = kept[-1][1]
            kept[-1] = (step, held.joined(rows) if isinstance(held, StepEmissions) else [*held, *rows])
        else:
            kept.append((step, rows))

    def end_step(self, step: int) -> None:
        """Write the step to the logs (flushed), then forget the steps beyond the retention."""
        self._write_logs(step)
        if self.retention_steps is None:
            return
        cutoff = step + 1 - self.retention_steps
        if cutoff <= self.first_step:
            return
        self.first_step = cutoff
        while self._records and self._records[0][0] < cutoff:
            self._records.popleft()
        for kept in self._emissions.values():
            while kept and kept[0][0] < cutoff:
                kept.popleft()
        if not self._told_trimming:
            self._told_trimming = True
            _LOG.info(
                "the stream keeps its last %d steps of timeline and captured emissions in memory; %s",
                self.retention_steps,
                "the full history is in " + ", ".join(self._log_paths()) if self._log_paths() else "no log keeps the rest",
            )

    # -- reading ------------------------------------------------------------------------------
    def records(self) -> list[WatermarkRecord]:
        return [record for _, records in self._records for record in records]

    def emitted_rows(self, pcoll: int) -> list[Emission]:
        return [row for _, rows in self._emissions[pcoll] for row in rows]

    def timeline(self, stage_names: list[str]) -> Timeline:
        return Timeline(self.records(), stage_names, first_step=self.first_step, log_path=self.timeline_log)

    def emitted(self, labels: Mapping[int, str]) -> dict[int, Emissions]:
        """Each captured PCollection's kept emissions, by id (``labels``: id -> its label)."""
        return {
            pcoll: Emissions(
                labels[pcoll],
                steps=[rows for _, rows in self._emissions[pcoll]],
                first_step=self.first_step,
                log_path=self.capture_logs.get(pcoll),
            )
            for pcoll in self._emissions
        }

    # -- checkpoints --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The kept steps, and how far each capture log goes (made durable first)."""
        sizes = {}
        for pcoll, path in self.capture_logs.items():
            if os.path.exists(path):
                with open(path, "rb+") as handle:
                    os.fsync(handle.fileno())
                sizes[pcoll] = os.path.getsize(path)
            else:
                sizes[pcoll] = 0
        return {
            "first_step": self.first_step,
            "records": list(self._records),
            "emissions": {pcoll: list(kept) for pcoll, kept in self._emissions.items()},
            "log_sizes": sizes,
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.first_step = data["first_step"]
        self._records = collections.deque(data["records"])
        saved = data["emissions"]
        self._emissions = {pcoll: collections.deque(saved.get(pcoll, [])) for pcoll in self._emissions}
        self._resume_log_sizes = dict(data["log_sizes"])
        self._logs_ready = False

    # -- logs ---------------------------------------------------------------------------------
    def _log_paths(self) -> list[str]:
        return [path for path in [self.timeline_log, *self.capture_logs.values()] if path]

    def _prepare_capture_logs(self) -> None:
        """A fresh run starts its capture logs empty; a resumed one cuts them back to its checkpoint."""
        for pcoll, path in self.capture_logs.items():
            directory = os.path.dirname(path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            size = 0 if self._resume_log_sizes is None else self._resume_log_sizes.get(pcoll, 0)
            with open(path, "ab") as handle:
                have = handle.tell()
                if have > size:
                    handle.truncate(size)
                elif have < size:
                    _LOG.warning(
                        "capture log %s holds %d bytes, fewer than the %d its checkpoint recorded: "
                        "emissions of steps before %d are missing from it",
                        path, have, size, self.first_step,
                    )
        self._logs_ready = True

    def _write_logs(self, step: int) -> None:
        if not self._logs_ready:
            self._prepare_capture_logs()
        if self.timeline_log and self._records and self._records[-1][0] == step:
            lines = "".join(json.dumps(record.as_dict()) + "\n" for record in self._records[-1][1])
            with open(self.timeline_log, "a", encoding="utf-8") as handle:
                handle.write(lines)
        for pcoll, path in self.capture_logs.items():
            kept = self._emissions[pcoll]
            if kept and kept[-1][0] == step:
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write("".join(emission_json(row) + "\n" for row in kept[-1][1]))
