"""A stream with many keys of which each step touches a few, in its own process, for the
incremental-checkpoint test that kills it with SIGKILL (``test_incremental_checkpoints.py``).

    python incremental_job.py INPUT_DIR OUTPUT_DIR CHECKPOINT_DIR

Counts lines per key (the first field of each ``key,n`` line) in one global window, a
checkpoint after every step, and writes the counts with an exactly-once file sink once the
source is exhausted.
"""

from __future__ import annotations

import sys

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions


def build(p, input_dir: str):
    read = p | "Read" >> beam.io.ReadFromTextStream(input_dir, timestamp=lambda line: int(line.split(",")[1]), max_files_per_trigger=1)
    return read | "Key" >> beam.Map(lambda line: (line.split(",")[0], 1)) | "Count" >> beam.CombinePerKey(sum)


def main(input_dir: str, output_dir: str, checkpoint_dir: str) -> None:
    options = PipelineOptions(
        spark_master="local[2]",
        spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2"],
        available_now=True,
        checkpoint_dir=checkpoint_dir,
        checkpoint_interval=1,
        step_interval=0.2,
        state_partitions=2,
    )
    with beam.Pipeline(options=options) as p:
        counts = build(p, input_dir)
        counts | "Format" >> beam.Map(lambda kv: f"{kv[0]},{kv[1]}") | "Write" >> beam.io.WriteToText(f"{output_dir}/counts")


if __name__ == "__main__":
    main(*sys.argv[1:])
