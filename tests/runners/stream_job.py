"""A real stream run in its own process, for the crash tests: killed with SIGKILL and restarted.

    python stream_job.py INPUT_DIR OUTPUT_DIR CHECKPOINT_DIR TIMELINE_LOG

Reads the JSON-lines files of INPUT_DIR as a stream (one file per micro-batch, available-now
so the run ends when it has read them all), sums scores per team in 60-second windows, and
writes the totals and the dead letters with exactly-once file sinks.
"""

from __future__ import annotations

import sys

import sparkbeam as beam
from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.transforms import window

SCHEMA = "user STRING, team STRING, score INT, ts DOUBLE"


def format_total(team_total, window=beam.DoFn.WindowParam):
    team, total = team_total
    return f"{team},{int(window.start)},{total}"


def build(p, input_dir: str, output_dir: str) -> None:
    good, bad = p | "ReadScores" >> beam.io.ReadFromJsonStream(
        input_dir,
        schema=SCHEMA,
        timestamp="ts",
        watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=20),
        max_files_per_trigger=1,
    ).with_exception_handling()
    (
        good
        | "TeamScore" >> beam.Map(lambda row: (row.team, row.score))
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "Sum" >> beam.CombinePerKey(sum)
        | "Format" >> beam.Map(format_total)
        | "WriteTotals" >> beam.io.WriteToText(f"{output_dir}/totals", file_name_suffix=".txt")
    )
    bad | "Raw" >> beam.Map(lambda record: record.record) | "WriteBad" >> beam.io.WriteToText(f"{output_dir}/bad")


def main(input_dir: str, output_dir: str, checkpoint_dir: str, timeline_log: str) -> None:
    options = PipelineOptions(
        spark_master="local[2]",
        spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
        available_now=True,
        checkpoint_dir=checkpoint_dir,
        checkpoint_interval=3,
        step_interval=0.2,
        timeline_log=timeline_log,
        state_partitions=2,
    )
    with beam.Pipeline(options=options) as p:
        build(p, input_dir, output_dir)


if __name__ == "__main__":
    main(*sys.argv[1:5])
