"""Total score per team per hour of event time, over the game log that ships with sparkbeam.

Beam's mobile-gaming example, unchanged but for ``import sparkbeam as beam``::

    python -m sparkbeam.examples.hourly_team_score            # embedded Spark local[*]
    python -m sparkbeam.examples.hourly_team_score --spark_master=local-cluster[2,1,1024]

Each log line is ``user,team,score,timestamp_ms,readable_time``; lines arrive out of
event-time order, and the fixed one-hour windows put each score in its hour.
"""

from __future__ import annotations

import argparse
import os
import sys

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.transforms import window

SAMPLE_DATA = os.path.join(os.path.dirname(__file__), "data", "game_scores.csv")


class ParseGameEvent(beam.DoFn):
    """A log line to (team, score) stamped with the event time; bad lines go to 'bad_lines'."""

    def process(self, line):
        try:
            _user, team, score, timestamp_ms, _readable = line.split(",")
            yield window.TimestampedValue((team, int(score)), int(timestamp_ms) / 1000.0)
        except ValueError:
            yield beam.pvalue.TaggedOutput("bad_lines", line)


def format_row(team_score, window=beam.DoFn.WindowParam):
    team, total = team_score
    hour = window.start.to_utc_datetime().strftime("%Y-%m-%d %H:%M")
    return f"{hour}  {team:<16} {total:>6}"


def build(pipeline, input_path, output_prefix=None):
    parsed = (
        pipeline
        | "ReadLog" >> beam.io.ReadFromText(input_path)
        | "Parse" >> beam.ParDo(ParseGameEvent()).with_outputs("bad_lines", main="scores")
    )
    totals = (
        parsed.scores
        | "HourlyWindows" >> beam.WindowInto(window.FixedWindows(3600))
        | "SumPerTeam" >> beam.CombinePerKey(sum)
        | "Format" >> beam.Map(format_row)
    )
    if output_prefix:
        totals | "Write" >> beam.io.WriteToText(output_prefix, file_name_suffix=".txt")
    return totals


def main(argv=None):
    # --help shows this example's flags, then sparkbeam's pipeline options (PipelineOptions
    # prints those and exits when it sees --help).
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("-h", "--help", action="store_true", help="show this help and the pipeline options, then exit")
    parser.add_argument("--input", default=SAMPLE_DATA, help="log file or glob (default: the shipped sample)")
    parser.add_argument("--output", default=None, help="also write results to PREFIX-SSSSS-of-NNNNN.txt")
    known, pipeline_args = parser.parse_known_args(argv)
    if known.help:
        parser.print_help()
        print()
        pipeline_args = ["--help"]
    pipeline = beam.Pipeline(options=PipelineOptions(pipeline_args))
    totals = beam.capture(build(pipeline, known.input, known.output))
    result = pipeline.run()
    # The rows are printed here, on the driver: a print inside a DoFn would run on an
    # executor, whose output goes to that executor's log on a cluster.
    for row in sorted(result.emissions(totals).values()):
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
