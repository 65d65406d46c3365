"""Streaming Systems, chapter 3: watermarks between stages, and what timestamp combiners do to them.

Mobile and console players send scores; each input is its own stage computing per-user
sessions (``Sessions(1 min)``, fired at the watermark); the two are flattened, windowed
into 2-minute fixed windows, and averaged across all sessions in each window. The
timestamp combiner of the session stages decides where their output watermark stands:
END_OF_WINDOW lets it advance to the end of each open session, EARLIEST holds it at the
earliest element of the open sessions, so the 2-minute averages come out later and,
because each session lands in the window of its first element rather than its last,
they differ.

    python -m sparkbeam.examples.streaming_systems          # prints both runs' timelines

``overlapping_windows`` builds the book's second example: two chained sliding-window
stages under EARLIEST, which emit window by window with the overlapping-window rule and
all at once without it.
"""

from __future__ import annotations

import sys
from typing import Any

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window

MOBILE = "mobile"
CONSOLE = "console"

# (seconds since start, user, score) per input, in arrival order; each list is one
# arrival batch, after which that input's watermark moves to the given second.
_SCRIPT: list[tuple[str, list[tuple[int, str, int]], int]] = [
    (MOBILE, [(10, "ana", 5), (25, "ben", 3)], 20),
    (CONSOLE, [(15, "cy", 7), (40, "cy", 2)], 30),
    (MOBILE, [(50, "ana", 4), (70, "ben", 6)], 60),
    (CONSOLE, [(95, "dee", 8)], 90),
    (MOBILE, [(110, "ana", 9), (130, "eve", 1)], 120),
    (CONSOLE, [(140, "dee", 3), (170, "fay", 6)], 160),
    (MOBILE, [(185, "ben", 2), (200, "eve", 5)], 190),
    (CONSOLE, [(215, "fay", 4), (250, "gus", 7)], 240),
    (MOBILE, [(260, "ana", 3)], 280),
    (CONSOLE, [(300, "gus", 5)], 320),
    (MOBILE, [], 400),
    (CONSOLE, [], 400),
]


def score_stream() -> TestStream:
    """The mobile and console inputs as one TestStream with two tagged outputs."""
    stream = TestStream()
    for tag, scores, watermark in _SCRIPT:
        if scores:
            stream.add_elements(
                [window.TimestampedValue((user, score), second) for second, user, score in scores], tag=tag
            )
        stream.advance_watermark_to(watermark, tag=tag)
    stream.advance_watermark_to_infinity(tag=MOBILE)
    stream.advance_watermark_to_infinity(tag=CONSOLE)
    return stream


class MeanFn(beam.CombineFn):
    """The mean of numbers (nan for none)."""

    def create_accumulator(self) -> tuple[float, int]:
        return (0.0, 0)

    def add_input(self, accumulator: tuple[float, int], value: float) -> tuple[float, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def merge_accumulators(self, accumulators: Any) -> tuple[float, int]:
        total, count = 0.0, 0
        for part_total, part_count in accumulators:
            total, count = total + part_total, count + part_count
        return (total, count)

    def extract_output(self, accumulator: tuple[float, int]) -> float:
        total, count = accumulator
        return total / count if count else float("nan")


def sessions_then_averages(pipeline: Any, timestamp_combiner: Any) -> dict[str, Any]:
    """Build the chapter's pipeline; returns the captured PCollections by name."""
    inputs = pipeline | "Scores" >> score_stream()
    session_totals = []
    for tag in (MOBILE, CONSOLE):
        totals = (
            inputs[tag]
            | f"{tag}Sessions" >> beam.WindowInto(window.Sessions(60), timestamp_combiner=timestamp_combiner)
            | f"{tag}SessionTotals" >> beam.CombinePerKey(sum)
        )
        session_totals.append(beam.capture(totals))
    averages = (
        session_totals
        | "Flatten" >> beam.Flatten()
        | "TwoMinutes" >> beam.WindowInto(window.FixedWindows(120))
        | "DropUser" >> beam.Map(lambda user_total: user_total[1])
        | "Average" >> beam.CombineGlobally(MeanFn()).without_defaults()
    )
    return {
        "mobile_sessions": session_totals[0],
        "console_sessions": session_totals[1],
        "averages": beam.capture(averages),
    }


def overlapping_windows(pipeline: Any) -> dict[str, Any]:
    """Two chained sliding-window sums (2-minute windows every 20 s) under OUTPUT_AT_EARLIEST.

    The events span less than one window, so without the overlapping-window rule the first
    event (in every open window) holds the first stage's output watermark until the input
    ends, and the second stage emits everything at once; with the rule, each window's
    output is stamped no earlier than the end of the window before it, and the second
    stage emits window by window.
    """
    stream = TestStream()
    for second in range(0, 101, 10):
        stream.add_elements([window.TimestampedValue(("k", 1), second)])
        stream.advance_watermark_to(second + 5)
    stream.advance_watermark_to_infinity()
    first = (
        pipeline
        | "Events" >> stream
        | "Slide1" >> beam.WindowInto(
            window.SlidingWindows(120, 20), timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST
        )
        | "Sum1" >> beam.CombinePerKey(sum)
    )
    second = (
        first
        | "Slide2" >> beam.WindowInto(
            window.SlidingWindows(120, 20), timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST
        )
        | "Sum2" >> beam.CombinePerKey(sum)
    )
    return {"first": beam.capture(first), "second": beam.capture(second)}


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if "--help" in argv or "-h" in argv:
        print(__doc__.split("\n\n")[0] + "\n")  # then PipelineOptions prints the options and exits
    PipelineOptions(argv)
    for combiner in (window.TimestampCombiner.OUTPUT_AT_EOW, window.TimestampCombiner.OUTPUT_AT_EARLIEST):
        p = beam.Pipeline(options=PipelineOptions(argv, streaming=True))
        outputs = sessions_then_averages(p, combiner)
        result = p.run()
        print(f"== {combiner.name}")
        print(result.watermarks().format())
        for e in result.emissions(outputs["averages"]):
            print(f"step {e.step:>2}  window {e.window}  mean {e.value:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
