"""A stream run in its own process, for the lease tests: two drivers on one checkpoint directory.

    python lease_job.py INPUT_DIR OUTPUT_PREFIX CHECKPOINT_DIR [PIPELINE OPTIONS...]

Copies the lines of the text files arriving in INPUT_DIR to exactly-once step folders
under OUTPUT_PREFIX, until stopped (or, with --available_now, until it has read what is
there).
"""

from __future__ import annotations

import sys

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions


def main(input_dir: str, output_prefix: str, checkpoint_dir: str, *flags: str) -> None:
    options = PipelineOptions(
        list(flags),
        spark_master="local[1]",
        spark_conf=["spark.ui.enabled=false", "spark.sql.shuffle.partitions=1"],
        checkpoint_dir=checkpoint_dir,
        checkpoint_interval=2,
        step_interval=0.2,
        state_partitions=1,
        quiet=True,
    )
    with beam.Pipeline(options=options) as p:
        p | "Read" >> beam.io.ReadFromTextStream(input_dir) | "Write" >> beam.io.WriteToText(output_prefix)


if __name__ == "__main__":
    main(*sys.argv[1:])
