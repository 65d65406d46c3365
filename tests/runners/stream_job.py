"""A real stream run in its own process, for the crash tests: killed with SIGKILL and restarted.

    python stream_job.py INPUT_DIR OUTPUT_DIR CHECKPOINT_DIR TIMELINE_LOG [--spark_remote=sc://HOST:PORT]

Reads the JSON-lines files of INPUT_DIR as a stream (one file per micro-batch, available-now
so the run ends when it has read them all), sums scores per team in 60-second windows, and
writes the totals and the dead letters with exactly-once file sinks. Two stateful DoFns
write too: per team and window, the count of records emitted by an event-time timer at the
window's end (``counts``); per team, a running sequence number for each record
(``sequence``), which a lost or replayed state would repeat or skip.
"""

from __future__ import annotations

import pathlib
import sys

import sparkbeam as beam
from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.transforms import window
from sparkbeam.transforms.userstate import (
    CombiningValueStateSpec,
    ReadModifyWriteStateSpec,
    TimeDomain,
    TimerSpec,
    on_timer,
)

SCHEMA = "user STRING, team STRING, score INT, ts DOUBLE"


def format_total(team_total, window=beam.DoFn.WindowParam):
    team, total = team_total
    return f"{team},{int(window.start)},{total}"


class CountAtWindowEnd(beam.DoFn):
    COUNT = CombiningValueStateSpec("count", sum)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, element, count=beam.DoFn.StateParam(COUNT), end=beam.DoFn.TimerParam(END), w=beam.DoFn.WindowParam):
        count.add(1)
        end.set(w.max_timestamp())

    @on_timer(END)
    def emit(self, team=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT), w=beam.DoFn.WindowParam):
        yield f"{team},{int(w.start)},{count.read()}"


class RunningSequence(beam.DoFn):
    LAST = ReadModifyWriteStateSpec("last", beam.coders.VarIntCoder())

    def process(self, element, last=beam.DoFn.StateParam(LAST)):
        number = (last.read() or 0) + 1
        last.write(number)
        yield f"{element[0]},{number}"


def build(p, input_dir: str, output_dir: str) -> None:
    good, bad = p | "ReadScores" >> beam.io.ReadFromJsonStream(
        input_dir,
        schema=SCHEMA,
        timestamp="ts",
        watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=20),
        max_files_per_trigger=1,
    ).with_exception_handling()
    team_scores = good | "TeamScore" >> beam.Map(lambda row: (row.team, row.score))
    minutes = team_scores | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
    minutes | "CountAtEnd" >> beam.ParDo(CountAtWindowEnd()) | "WriteCounts" >> beam.io.WriteToText(f"{output_dir}/counts")
    team_scores | "Sequence" >> beam.ParDo(RunningSequence()) | "WriteSequence" >> beam.io.WriteToText(f"{output_dir}/sequence")
    (
        minutes
        | "Sum" >> beam.CombinePerKey(sum)
        | "Format" >> beam.Map(format_total)
        | "WriteTotals" >> beam.io.WriteToText(f"{output_dir}/totals", file_name_suffix=".txt")
    )
    bad | "Raw" >> beam.Map(lambda record: record.record) | "WriteBad" >> beam.io.WriteToText(f"{output_dir}/bad")


def main(input_dir: str, output_dir: str, checkpoint_dir: str, timeline_log: str, *flags: str) -> None:
    # ``--spark_conf k=v`` among the flags adds to the job's own settings (the object store
    # tests pass the s3a connector's jars and settings so).
    rest, extra = list(flags), []
    # ``--files_through_server=RECORD``: run as if the Connect server were on another
    # machine, every direct access to the stream's directories refused and appended to
    # RECORD (tests/runners/server_files_guard.py).
    record = next((flag.split("=", 1)[1] for flag in rest if flag.startswith("--files_through_server=")), None)
    if record is not None:
        if __name__ == "__main__":  # run as a script: the tests package from its checkout
            sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
        from tests.runners.server_files_guard import through_server

        rest.remove(f"--files_through_server={record}")
        watched = (input_dir, output_dir, checkpoint_dir)
        with through_server(*watched, record=record):
            main(input_dir, output_dir, checkpoint_dir, timeline_log, *rest)
        return
    while "--spark_conf" in rest:
        at = rest.index("--spark_conf")
        extra.append(rest[at + 1])
        del rest[at : at + 2]
    # ``--spark_remote=sc://...`` among the flags runs it through a Spark Connect server,
    # whose settings are its own (the tests' server: local[2], two shuffle partitions).
    remote = any(flag.startswith("--spark_remote") for flag in rest)
    session = {} if remote else {
        "spark_master": "local[2]",
        "spark_conf": ["spark.ui.enabled=false", "spark.sql.shuffle.partitions=2", *extra],
    }
    options = PipelineOptions(
        rest,
        **session,
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
    main(*sys.argv[1:])
