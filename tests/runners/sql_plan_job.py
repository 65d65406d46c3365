"""A schema'd aggregation of many groups written to files, in its own driver process.

    python sql_plan_job.py EVENTS_CSV OUTPUT_PREFIX [--spark_conf key=value ...]

Reads EVENTS_CSV (key,score,event_ms lines) with ``ReadFromCsv``, sums the scores per key in
one-minute windows (a SQL plan) and writes the totals with ``WriteToText``; prints one line
``RESULT {json}``: the driver's peak RSS (this Python process), the heap the driver's JVM
was given, the lines written and the aggregation's note in the stage plan.
"""

from __future__ import annotations

import glob
import json
import resource
import sys

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.schemas import AssignTimestamps
from sparkbeam.transforms import window


def main(argv: list[str]) -> None:
    events, prefix, *flags = argv
    options = PipelineOptions(["--spark_master=local[2]", "--quiet", *flags])
    p = beam.Pipeline(options=options)
    _ = (
        p
        | "Read" >> beam.io.ReadFromCsv(events, header=None, names=["key", "score", "event_ms"])
        | "Stamp" >> AssignTimestamps("event_ms", unit="ms")
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "Totals" >> beam.GroupBy("key").aggregate_field("score", sum, "total")
        | "Write" >> beam.io.WriteToText(prefix)
    )
    result = p.run()
    from pyspark import SparkContext

    heap = SparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    lines = 0
    for path in glob.glob(prefix + "*"):
        with open(path) as handle:
            lines += sum(1 for _ in handle)
    report = {
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "jvm_heap_mb": heap / 2**20,
        "lines": lines,
        "notes": result.watermarks().notes,
    }
    print("RESULT " + json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
