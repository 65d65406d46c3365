"""A pipeline whose ``Map`` raises on one element, run in its own process to see what the
user sees: ``python failing_job.py batch|stream INPUT OUTPUT [pipeline flags]``, or the
same through ``spark-submit``.

In ``batch`` it reads the text file INPUT; in ``stream`` the directory INPUT, as a stream
read available-now. Every line is parsed as an integer, and 13 makes ``explode`` raise.
"""

from __future__ import annotations

import sys

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions


def explode(line: str) -> int:
    number = int(line)
    if number == 13:
        raise ValueError(f"cannot handle {number}")
    return number


def main(mode: str, input_path: str, output: str, flags: list[str]) -> None:
    options = PipelineOptions(
        flags, available_now=mode == "stream", step_interval=0.2, spark_conf=["spark.ui.enabled=false"]
    )
    with beam.Pipeline(options=options) as p:
        read = beam.io.ReadFromText(input_path) if mode == "batch" else beam.io.ReadFromTextStream(input_path)
        (
            p
            | "Read" >> read
            | "Explode" >> beam.Map(explode)
            | "Write" >> beam.io.WriteToText(output)
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
