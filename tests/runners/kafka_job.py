"""A Kafka stream in its own process, for the kill tests: killed with SIGKILL and restarted.

    python kafka_job.py BOOTSTRAP TOPIC OUT_TOPIC OUTPUT_DIR CHECKPOINT_DIR TIMELINE_LOG [pipeline flags]

Reads TOPIC (scores as ``team,score`` values stamped with their CreateTime), at most
``per_step`` records per step (``maxOffsetsPerTrigger``: 40, unless a test calls ``main``
with another), available-now so that the run ends when it has read what the topic held at
start; sums scores per team in 60-second windows; writes the
totals with an exactly-once file sink and to OUT_TOPIC with WriteToKafka, and a running
sequence number per team (state that a lost or replayed step would repeat or skip).
"""

from __future__ import annotations

import sys

import sparkbeam as beam
from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.transforms import window
from sparkbeam.transforms.userstate import ReadModifyWriteStateSpec

STRING = "org.apache.kafka.common.serialization.StringSerializer"


class RunningSequence(beam.DoFn):
    LAST = ReadModifyWriteStateSpec("last", beam.coders.VarIntCoder())

    def process(self, element, last=beam.DoFn.StateParam(LAST)):
        number = (last.read() or 0) + 1
        last.write(number)
        yield f"{element[0]},{number}"


def format_total(team_total, window=beam.DoFn.WindowParam):
    team, total = team_total
    return team, f"{int(window.start)},{total}"


def build(p, bootstrap: str, topic: str, out_topic: str, output_dir: str, per_step: int = 40) -> None:
    scores = p | "ReadScores" >> beam.io.ReadFromKafka(
        {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"},
        topic,
        value_deserializer="org.apache.kafka.common.serialization.StringDeserializer",
        timestamp_policy="CreateTime",
        watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=20),
        options={"maxOffsetsPerTrigger": str(per_step)},
    )
    team_scores = scores | "Parse" >> beam.MapTuple(lambda _, value: (value.split(",")[0], int(value.split(",")[1])))
    team_scores | "Sequence" >> beam.ParDo(RunningSequence()) | "WriteSequence" >> beam.io.WriteToText(f"{output_dir}/sequence")
    totals = (
        team_scores
        | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
        | "Sum" >> beam.CombinePerKey(sum)
        | "Format" >> beam.Map(format_total)
    )
    totals | "Lines" >> beam.MapTuple(lambda team, rest: f"{team},{rest}") | "WriteTotals" >> beam.io.WriteToText(f"{output_dir}/totals")
    totals | "WriteKafka" >> beam.io.WriteToKafka({"bootstrap.servers": bootstrap}, out_topic, key_serializer=STRING, value_serializer=STRING)


def main(
    bootstrap: str, topic: str, out_topic: str, output_dir: str, checkpoint_dir: str, timeline_log: str, *flags: str, per_step: int = 40
) -> None:
    # ``--spark_remote=sc://...`` among the flags runs it through a Spark Connect server,
    # whose master is its own.
    remote = any(flag.startswith("--spark_remote") for flag in flags)
    options = PipelineOptions(
        list(flags),
        **({} if remote else {"spark_master": "local[2]"}),
        available_now=True,
        checkpoint_dir=checkpoint_dir,
        checkpoint_interval=3,
        step_interval=0.2,
        timeline_log=timeline_log,
        state_partitions=2,
    )
    with beam.Pipeline(options=options) as p:
        build(p, bootstrap, topic, out_topic, output_dir, per_step)


if __name__ == "__main__":
    main(*sys.argv[1:])
