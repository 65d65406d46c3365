"""Soak test of sparkbeam's real streaming: SIGKILL and restart many times, long rate runs.

Three parts, all by default (name some to run only them):

``kills``: a directory of JSON-lines files (``--files`` x ``--records`` scores, a few bad
lines) read as an available-now stream, one file per micro-batch, summed per team in
60-second windows and written with exactly-once file sinks, checkpointing every 3 steps.
Event time rises file by file with disorder well inside the watermark's 20 s, so nothing
is late however the micro-batches fall. One uninterrupted run is the reference; then the
job runs in a fresh directory and is killed with SIGKILL (the whole process group: the
Python driver, Spark's JVM and its workers) ``--kills`` times, each time once it has
logged 1 to 4 steps that read data plus a random 0-2 s, and restarted until it finishes;
when a round finishes with kills left, a new round starts in a new directory. Each round
must commit the same lines as the uninterrupted run and the totals computed here in
plain Python (nothing lost, nothing duplicated), the same dead letters, and a timeline log
(all its runs appended) in which a replayed step has the watermarks and element counts it
had before and no stage's watermark goes back. Recovery time is from starting the process
to its first step logged, and to its first step beyond what the killed runs had reached.

``rate``: Spark's rate source (``--rate`` rows/s, 2 partitions) keyed by value % 100, in
10-second fixed windows, summed and counted per key, written to text sinks, with a step
every second and a checkpoint every 10 steps, for ``--rate-seconds`` (stopped cleanly by
``max_steps``). From its timeline log, per bucket of processing time: throughput, step
latency, watermark lag of the Sum stage, and its state (keys, windows), which must stay
bounded; the counts written per closed window must be exactly rate x 10, and the source
stage must take in each row once (its output feeds two groupings). Then the peer: a
hand-written Structured Streaming query on the same source (``withWatermark`` 0 s,
``groupBy(window, key)`` sum and count, append mode into the ``noop`` sink) for
``--peer-seconds``, with its throughput, batch durations, watermark lag and state rows
from ``recentProgress``, and the sparkbeam / peer ratios.

``memory``: the rate source (``--memory-rate`` rows/s, 2 partitions) through a
``Reshuffle`` (a random key per row), keyed by value % 100, summed in 10-second windows,
the sums captured with a log and written to a text sink, with a timeline log and
``--timeline_retention_steps`` = ``--retention-steps``, for ``--memory-minutes`` of
wall-clock time (default 30; however many steps that is), then interrupted (SIGINT).
A thread in the job's process samples every ``--sample-seconds`` (default 60): the driver's
RSS and the objects its garbage collector tracks, the JVM's RSS, its heap in use after a
forced full collection and the block managers' storage memory (from the SparkContext), and
the Python workers' count and PSS. It prints the series with the step reached, the
Reshuffle's state keys and Sum's open windows, and the Theil-Sen slope of each series
(after the kept history filled and 5 minutes, and over the second half). Checks: driver
RSS, JVM live heap and storage memory flat (the second half's trend moves each by under 5%
of its level, or 2 MB, over the run), no Reshuffle key left in state after any step, a
timeline record for every step, and every Sum pane in the capture's log.

    python benchmarks/stream_soak.py                                   # all three, full size
    python benchmarks/stream_soak.py --kills 3 --rate-seconds 60 --peer-seconds 30
    python benchmarks/stream_soak.py kills --kills 10 --seed 7
    python benchmarks/stream_soak.py memory --memory-minutes 3 --sample-seconds 20 --retention-steps 30

Exit status 0 when every check held, 1 otherwise. Each run is a subprocess
(``stream_soak_jobs.py kill|rate|memory ...``); the parts are stream_soak_kills.py,
stream_soak_rate.py and stream_soak_memory.py.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time

# Sibling modules: run as a file, this script has its own directory on sys.path. Each part
# is a module of its own.
from measuring import load_average
from stream_soak_kills import kills_part
from stream_soak_memory import memory_part
from stream_soak_rate import peer_part, rate_part


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", metavar="kills|rate|memory", help="what to run (default: all three)")
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs in all (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="round r draws its kill moments from seed + r - 1 (default 1)")
    parser.add_argument("--files", type=int, default=40, help="input files of the kill job, one per micro-batch (default 40)")
    parser.add_argument("--records", type=int, default=500, help="records per file (default 500)")
    parser.add_argument("--job-timeout", type=float, default=900, help="seconds one run of the kill job may take (default 900)")
    parser.add_argument("--rate", type=int, default=2000, help="rows per second of the rate source (default 2000)")
    parser.add_argument("--rate-seconds", type=int, default=600, help="length of the sparkbeam rate run (default 600)")
    parser.add_argument("--peer-seconds", type=int, default=120, help="length of the Structured Streaming run (default 120; 0 skips it)")
    parser.add_argument("--step-interval", type=float, default=1.0, help="seconds per step of the rate run and the peer (default 1.0)")
    parser.add_argument("--memory-minutes", type=float, default=30, help="length of the memory run in minutes (default 30)")
    parser.add_argument("--memory-rate", type=int, default=500, help="rows per second of the memory run (default 500)")
    parser.add_argument("--sample-seconds", type=float, default=60, help="seconds between memory samples (default 60)")
    parser.add_argument("--retention-steps", type=int, default=300,
                        help="--timeline_retention_steps of the memory run (default 300, so that the kept history is full "
                             "early in the run even when a loaded machine takes a step every few seconds; the option's "
                             "own default is 1000)")
    parser.add_argument("--workdir", default=None, help="where inputs, outputs and checkpoints go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep every round's directory (failed ones are always kept)")
    args = parser.parse_args(argv)
    args.parts = args.parts or ["kills", "rate", "memory"]
    if set(args.parts) - {"kills", "rate", "memory"}:
        parser.error(f"the parts are kills, rate and memory, got {' '.join(args.parts)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="sparkbeam-soak-")
    os.makedirs(workdir, exist_ok=True)
    import pyspark

    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M}, python {sys.version.split()[0]}, pyspark {pyspark.__version__}, {os.cpu_count()} cores, "
          f"load average {load_average()}; work in {workdir}")
    started, ok = time.monotonic(), True
    if "kills" in args.parts:
        ok = kills_part(args, workdir) and ok
        print(f"   load average now {load_average()}")
    if "rate" in args.parts:
        rate_ok, figures = rate_part(args, workdir)
        ok = ok and rate_ok
        print(f"   load average now {load_average()}")
        if args.peer_seconds:
            ok = peer_part(args, workdir, figures) and ok
            print(f"   load average now {load_average()}")
    if "memory" in args.parts:
        ok = memory_part(args, workdir) and ok
        print(f"   load average now {load_average()}")
    print(f"\n{'all checks held' if ok else 'SOME CHECKS FAILED'}; {time.monotonic() - started:.0f} s in all")
    if ok and args.workdir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
