"""Executor loss on a standalone cluster (#27 item 4): a worker and its executor killed with
SIGKILL at random moments of a stream, the output compared with an uninterrupted run's.

    python benchmarks/executor_loss.py --kills 5 --files 40

Starts a master and two workers from pip's PySpark (one core each, as the README's cluster
section does), writes ``--files`` JSON-lines files, and runs the stream below through
``--spark_master`` with a checkpoint directory (every 3 steps, so the write-ahead log and old
state files are pruned while it runs): once uninterrupted, then ``--kills`` times with one
worker's process group (the worker's JVM, its executor and the executor's Python workers)
killed with SIGKILL once a random number of steps has read data, a random fraction of a
second later; a new worker replaces it, as a cluster manager would. The driver is never
restarted: a run counts as survived if it ends by itself with status 0 and every committed
output (totals, timer counts, running sequences, dead letters) equals the uninterrupted
run's. It prints one line per run and a summary.

The stream (``job``, run as this file's own subcommand, so that its functions travel to the
executors by value): 60-second windows summed per team with ``CombinePerKey``; a stateful
DoFn counting each team's records per window, emitted by an event-time timer at the
window's end; a stateful DoFn numbering each team's records; a file sink per output, one
directory per step.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

SCHEMA = "user STRING, team STRING, score INT, ts DOUBLE"
OUTPUTS = ("totals", "counts", "sequence", "bad")


# -- the stream (runs in the driver's process: ``executor_loss.py job ...``) ---------------
def build(p: Any, input_dir: str, output_dir: str) -> None:
    import sparkbeam as beam
    from sparkbeam.io.watermarks import BoundedOutOfOrdernessWatermarkEstimator
    from sparkbeam.transforms import window
    from sparkbeam.transforms.userstate import (
        CombiningValueStateSpec,
        ReadModifyWriteStateSpec,
        TimeDomain,
        TimerSpec,
        on_timer,
    )

    class CountAtWindowEnd(beam.DoFn):
        COUNT = CombiningValueStateSpec("count", sum)
        END = TimerSpec("end", TimeDomain.WATERMARK)

        def process(self, element, count=beam.DoFn.StateParam(COUNT), end=beam.DoFn.TimerParam(END), w=beam.DoFn.WindowParam):
            count.add(1)
            end.set(w.max_timestamp())

        @on_timer(END)
        def emit(self, team=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT), w=beam.DoFn.WindowParam):
            yield f"{team},{int(w.start)},{count.read()}"

    class Numbered(beam.DoFn):
        LAST = ReadModifyWriteStateSpec("last", beam.coders.VarIntCoder())

        def process(self, element, last=beam.DoFn.StateParam(LAST)):
            number = (last.read() or 0) + 1
            last.write(number)
            yield f"{element[0]},{number}"

    def format_total(team_total, w=beam.DoFn.WindowParam):
        return f"{team_total[0]},{int(w.start)},{team_total[1]}"

    good, bad = p | "ReadScores" >> beam.io.ReadFromJsonStream(
        input_dir, schema=SCHEMA, timestamp="ts",
        watermark=BoundedOutOfOrdernessWatermarkEstimator(max_delay=20), max_files_per_trigger=1,
    ).with_exception_handling()
    scores = good | "TeamScore" >> beam.Map(lambda row: (row.team, row.score))
    minutes = scores | "Minutes" >> beam.WindowInto(window.FixedWindows(60))
    minutes | "CountAtEnd" >> beam.ParDo(CountAtWindowEnd()) | "WriteCounts" >> beam.io.WriteToText(f"{output_dir}/counts")
    scores | "Number" >> beam.ParDo(Numbered()) | "WriteSequence" >> beam.io.WriteToText(f"{output_dir}/sequence")
    minutes | "Sum" >> beam.CombinePerKey(sum) | "Format" >> beam.Map(format_total) | "WriteTotals" >> beam.io.WriteToText(f"{output_dir}/totals")
    bad | "Raw" >> beam.Map(lambda record: record.record) | "WriteBad" >> beam.io.WriteToText(f"{output_dir}/bad")


def job(argv: list[str]) -> None:
    import sparkbeam as beam
    from sparkbeam.options.pipeline_options import PipelineOptions

    parser = argparse.ArgumentParser(prog="executor_loss.py job")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    known, pipeline_args = parser.parse_known_args(argv)
    options = PipelineOptions(pipeline_args, checkpoint_interval=3, step_interval=0.2, state_partitions=2, available_now=True)
    with beam.Pipeline(options=options) as p:
        build(p, known.input, known.output)


# -- the input and the outputs --------------------------------------------------------------
def write_input(directory: str, files: int, records: int, seed: int) -> None:
    """JSON-lines files, read one per step in name order; a few broken lines (dead letters).
    File i covers [30 i, 30 i + 29] s out of order, within the watermark's 20 s delay."""
    os.makedirs(directory)
    rng = random.Random(seed)
    for index in range(files):
        lines = []
        for record in range(records):
            ts = index * 30 + rng.uniform(0, 15) + (record % 2) * 14
            lines.append(json.dumps({"user": f"u{record}", "team": f"team{rng.randrange(5)}", "score": rng.randrange(1, 10), "ts": ts}))
        if index % 7 == 3:
            lines.append('{"user": "broken", ')
        path = os.path.join(directory, f"scores-{index:04d}.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))


def committed(output_dir: str) -> dict[str, collections.Counter]:
    """Every committed line of each output (one directory per step and sink)."""
    found: dict[str, collections.Counter] = {}
    for name in OUTPUTS:
        lines: collections.Counter = collections.Counter()
        for path in glob.glob(os.path.join(output_dir, f"{name}-step-*", "*")):
            with open(path, encoding="utf-8") as handle:
                lines.update(line.rstrip("\n") for line in handle)
        found[name] = lines
    return found


def steps_with_data(log: str) -> int:
    count = 0
    try:
        with open(log, encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                count += record["stage_id"] == 0 and record["elements_in"] > 0
    except FileNotFoundError:
        return 0
    return count


# -- the cluster ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A standalone master and its workers, each worker in a process group of its own (its
    executors are its children: a SIGKILL to the group takes them down together)."""

    def __init__(self, base: str, cores: int = 1, memory: str = "1g") -> None:
        import pyspark

        self.base = base
        self.spark_home = os.path.dirname(pyspark.__file__)
        self.port, self.webui = free_port(), free_port()
        self.cores, self.memory = cores, memory
        self.env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "")}
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.started = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, arguments: list[str]) -> subprocess.Popen:
        with open(os.path.join(self.base, f"{name}.log"), "w") as log:
            return subprocess.Popen(
                [os.path.join(self.spark_home, "bin", "spark-class"), *arguments],
                stdout=log, stderr=log, env=self.env, start_new_session=True,
            )

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=10) as response:
            return json.load(response)

    def wait(self, condition: Any, what: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if condition(self.state()):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        msg = f"the standalone cluster: {what} not within {seconds:.0f} s (logs in {self.base})"
        raise RuntimeError(msg)

    def start(self, workers: int = 2) -> None:
        self.master = self._spawn("master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui),
        ])
        self.wait(lambda s: s["status"] == "ALIVE", "the master up")
        for _ in range(workers):
            self.add_worker()

    def alive_workers(self) -> int:
        return int(self.state()["aliveworkers"])

    def add_worker(self) -> None:
        self.started += 1
        before = self.alive_workers()
        work = os.path.join(self.base, f"work-{self.started}")
        self.workers.append(self._spawn(f"worker-{self.started}", [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
            "--webui-port", str(free_port()), "--work-dir", work, self.url,
        ]))
        self.wait(lambda s: s["aliveworkers"] >= before + 1, "a new worker registered")

    def kill_worker(self, rng: random.Random) -> int:
        """SIGKILL to one live worker's process group (the worker, its executor, the
        executor's Python workers); its pid."""
        live = [w for w in self.workers if w.poll() is None]
        victim = rng.choice(live)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        self.workers.remove(victim)
        return victim.pid

    def stop(self) -> None:
        for process in [*self.workers, *([self.master] if self.master else [])]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in [*self.workers, *([self.master] if self.master else [])]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


# -- the runs --------------------------------------------------------------------------------
def run_stream(cluster: Cluster, input_dir: str, run_dir: str, kill: tuple[int, float] | None, rng: random.Random, timeout: float) -> dict[str, Any]:
    """One run of the stream; with ``kill`` = (steps, delay): a worker killed ``delay`` s
    after ``steps`` steps read data, and replaced. The driver is not restarted."""
    os.makedirs(run_dir)
    log, stderr_path = os.path.join(run_dir, "timeline.jsonl"), os.path.join(run_dir, "stderr.log")
    argv = [
        sys.executable, os.path.abspath(__file__), "job", f"--input={input_dir}", f"--output={run_dir}/out",
        f"--checkpoint_dir={run_dir}/ck", f"--timeline_log={log}", f"--spark_master={cluster.url}",
    ]
    started = time.monotonic()
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                                   env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    killed_at: int | None = None
    try:
        while process.poll() is None:
            if kill is not None and killed_at is None and steps_with_data(log) >= kill[0]:
                time.sleep(kill[1])
                if process.poll() is None:
                    cluster.kill_worker(rng)
                    killed_at = steps_with_data(log)
                    cluster.add_worker()  # replaced, as a cluster manager would
            if time.monotonic() - started > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                break
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    with open(stderr_path, encoding="utf-8", errors="replace") as handle:
        err = handle.read()
    return {
        "status": process.returncode, "seconds": time.monotonic() - started, "killed_after": killed_at,
        "outputs": committed(os.path.join(run_dir, "out")), "stderr": err, "steps": steps_with_data(log),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5, help="runs with a worker killed (default 5)")
    parser.add_argument("--files", type=int, default=40, help="input files, one per step (default 40)")
    parser.add_argument("--records", type=int, default=50, help="records per file (default 50)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take")
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories (printed)")
    args = parser.parse_args(argv)
    # SIGTERM stops the cluster too (its processes are in sessions of their own).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    base = tempfile.mkdtemp(prefix="sparkbeam-executor-loss-")
    cluster = Cluster(base)
    results = []
    try:
        cluster.start(workers=2)
        input_dir = os.path.join(base, "incoming")
        write_input(input_dir, args.files, args.records, args.seed)
        reference = run_stream(cluster, input_dir, os.path.join(base, "reference"), None, rng, args.timeout)
        if reference["status"] != 0:
            print(f"the uninterrupted run failed (status {reference['status']}):\n{reference['stderr'][-3000:]}")
            return 1
        lines = {name: sum(counter.values()) for name, counter in reference["outputs"].items()}
        print(f"uninterrupted: {reference['seconds']:.1f} s, {reference['steps']} steps with data, lines {lines}", flush=True)
        for index in range(args.kills):
            kill = (rng.randrange(2, max(3, args.files - 3)), round(rng.uniform(0, 1.5), 2))
            result = run_stream(cluster, input_dir, os.path.join(base, f"kill-{index}"), kill, rng, args.timeout)
            exact = result["outputs"] == reference["outputs"]
            survived = result["status"] == 0 and exact
            results.append((result, survived))
            print(
                f"kill {index + 1}: worker killed {kill[1]:.2f} s after step {kill[0]} read data -> status {result['status']}, "
                f"{'output exact' if exact else 'OUTPUT DIFFERS'}, {result['seconds']:.1f} s "
                f"({result['seconds'] / reference['seconds']:.2f}x uninterrupted)",
                flush=True,
            )
            if not survived:
                tail = [line for line in result["stderr"].splitlines() if line.strip()][-12:]
                print("  " + "\n  ".join(tail), flush=True)
        survived = sum(1 for _, ok in results if ok)
        print(f"survived {survived} of {len(results)} executor losses without a driver restart")
        return 0 if survived == len(results) else 1
    finally:
        cluster.stop()
        if args.keep:
            print(f"runs kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["job"]:
        job(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
