"""The stream of ``stream_job.py`` for a real cluster, as the README's cluster section runs it:

    python cluster_stream_job.py --input=DIR --output=DIR --checkpoint_dir=DIR --available_now --spark_master=spark://host:7077
    spark-submit --master spark://host:7077 cluster_stream_job.py --input=DIR --output=DIR --checkpoint_dir=DIR --available_now

Its own flags are ``--input`` and ``--output``; the rest are pipeline options. The master
comes from ``--spark_master``, or from ``spark-submit``.
"""

from __future__ import annotations

import argparse
import sys

import stream_job  # beside this script
from pyspark import cloudpickle

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions

# The cluster's executors cannot import a module that lives beside this script: its
# functions travel by value, as this script's own do.
cloudpickle.register_pickle_by_value(stream_job)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of JSON-lines files to read as a stream")
    parser.add_argument("--output", required=True, help="directory for the totals and dead letters")
    known, pipeline_args = parser.parse_known_args(argv)
    options = PipelineOptions(pipeline_args, checkpoint_interval=3, step_interval=0.2, state_partitions=2)
    with beam.Pipeline(options=options) as p:
        stream_job.build(p, known.input, known.output)


if __name__ == "__main__":
    main(sys.argv[1:])
