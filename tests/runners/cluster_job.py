"""Runs on local-cluster[2,1,1024] (separate executor processes, Spark's default of 4
attempts per task) and prints results as JSON: the batch example, a stream, a requirements
file, a bounded source, and the metrics of a batch run, of a run whose task fails on its
first attempt and succeeds on its second, and of a stream.

Started by test_local_cluster.py in its own interpreter, since a process holds one
SparkContext and the test session already has a local one (one process for all of these:
a local cluster's start costs more than any of them). With ``encrypted`` after the master
(test_metrics_cluster.py), only the retried run, with Spark's RPC encrypted.
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
from sparkbeam.metrics import Metrics, MetricsFilter
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


class CountAndSum(beam.DoFn):
    def process(self, x):
        Metrics.counter("job", "elements").inc()
        Metrics.distribution("job", "values").update(x)
        yield x % 3, x


class FailOnFirstAttempt(beam.DoFn):
    """Counts each element, then fails the first attempt of the task holding element 5
    (once Spark retries the task, the attempt number is 1 and it passes)."""

    def process(self, x):
        from pyspark import TaskContext

        Metrics.counter("job", "seen").inc()
        if x == 5 and TaskContext.get().attemptNumber() == 0:
            Metrics.counter("job", "failures").inc()
            msg = "the first attempt fails on purpose"
            raise RuntimeError(msg)
        yield x


def counters(metrics, namespace="job"):
    query = metrics.query(MetricsFilter().with_namespace(namespace))
    return {
        **{f"{r.key.step}:{r.key.metric.name}": [r.committed, r.attempted] for r in query["counters"]},
        **{f"{r.key.step}:{r.key.metric.name}": [[r.committed.sum, r.committed.count], [r.attempted.sum, r.attempted.count]]
           for r in query["distributions"]},
    }


def batch(master: str) -> dict:
    p = beam.Pipeline(options=PipelineOptions(spark_master=master))
    _ = p | beam.Create(list(range(20))) | "Count" >> beam.ParDo(CountAndSum()) | beam.CombinePerKey(sum)
    return counters(p.run().metrics())


def retried(master: str, spark_conf: tuple[str, ...] = ()) -> dict:
    p = beam.Pipeline(options=PipelineOptions(spark_master=master, spark_conf=list(spark_conf)))
    _ = p | beam.Create(list(range(10))) | "Flaky" >> beam.ParDo(FailOnFirstAttempt())
    return counters(p.run().metrics())


def stream(master: str | None) -> dict:
    test_stream = TestStream()
    for step in range(3):
        test_stream.add_elements([window.TimestampedValue(step * 10 + i, step * 10 + i) for i in range(4)])
        test_stream.advance_watermark_to(step * 10 + 9)
    test_stream.advance_watermark_to_infinity()
    p = beam.Pipeline(options=PipelineOptions(streaming=True, **({"spark_master": master} if master else {})))
    _ = p | test_stream | "Count" >> beam.ParDo(CountAndSum()) | beam.WindowInto(window.FixedWindows(10)) | beam.GroupByKey()
    metrics = run_in_memory(p, streaming=True).metrics() if master is None else p.run().metrics()
    steps = [sum(n for key, n in s.committed.counters.items() if key.metric.name == "elements") for s in metrics.steps()]
    return {"totals": counters(metrics), "elements_per_step": steps}


def encrypted(master: str) -> dict:
    """The retried run with Spark's RPC encrypted: the failed attempt reports over TLS."""
    import secrets

    from sparkbeam.runners.spark import attempt_reports

    listeners = []

    class Recorded(attempt_reports.AttemptReports):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            listeners.append({"encrypted": kwargs.get("encrypted"), "certificate": self.certificate is not None})

    attempt_reports.AttemptReports = Recorded
    conf = ("spark.authenticate=true", f"spark.authenticate.secret={secrets.token_hex(16)}", "spark.network.crypto.enabled=true")
    return {"retried": retried(master, conf), "listeners": listeners}


def main() -> None:
    master = sys.argv[1]
    if sys.argv[2:] == ["encrypted"]:
        print("RESULT " + json.dumps(encrypted(master)))
        return
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
    report["metrics"] = {"batch": batch(master), "retried": retried(master), "stream": stream(master), "stream_in_memory": stream(None)}
    print("RESULT " + json.dumps(report))


if __name__ == "__main__":
    main()
