"""Runs on local-cluster[2,1,1024] (executors in their own processes, Spark's default of 4
attempts per task) and prints the metrics it saw as JSON: a batch run, a run whose task
fails on its first attempt and succeeds on its second, and a stream.

Started by test_metrics_cluster.py in its own interpreter (a process holds one SparkContext);
with ``encrypted`` after the master, only the retried run, with Spark's RPC encrypted.
"""

from __future__ import annotations

import json
import sys

import sparkbeam as beam
from sparkbeam.metrics import Metrics, MetricsFilter
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.testing.test_stream import TestStream
from sparkbeam.transforms import window


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


if __name__ == "__main__":
    master = sys.argv[1]
    if sys.argv[2:] == ["encrypted"]:
        report = encrypted(master)
    else:
        report = {"batch": batch(master), "retried": retried(master), "stream": stream(master), "stream_in_memory": stream(None)}
    print("RESULT " + json.dumps(report))
