"""What reaching a stream's directories through a Spark Connect server costs, in one run.

    python benchmarks/connect_server_files.py [--steps 12] [--repeat 20] [--remote sc://host:port]

A stream on a Connect server of another machine reaches its checkpoint directory through
the server, each file operation a small job (``runners/spark/connect/server_files.py``);
one on this machine reads and writes the files directly. This runs both against one
server (``--remote``, else one started here by tools/connect_server.py; the through-the-
server mode is chosen by taking that server for one elsewhere, as the tests do) and prints:

1. one file operation (a journal entry written: temporary, fsync, rename; a folder listed),
   directly and as a job on the server: the median over ``--repeat`` and the ratio;
2. a watched folder of ``--steps`` JSON files read one per step, with ``--checkpoint_dir``
   and a checkpoint every 3 steps, summed per key in fixed windows: the median and mean
   step time of each mode, their ratio and difference (the per-step overhead), and the
   server's file jobs while each step ran (the lease's heartbeat thread's included). Both runs must give the same sums, or the script fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sparkbeam as beam
from sparkbeam import window
from sparkbeam.io import commits
from sparkbeam.options.pipeline_options import PipelineOptions


def _median_seconds(action: Any, repeat: int) -> float:
    seconds = []
    for index in range(repeat):
        started = time.perf_counter()
        action(index)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def operations(remote: str, repeat: int) -> None:
    from sparkbeam.runners.spark.connect.server_files import ServerFileSystem
    from sparkbeam.runners.spark.connect.session import ConnectTarget, connect_session

    files = ServerFileSystem(connect_session(ConnectTarget(remote, "--remote")))
    direct_root = tempfile.mkdtemp(prefix="sparkbeam-bench-direct-")
    served_root = tempfile.mkdtemp(prefix="sparkbeam-bench-served-")
    stop = commits.serve(served_root, files)
    try:
        files.list_names(served_root)  # the session's first job (its Python workers) left out
        entry = json.dumps({"step": 0, "now": 0, "sources": {"0": {"batches": [1, 2], "exhausted": False}}}).encode()
        for what, action in (
            ("write a journal entry", lambda root: lambda i: commits.write_bytes(commits.join(root, f"{i:010d}.json"), entry, private=True)),
            ("list a folder", lambda root: lambda i: commits.list_names(root)),
        ):
            direct = _median_seconds(action(direct_root), repeat)
            served = _median_seconds(action(served_root), repeat)
            print(f"{what:22s} directly {direct * 1000:8.2f} ms   through the server {served * 1000:8.1f} ms   ({served / direct:.0f}x)")
    finally:
        stop()
        commits.remove(direct_root)
        commits.remove(served_root)


def _write_files(directory: str, steps: int) -> None:
    os.makedirs(directory)
    for index in range(steps):
        path = os.path.join(directory, f"f{index:03d}.json")
        with open(path, "w") as handle:
            for n in range(20):
                handle.write(json.dumps({"key": f"k{n % 4}", "value": n, "ts": index * 30 + n}) + "\n")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))


def stream(remote: str, steps: int, through_server: bool) -> tuple[list[float], list[Any], list[int]]:
    from sparkbeam.runners.core.loop.steps import StepLoop
    from sparkbeam.runners.spark.connect import server_files

    base = tempfile.mkdtemp(prefix="sparkbeam-bench-stream-")
    _write_files(os.path.join(base, "in"), steps)
    seconds: list[float] = []
    jobs = [0]
    per_step: list[int] = []  # the server's file jobs while each step ran
    original, elsewhere, run = StepLoop.run_step, server_files.server_is_elsewhere, server_files.ServerFileSystem.run

    def timed(loop: Any) -> None:
        started, before = time.perf_counter(), jobs[0]
        try:
            original(loop)
        finally:
            seconds.append(time.perf_counter() - started)
            per_step.append(jobs[0] - before)

    def counted(self: Any, *ops: Any) -> Any:
        jobs[0] += 1
        return run(self, *ops)

    options = PipelineOptions(
        spark_remote=remote,
        available_now=True,
        checkpoint_dir=os.path.join(base, "ck"),
        checkpoint_interval=3,
        step_interval=0.0,
        state_partitions=2,
    )
    p = beam.Pipeline(options=options)
    rows = p | beam.io.ReadFromJsonStream(
        os.path.join(base, "in"), schema="key STRING, value INT, ts LONG", timestamp="ts", max_files_per_trigger=1
    )
    sums = beam.capture(rows | beam.Map(lambda r: (r.key, r.value)) | beam.WindowInto(window.FixedWindows(60)) | beam.CombinePerKey(sum))
    StepLoop.run_step = timed
    server_files.ServerFileSystem.run = counted
    if through_server:
        server_files.server_is_elsewhere = lambda target: True
    try:
        result = p.run()
    finally:
        StepLoop.run_step, server_files.server_is_elsewhere, server_files.ServerFileSystem.run = original, elsewhere, run
        commits.remove(base, missing_ok=True)
    found = sorted((repr(e.value), e.timestamp.micros) for e in result.emissions(sums))
    return seconds, found, per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--remote", help="a Connect server's URL (default: start one here)")
    args = parser.parse_args()
    from tools.connect_server import server_for

    with server_for(args.remote) as remote:
        operations(remote, args.repeat)
        shared, shared_out, _ = stream(remote, args.steps, through_server=False)
        served, served_out, jobs = stream(remote, args.steps, through_server=True)
    if shared_out != served_out:
        sys.exit("the two runs gave different sums")
    # The first step pays the source's query start: left out.
    rows = []
    for name, seconds in (("shared files", shared[1:]), ("through server", served[1:])):
        rows.append((statistics.median(seconds), statistics.fmean(seconds)))
        print(f"{name:15s} median {rows[-1][0] * 1000:7.0f} ms/step  mean {rows[-1][1] * 1000:7.0f} ms/step  over {len(seconds)} steps")
    print(
        f"through/shared: median {rows[1][0] / rows[0][0]:.2f}x (+{(rows[1][0] - rows[0][0]) * 1000:.0f} ms/step), "
        f"mean {rows[1][1] / rows[0][1]:.2f}x (+{(rows[1][1] - rows[0][1]) * 1000:.0f} ms/step)"
    )
    print(f"the server's file jobs per step: median {statistics.median(jobs[1:]):.0f}, most {max(jobs[1:])} (a checkpoint's step), all {jobs[1:]}")


if __name__ == "__main__":
    main()
