"""Runs on local-cluster[2,1,1024] (separate executor processes) and prints results as JSON.

Started by test_local_cluster.py in its own interpreter, since a process holds one
SparkContext and the test session already has a local one.
"""

from __future__ import annotations

import collections
import csv
import importlib
import json
import sys
import tempfile
import uuid

from wheels import write_requirements, write_wheel  # beside this script

import sparkbeam as beam
from sparkbeam.examples import hourly_team_score
from sparkbeam.io import iobase
from sparkbeam.io.range_trackers import OffsetRangeTracker
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import trigger, window


def batch_example(master: str) -> dict:
    p = beam.Pipeline(options=PipelineOptions(spark_master=master))
    totals = beam.capture(hourly_team_score.build(p, hourly_team_score.SAMPLE_DATA))
    rows = sorted(p.run().emissions(totals).values())
    expected: collections.Counter = collections.Counter()
    with open(hourly_team_score.SAMPLE_DATA) as handle:
        for _user, team, score, millis, _ in csv.reader(handle):
            hour = int(millis) // 1000 // 3600 * 3600
            expected[(hour, team)] += int(score)
    return {"rows": len(rows), "expected_rows": len(expected), "total": sum(int(r.split()[-1]) for r in rows),
            "expected_total": sum(expected.values())}


def streaming_pipeline() -> tuple:
    stream = TestStream()
    for step in range(4):
        stream.add_elements([window.TimestampedValue((f"k{i % 3}", i), step * 10 + i) for i in range(6)])
        stream.advance_watermark_to(step * 10 + 9)
    stream.advance_watermark_to_infinity()
    p = beam.Pipeline(options=PipelineOptions(streaming=True, spark_master=sys.argv[1]))
    out = (
        p
        | stream
        | beam.WindowInto(window.FixedWindows(20), trigger=trigger.AfterWatermark(early=trigger.AfterCount(4)),
                          accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
        | beam.CombinePerKey(sum)
    )
    return p, beam.capture(out)


DEPENDENCY = f"sbclusterdep_{uuid.uuid4().hex[:8]}"


def triple_on_executor(x: int) -> int:
    return importlib.import_module(DEPENDENCY).triple(x)


def requirements_on_executors(master: str) -> list:
    """A package only a --requirements_file provides, imported on the executors."""
    folder = tempfile.mkdtemp(prefix="sparkbeam-cluster-deps-")
    write_wheel(f"{folder}/wheels", DEPENDENCY, "def triple(x):\n    return 3 * x\n")
    requirements = write_requirements(f"{folder}/requirements.txt", f"{folder}/wheels", f"{DEPENDENCY}==1.0")
    p = beam.Pipeline(options=PipelineOptions(spark_master=master, requirements_file=requirements))
    out = beam.capture(p | beam.Create(list(range(6))) | beam.Map(triple_on_executor))
    return sorted(e.value for e in p.run().emissions(out))


class Squares(iobase.BoundedSource):
    """0..count-1 squared, in bundles of ``per_bundle``; defined in __main__, so the bundles
    reach the executor processes pickled by value."""

    def __init__(self, count: int, per_bundle: int) -> None:
        self.count = count
        self.per_bundle = per_bundle

    def estimate_size(self) -> int:
        return self.count

    def split(self, desired_bundle_size, start_position=None, stop_position=None):
        for low in range(0, self.count, self.per_bundle):
            yield iobase.SourceBundle(1, self, low, min(self.count, low + self.per_bundle))

    def get_range_tracker(self, start_position, stop_position):
        return OffsetRangeTracker(start_position or 0, self.count if stop_position is None else stop_position)

    def read(self, range_tracker):
        position = range_tracker.start_position()
        while range_tracker.try_claim(position):
            yield position * position
            position += 1


def _with_partition(value: int) -> list:
    from pyspark import TaskContext

    return [TaskContext.get().partitionId(), value]


def bounded_read(master: str) -> dict:
    """Read(BoundedSource) on executors in other processes: one partition per bundle."""
    p = beam.Pipeline(options=PipelineOptions(spark_master=master))
    out = beam.capture(p | beam.io.Read(Squares(12, 4)) | beam.Map(_with_partition))
    rows = [e.value for e in p.run().emissions(out)]
    return {"values": sorted(value for _, value in rows), "partitions": len({partition for partition, _ in rows})}


def rows_of(result, pcoll) -> list:
    return sorted(
        [e.value[0], e.value[1], float(e.timestamp), e.pane.timing.name, e.pane.index, e.step] for e in result.emissions(pcoll)
    )


def main() -> None:
    master = sys.argv[1]
    report = {"batch": batch_example(master)}
    p, out = streaming_pipeline()
    spark_result = p.run()
    report["streaming_spark"] = rows_of(spark_result, out)
    p, out = streaming_pipeline()
    report["streaming_engine"] = rows_of(run_in_memory(p), out)
    report["watermarks_monotonic"] = all(
        earlier.output_watermark <= later.output_watermark
        for stage in spark_result.watermarks().stage_names
        for earlier, later in zip(spark_result.watermarks().for_stage(stage), spark_result.watermarks().for_stage(stage)[1:])
    )
    report["requirements"] = requirements_on_executors(master)
    report["bounded_read"] = bounded_read(master)
    print("RESULT " + json.dumps(report))


if __name__ == "__main__":
    main()
