"""Start-up cost: an empty pipeline, the share of it that is Spark's own start, and the time
to first output of the README's real-stream example (#15, Speed).

Every figure is a fresh process, timed from its spawn (cold: no warm JVM, no warm imports):

- ``python``: an interpreter that does nothing (the floor every figure includes);
- ``spark``: import PySpark, start a ``local[2]`` SparkSession, stop it;
- ``empty pipeline``: ``with beam.Pipeline(...) as p: p | beam.Create([])`` on Spark;
- ``first output``: the README's ``team_totals.py`` on a folder of JSON-lines files, until its
  first step directory of window totals is committed (then stopped with SIGINT).

Usage: python benchmarks/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from workloads import busy_warning

MASTER = "local[2]"
CONF = "spark.ui.enabled=false"

PYTHON = "pass"
SPARK = f"""
from pyspark.sql import SparkSession
SparkSession.builder.master({MASTER!r}).config('spark.ui.enabled', 'false').getOrCreate().stop()
"""
EMPTY = f"""
import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
with beam.Pipeline(options=PipelineOptions(spark_master={MASTER!r}, spark_conf=[{CONF!r}], quiet=True)) as p:
    p | beam.Create([])
"""
# The README's real-stream example, its paths given as arguments.
TEAM_TOTALS = '''
import sys

import sparkbeam as beam
from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.transforms import window

incoming, out, ck = sys.argv[1:4]

def show(team_score, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
    team, score = team_score
    return f"{window.start.to_utc_datetime():%H:%M}-{window.end.to_utc_datetime():%H:%M} {team} {score} ({pane.timing.name})"

options = PipelineOptions(sys.argv[4:], checkpoint_dir=ck, step_interval=5)
with beam.Pipeline(options=options) as p:
    scores, bad = p | "Scores" >> beam.io.ReadFromJsonStream(
        incoming, schema="user STRING, team STRING, score INT, ts TIMESTAMP",
        timestamp="ts",
        watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=30),
        allowed_delay=600, idle_timeout=60,
    ).with_exception_handling()
    (scores
        | beam.Map(lambda r: (r.team, r.score))
        | beam.WindowInto(window.FixedWindows(60))
        | beam.CombinePerKey(sum)
        | beam.Map(show)
        | beam.io.WriteToText(out + "/team-totals"))
'''


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def timed(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def first_output(workdir: str) -> float:
    """Seconds from spawning team_totals.py to its first committed window totals."""
    incoming, out, ck = (os.path.join(workdir, name) for name in ("incoming", "out", "ck"))
    os.makedirs(incoming)
    script = os.path.join(workdir, "team_totals.py")
    with open(script, "w") as handle:
        handle.write(TEAM_TOTALS)
    with open(os.path.join(incoming, "events-0.jsonl"), "w") as handle:
        for second in range(0, 180, 3):  # three minutes: the first windows close at once
            ts = f"2024-05-01 08:{second // 60:02d}:{second % 60:02d}"
            handle.write(json.dumps({"user": f"u{second % 7}", "team": ["red", "blue"][second % 2], "score": 1 + second % 5, "ts": ts}) + "\n")
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, script, incoming, out, ck, f"--spark_master={MASTER}", f"--spark_conf={CONF}", "--quiet"],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        while not glob.glob(os.path.join(out, "team-totals-step-*", "*")):
            if process.poll() is not None:
                msg = f"team_totals.py ended with status {process.returncode} before writing anything"
                raise SystemExit(msg)
            if time.perf_counter() - started > 600:
                msg = "no output in 600 s"
                raise SystemExit(msg)
            time.sleep(0.05)
        return time.perf_counter() - started
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (the median is printed)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    python = statistics.median(timed(PYTHON) for _ in range(args.repeats))
    spark = statistics.median(timed(SPARK) for _ in range(args.repeats))
    empty = statistics.median(timed(EMPTY) for _ in range(args.repeats))
    outputs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="sparkbeam-startup-") as workdir:
            outputs.append(first_output(workdir))
    first = statistics.median(outputs)
    spark_share = (spark - python) / (empty - python)
    print(f"{'what (median of ' + str(args.repeats) + ', fresh processes)':<44} {'seconds':>8}")
    print(f"{'python (an interpreter doing nothing)':<44} {python:8.2f}")
    print(f"{'Spark: import, local[2] session, stop':<44} {spark:8.2f}")
    print(f"{'empty pipeline (Create([]) on Spark)':<44} {empty:8.2f}")
    print(f"{'  of which Spark own start':<44} {spark - python:8.2f}  ({spark_share:.0%})")
    print(f"{'  of which sparkbeam':<44} {empty - spark:8.2f}  ({1 - spark_share:.0%})")
    print(f"{'real stream: first window totals committed':<44} {first:8.2f}  (runs: {', '.join(f'{s:.1f}' for s in outputs)})")
    load_after = os.getloadavg()[0]
    for line in busy_warning({"this benchmark": max(load_before, load_after) - 2.0}):
        print(line)


if __name__ == "__main__":
    main()
