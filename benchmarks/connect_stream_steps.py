"""Per-step cost of a small stream on Spark Connect beside the classic session, in one run.

    python benchmarks/connect_stream_steps.py [--steps 30] [--remote sc://host:port]

One TestStream of ``--steps`` events (a few elements, then the watermark moved), a Map,
fixed windows with early firings, a CombinePerKey (an unlifted grouping on Connect) and a
stateful DoFn with an event-time timer: two keyed stages carrying state from step to step.
It runs first on a classic local session, then on a Connect server (``--remote``, else one
started here by tools/connect_server.py), and prints each run's median and mean step time
and their ratio. Both runs must emit the same panes, or the script fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sparkbeam as beam
from sparkbeam import trigger, window
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.userstate import BagStateSpec, TimeDomain, TimerSpec, on_timer

_BUFFER = BagStateSpec("buffer", beam.coders.PickleCoder())
_END = TimerSpec("end", TimeDomain.WATERMARK)
_STATE = beam.DoFn.StateParam(_BUFFER)
_TIMER = beam.DoFn.TimerParam(_END)


class BufferUntilWindowEnd(beam.DoFn):
    BUFFER = _BUFFER
    END = _END

    def process(self, kv: Any, buffer: Any = _STATE, end: Any = _TIMER, window: Any = beam.DoFn.WindowParam) -> None:
        buffer.add(kv[1])
        end.set(window.max_timestamp())

    @on_timer(_END)
    def flush(self, key: Any = beam.DoFn.KeyParam, buffer: Any = _STATE) -> Any:
        yield key, len(list(buffer.read()))
        buffer.clear()


def stream(steps: int) -> TestStream:
    events = TestStream()
    for step in range(steps):
        events = events.add_elements([beam.TimestampedValue((f"k{n % 5}", n), step * 3 + n % 3) for n in range(8)])
        events = events.advance_watermark_to(step * 3)
    return events.advance_watermark_to_infinity()


def run(steps: int, options: dict[str, Any]) -> tuple[list[float], list[Any]]:
    from sparkbeam.runners.core.loop.steps import StepLoop

    seconds: list[float] = []
    original = StepLoop.run_step

    def timed(loop: Any) -> None:
        started = time.perf_counter()
        try:
            original(loop)
        finally:
            seconds.append(time.perf_counter() - started)

    p = beam.Pipeline(options=PipelineOptions(streaming=True, **options))
    windowed = (
        p
        | stream(steps)
        | beam.Map(lambda kv: (kv[0], kv[1] * 10))
        | beam.WindowInto(window.FixedWindows(6), trigger=trigger.AfterWatermark(early=trigger.AfterCount(4)))
    )
    sums = beam.capture(windowed | beam.CombinePerKey(sum))
    buffered = beam.capture(windowed | beam.ParDo(BufferUntilWindowEnd()))
    StepLoop.run_step = timed
    try:
        result = p.run()
    finally:
        StepLoop.run_step = original
    emitted = sorted((repr(e.value), e.timestamp.micros, e.step) for pcoll in (sums, buffered) for e in result.emissions(pcoll))
    return seconds, emitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--remote", help="a Connect server's URL (default: start one here)")
    args = parser.parse_args()
    from tools.connect_server import server_for

    with server_for(args.remote) as remote:
        classic, classic_out = run(args.steps, {})
        connect, connect_out = run(args.steps, {"spark_remote": remote})
    if classic_out != connect_out:
        sys.exit("the two runs emitted different panes")
    # The first step pays each session's start (Python workers, the first jobs): left out.
    rows = []
    for name, seconds in (("classic", classic[1:]), ("connect", connect[1:])):
        rows.append((name, statistics.median(seconds), statistics.fmean(seconds), len(seconds)))
        print(f"{name:8s} median {rows[-1][1] * 1000:7.0f} ms/step  mean {rows[-1][2] * 1000:7.0f} ms/step  over {len(seconds)} steps")
    print(f"connect/classic: median {rows[1][1] / rows[0][1]:.2f}x, mean {rows[1][2] / rows[0][2]:.2f}x")


if __name__ == "__main__":
    main()
