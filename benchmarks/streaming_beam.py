"""The streaming benchmark's Beam peers: the events as Beam's TestStream on its
BundleBasedDirectRunner (``BeamPeer``) and on Beam's Prism runner (``PrismPeer``)."""

from __future__ import annotations

import sys
import time
from typing import Any

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
from streaming_idle import IdleFigure, by_difference, idle_increment_ms
from streaming_peer import Peer, Run
from streaming_script import Script, test_stream
from workloads import (
    EPOCH_MS,
    WINDOW_SECONDS,
    Bench,
    CountAndSumLogic,
    prism_flags,
    require_apache_beam,
)

__all__ = ["BeamPeer", "PrismPeer"]

# Beam's DoFns run in this process but are pickled, maybe by value with a copy of their
# globals, so a list they append to is reached through the module at run time
# (see record_beam_pane).
_BEAM_ROWS: list[tuple[str, int, int, int, int]] = []


def record_beam_pane(element: Any, window: Any, pane: Any) -> None:
    key, (count, total) = element
    sys.modules[__name__]._BEAM_ROWS.append(  # type: ignore[attr-defined]
        (key, window.start.micros // 1000, count, total, int(pane.timing))
    )


class BeamPeer(Peer):
    describe = (
        "Apache Beam BundleBasedDirectRunner, streaming=True, Beam's TestStream, same pipeline; "
        "ON_TIME panes"
    )
    name = "beam"

    def __init__(self, bench: Bench) -> None:
        require_apache_beam()
        import apache_beam as ab
        from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
        from apache_beam.testing.test_stream import TestStream
        from apache_beam.utils.timestamp import Timestamp
        from apache_beam.utils.windowed_value import PaneInfoTiming

        class CountAndSum(CountAndSumLogic, ab.CombineFn):
            pass

        def record(
            element: Any, window: Any = ab.DoFn.WindowParam, pane: Any = ab.DoFn.PaneInfoParam
        ) -> None:
            record_beam_pane(element, window, pane)

        self.ab = ab
        self.options_cls = PipelineOptions
        self.standard = StandardOptions
        self.test_stream = TestStream
        self.timestamp = Timestamp
        self.on_time = int(PaneInfoTiming.ON_TIME)
        self.combine_fn = CountAndSum
        self.record = record
        self.runner: str | None = "BundleBasedDirectRunner"
        self.flags: list[str] = []

    def stream(self, script: Script) -> tuple[Any, int]:
        """The TestStream of ``script`` and how many events it has."""
        stream, kinds = test_stream(
            script, self.test_stream, self.ab.window.TimestampedValue, lambda micros: self.timestamp(micros=micros)
        )
        return stream, len(kinds)

    def execute(self, stream: Any) -> list[tuple[str, int, int, int, int]]:
        ab = self.ab
        _BEAM_ROWS.clear()
        # An explicit empty flag list: Beam would otherwise parse (and warn about) our sys.argv.
        options = self.options_cls(self.flags)
        options.view_as(self.standard).streaming = True
        with ab.Pipeline(runner=self.runner, options=options) as pipeline:
            (
                pipeline
                | "Events" >> stream
                | "Minutes" >> ab.WindowInto(ab.window.FixedWindows(WINDOW_SECONDS))
                | "CountAndSum" >> ab.CombinePerKey(self.combine_fn())
                | "Record" >> ab.Map(self.record)
            )
        rows = list(_BEAM_ROWS)
        _BEAM_ROWS.clear()
        return rows

    def prepare(self, script: Script) -> tuple[Any, int]:
        return self.stream(script)

    def run(self, prepared: tuple[Any, int]) -> Run:
        stream, events = prepared
        started = time.perf_counter()
        recorded = self.execute(stream)
        rows = [
            (key, window_ms, count, total)
            for key, window_ms, count, total, timing in recorded
            if timing == self.on_time
        ]
        seconds = time.perf_counter() - started
        note = f"{self.name}: {events} TestStream events (steps); Beam shows no per-step times, so s/step is seconds / events"
        return Run(rows, seconds, events, len(recorded) - len(rows), [note])

    def idle(self, count: int) -> list[IdleFigure]:
        seed = self.ab.window.TimestampedValue(
            ("user0000", 1), self.timestamp(micros=EPOCH_MS * 1000)
        )
        increment_us = idle_increment_ms(count) * 1000

        def build(idle_steps: int) -> Any:
            stream = self.test_stream().add_elements([seed])
            for step in range(1, idle_steps + 1):
                stream.advance_watermark_to(
                    self.timestamp(micros=EPOCH_MS * 1000 + step * increment_us)
                )
            return stream.advance_watermark_to_infinity()

        stream = build(count)
        _, per_step = by_difference(lambda: self.execute(build(0)), lambda: self.execute(stream), count)
        return [
            IdleFigure(
                self.name,
                "watermark-only TestStream events",
                count,
                None,
                None,
                per_step,
                None,
                "no per-step times: by difference only",
            )
        ]


class PrismPeer(BeamPeer):
    """The same pipeline and TestStream on Beam's Prism runner: one job server for the
    command (workloads.prism_flags), the SDK worker LOOPBACK in this process."""

    describe = (
        "Apache Beam on Beam's Prism runner (Go, its own process; tools/prism.py), streaming=True, "
        "Beam's TestStream, same pipeline; ON_TIME panes"
    )
    name = "prism"

    def __init__(self, bench: Bench) -> None:
        super().__init__(bench)
        self.runner = None  # the flags name it
        self.flags = prism_flags()
