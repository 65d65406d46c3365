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

Exit status 0 when every check held, 1 otherwise. Each run is a subprocess of this file
(``stream_soak_jobs.py kill|rate|memory ...``).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import glob
import itertools
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import measuring
from stream_soak_jobs import TEAMS

EVENT_START = 1_767_225_600  # 2026-01-01T00:00Z, in seconds


# -- what runs leave behind ---------------------------------------------------------------


class TimelineTail:
    """Follows a timeline log as runs append to it; a line cut short by a kill is skipped."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0
        self.pending = ""

    def new_records(self) -> list[dict]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                handle.seek(self.offset)
                text = handle.read()
                self.offset = handle.tell()
        except FileNotFoundError:
            return []
        *lines, self.pending = (self.pending + text).split("\n")
        return parse_lines(lines)


def parse_lines(lines: list[str]) -> list[dict]:
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # the line a kill cut short
    return records


def read_timeline(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return parse_lines(handle.read().split("\n"))


def committed(output_dir: str, name: str) -> collections.Counter:
    """Every line of the committed step directories (hidden temporary ones excluded)."""
    lines: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(output_dir, f"{name}-step-*", "*")):
        with open(path, encoding="utf-8") as handle:
            lines.update(line.rstrip("\n") for line in handle)
    return lines


def totals(lines: collections.Counter) -> collections.Counter:
    found: collections.Counter = collections.Counter()
    for line, times in lines.items():
        key, start, total = line.split(",")
        found[(key, int(start))] += int(total) * times
    return found


def timeline_problems(records: list[dict]) -> list[str]:
    """A replayed step must log what it logged before; no stage's watermark goes back; nothing late."""
    problems = []
    fields = ("input_watermark", "output_watermark", "elements_in", "elements_out", "dead_letters")
    by_stage: dict[str, dict[int, tuple]] = collections.defaultdict(dict)
    for record in records:
        seen = tuple(record[f] for f in fields)
        first = by_stage[record["stage"]].setdefault(record["step"], seen)
        if first != seen:
            problems.append(f"{record['stage']} step {record['step']}: {dict(zip(fields, seen))} on replay, {dict(zip(fields, first))} before")
        if record["dropped"]:
            why = {name: record[name] for name in record if name.endswith("_dropped") and record[name]}
            problems.append(f"{record['stage']} step {record['step']}: dropped {why}")
    for stage, steps in by_stage.items():
        ordered = [(s, steps[s]) for s in sorted(steps)]
        for (step_before, before), (step_after, after) in itertools.pairwise(ordered):
            if after[0] < before[0] or after[1] < before[1]:
                problems.append(f"{stage}: watermark went back from step {step_before} {before[:2]} to step {step_after} {after[:2]}")
    return problems[:10]


def start_job(arguments: list[str], stderr_path: str) -> subprocess.Popen:
    with open(stderr_path, "a", encoding="utf-8") as stderr:
        stderr.write(f"\n== {datetime.datetime.now().isoformat()} {' '.join(arguments)}\n")
        stderr.flush()
        return subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_soak_jobs.py"), *arguments],
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,  # os.killpg then takes Spark's JVM and workers down with the driver
        )


def tail(path: str, lines: int = 30) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return "".join(handle.readlines()[-lines:])


# -- part 1: kills --------------------------------------------------------------------------


def write_input(directory: str, files: int, records: int, seed: int) -> tuple[collections.Counter, int]:
    """The input files; the totals per (team, window start) they must give; the bad lines."""
    os.makedirs(directory)
    rng = random.Random(seed)
    expected: collections.Counter = collections.Counter()
    bad = 0
    for index in range(files):
        lines = []
        for record in range(records):
            # File i covers [30 i, 30 i + 29] s: out of order, yet the watermark (latest - 20 s)
            # never passes the next file's first event, whatever the micro-batches.
            ts = EVENT_START + index * 30 + rng.uniform(0, 15) + (record % 2) * 14
            team, score = rng.choice(TEAMS), rng.randrange(1, 100)
            expected[(team, int(ts // 60 * 60))] += score
            lines.append(json.dumps({"user": f"u{rng.randrange(1000)}", "team": team, "score": score, "ts": ts}))
        if index % 7 == 3:
            lines.insert(records // 2, '{"user": "broken", ')  # does not parse
            bad += 1
        if index % 11 == 5:
            lines.append(json.dumps({"user": "no-time", "team": "team0", "score": 1}))  # no event time
            bad += 1
        path = os.path.join(directory, f"scores-{index:04d}.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))  # the order they are read in
    return expected, bad


def run_attempt(paths: dict[str, str], kill: tuple[int, float, bool] | None, timeout: float) -> dict[str, Any]:
    """One run of the job, killed with SIGKILL ``delay`` s after it logged ``n`` steps with data
    (0: after its start; only steps beyond the previous runs' if ``new_only``), or left to finish."""
    before = read_timeline(paths["log"])
    reached = max((r["step"] for r in before), default=-1)
    follow = TimelineTail(paths["log"])
    started = time.monotonic()
    process = start_job(["kill", paths["in"], paths["out"], paths["ck"], paths["log"]], paths["stderr"])
    attempt: dict[str, Any] = {"first_step": None, "first_new_step": None, "killed": False, "in_replay": False, "error": None}
    data_steps, kill_time = 0, (started + kill[1] if kill is not None and kill[0] == 0 else None)
    while process.poll() is None:
        now = time.monotonic()
        for record in follow.new_records():
            attempt["first_step"] = attempt["first_step"] or now - started
            if record["step"] > reached and attempt["first_new_step"] is None:
                attempt["first_new_step"] = now - started
            if record["stage_id"] == 0 and record["elements_in"] > 0 and (record["step"] > reached or not (kill and kill[2])):
                data_steps += 1
        if kill is not None and kill_time is None and data_steps >= kill[0]:
            kill_time = now + kill[1]
        if (kill_time is not None and now >= kill_time) or now - started > timeout:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            attempt["killed"] = True
            attempt["in_replay"] = attempt["first_new_step"] is None
            if now - started > timeout:
                attempt["error"] = f"the job neither finished nor was killed in {timeout:.0f} s"
            break
        time.sleep(0.05)
    if not attempt["killed"] and process.returncode != 0:
        attempt["error"] = f"the job exited with status {process.returncode}:\n{tail(paths['stderr'])}"
    attempt["seconds"] = time.monotonic() - started
    return attempt


def round_paths(directory: str, input_dir: str) -> dict[str, str]:
    os.makedirs(directory, exist_ok=True)
    return {"in": input_dir, "out": f"{directory}/out", "ck": f"{directory}/ck", "log": f"{directory}/timeline.jsonl", "stderr": f"{directory}/stderr.log"}


def kills_part(args: argparse.Namespace, workdir: str) -> bool:
    print(f"\n== kills: {args.files} files x {args.records} records, {args.kills} kills with SIGKILL")
    started = time.monotonic()
    input_dir = f"{workdir}/kills-input"
    expected, bad_lines = write_input(input_dir, args.files, args.records, seed=7)
    print(f"   {len(expected)} (team, minute) totals expected, {bad_lines} bad lines; reference run ...", flush=True)
    reference = round_paths(f"{workdir}/kills-reference", input_dir)
    attempt = run_attempt(reference, None, args.job_timeout)
    lines, bad = committed(reference["out"], "totals"), committed(reference["out"], "bad")
    failures = [attempt["error"]] if attempt["error"] else []
    if totals(lines) != expected or any(times != 1 for times in lines.values()):
        failures.append(f"the uninterrupted run's totals differ from plain Python: {len(lines)} lines, {len(expected)} expected")
    if sum(bad.values()) != bad_lines:
        failures.append(f"the uninterrupted run wrote {sum(bad.values())} dead letters, {bad_lines} expected")
    failures += [f"uninterrupted: {p}" for p in timeline_problems(read_timeline(reference["log"]))]
    steps = 1 + max((r["step"] for r in read_timeline(reference["log"])), default=-1)
    print(f"   reference: {attempt['seconds']:.1f} s, {steps} steps, first step logged after {attempt['first_step'] or 0:.1f} s")
    header = f"{'round':>5} {'seed':>6} {'kills':>5} {'in replay':>9} {'runs':>5} {'steps':>5} {'seconds':>8}  result"
    print(header + "\n" + "-" * len(header), flush=True)
    kills_done = restarts = rounds = 0
    recoveries: list[tuple[float, float]] = []
    while kills_done < args.kills and not failures:
        seed = args.seed + rounds
        rng = random.Random(seed)
        rounds += 1
        paths = round_paths(f"{workdir}/kills-round-{rounds:03d}", input_dir)
        round_started, round_kills, in_replay, runs, stuck = time.monotonic(), 0, 0, 0, 0
        while True:
            # Kill once 1-4 steps with data are logged (replayed ones count) and 0-2 s more, or
            # (one in five) 5-30 s after the start, wherever the run is then (starting Spark,
            # recovering, replaying); after two runs that got nothing new, once a new step is logged.
            if kills_done >= args.kills:
                kill = None
            elif stuck >= 2:
                kill = (1, rng.uniform(0, 2.0), True)
            elif rng.random() < 0.2:
                kill = (0, rng.uniform(5.0, 30.0), False)
            else:
                kill = (rng.randint(1, 4), rng.uniform(0, 2.0), False)
            attempt = run_attempt(paths, kill, args.job_timeout)
            runs += 1
            if runs > 1 and attempt["first_step"] is not None:
                recoveries.append((attempt["first_step"], attempt["first_new_step"] or float("nan")))
            if attempt["error"]:
                failures.append(f"round {rounds} run {runs}: {attempt['error']}")
                break
            if not attempt["killed"]:
                break
            kills_done, round_kills, restarts = kills_done + 1, round_kills + 1, restarts + 1
            in_replay += attempt["in_replay"]
            stuck = stuck + 1 if attempt["first_new_step"] is None else 0
        got, got_bad = committed(paths["out"], "totals"), committed(paths["out"], "bad")
        problems = [] if failures else [f"round {rounds}: {p}" for p in timeline_problems(read_timeline(paths["log"]))]
        if not failures and got != lines:
            missing, extra = lines - got, got - lines
            problems.append(f"round {rounds}: committed totals differ: missing {sorted(missing)[:5]}, extra/duplicated {sorted(extra)[:5]}")
        if not failures and totals(got) != expected:
            problems.append(f"round {rounds}: totals differ from plain Python")
        if not failures and got_bad != bad:
            problems.append(f"round {rounds}: dead letters differ: {sorted((got_bad - bad) + (bad - got_bad))[:5]}")
        failures += problems
        round_steps = 1 + max((r["step"] for r in read_timeline(paths["log"])), default=-1)
        result = "ok" if not failures else "FAILED (kept in " + os.path.dirname(paths["out"]) + ")"
        print(f"{rounds:>5} {seed:>6} {round_kills:>5} {in_replay:>9} {runs:>5} {round_steps:>5} {time.monotonic() - round_started:>8.1f}  {result}", flush=True)
        if not failures and not args.keep:
            shutil.rmtree(os.path.dirname(paths["out"]), ignore_errors=True)
    to_first = [first for first, _ in recoveries]
    to_new = [new for _, new in recoveries if not math.isnan(new)] or [float("nan")]
    print(f"   kills {kills_done}, restarts {restarts}, rounds {rounds}, failures {len(failures)}, total {time.monotonic() - started:.0f} s")
    if recoveries:
        print(
            f"   recovery (process start -> first step logged): mean {statistics.fmean(to_first):.1f} s, median {statistics.median(to_first):.1f} s; "
            f"-> first step beyond the killed run's: mean {statistics.fmean(to_new):.1f} s, median {statistics.median(to_new):.1f} s ({sum(not math.isnan(new) for _, new in recoveries)} runs got there)"
        )
    for failure in failures:
        print(f"   FAILURE: {failure}")
    return not failures


# -- part 2: rate ---------------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def run_until_max_steps(arguments: list[str], stderr_path: str, planned_seconds: float) -> tuple[bool, float, float, str]:
    """Runs a job that stops by ``max_steps``, sampling its CPU; SIGINT only if it overruns
    1.5 times the plan + 240 s, SIGKILL a minute later. (ok, seconds, CPU seconds, stopped by)."""
    started = time.monotonic()
    process = start_job(arguments, stderr_path)
    cpu = measuring.TreeCpu(process.pid)
    deadline, stopped_by = started + planned_seconds * 1.5 + 240, "max_steps"
    while process.poll() is None:
        cpu.sample()
        if time.monotonic() > deadline and stopped_by == "max_steps":
            stopped_by = "SIGINT at the deadline"
            os.killpg(process.pid, signal.SIGINT)
            deadline += 60
        elif time.monotonic() > deadline:
            stopped_by = "SIGKILL after SIGINT"
            os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1.0)
    ok = process.returncode == 0 and stopped_by == "max_steps"
    if not ok:
        print(f"   FAILURE: the {arguments[0]} ended with status {process.returncode} ({stopped_by}):\n{tail(stderr_path)}")
    return ok, time.monotonic() - started, cpu.seconds, stopped_by


def run_for(arguments: list[str], stderr_path: str, seconds: float) -> tuple[bool, float, float, str]:
    """Runs a job for ``seconds`` of wall-clock time, sampling its CPU, then interrupts its
    driver (SIGINT; SIGKILL to the group if it has not ended two minutes later).
    (ok, seconds, CPU seconds, how it stopped): ok when it ran the whole time."""
    started = time.monotonic()
    process = start_job(arguments, stderr_path)
    cpu = measuring.TreeCpu(process.pid)
    stopped_by, kill_at = "itself, before the time was up", 0.0
    while process.poll() is None:
        cpu.sample()
        now = time.monotonic()
        if now - started >= seconds and not kill_at:
            stopped_by, kill_at = "SIGINT when the time was up", now + 120
            os.kill(process.pid, signal.SIGINT)
        elif kill_at and now > kill_at:
            stopped_by = "SIGKILL: SIGINT did not stop it"
            os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1.0)
    ok = stopped_by == "SIGINT when the time was up"
    if not ok:
        print(f"   FAILURE: the {arguments[0]} ended with status {process.returncode} ({stopped_by}):\n{tail(stderr_path)}")
    return ok, time.monotonic() - started, cpu.seconds, stopped_by


def rate_part(args: argparse.Namespace, workdir: str) -> tuple[bool, dict[str, float]]:
    steps = int(args.rate_seconds / args.step_interval)
    print(f"\n== rate: {args.rate:,} rows/s for {args.rate_seconds} s ({steps} steps of {args.step_interval} s), checkpoint every 10 steps", flush=True)
    paths = round_paths(f"{workdir}/rate", "")
    arguments = ["rate", paths["out"], paths["ck"], paths["log"], str(args.rate), str(steps), str(args.step_interval)]
    ok, seconds, cpu_seconds, stopped_by = run_until_max_steps(arguments, paths["stderr"], args.rate_seconds)
    records = read_timeline(paths["log"])
    by_step: dict[int, dict[str, dict]] = collections.defaultdict(dict)
    for record in records:
        by_step[record["step"]][record["stage"]] = record
    source = next(r["stage"] for r in records if r["stage_id"] == 0)
    times = {step: stages[source]["processing_time"] / 1e6 for step, stages in by_step.items()}
    first_data = min((s for s, st in by_step.items() if st[source]["elements_in"] > 0), default=0)
    t0 = times[first_data]
    bucket = 60.0 if args.rate_seconds >= 300 else max(10.0, args.rate_seconds / 6)
    print(f"   {len(by_step)} steps in {seconds:.0f} s (stopped by {stopped_by}); first data at step {first_data}; per {bucket:.0f} s from there:")
    header = f"{'from s':>6} {'steps':>5} {'rows/s':>8} {'step s p50':>10} {'p95':>6} {'max':>6} {'wm lag s':>8} {'max lag':>7} {'keys':>5} {'windows':>7} {'late':>5}"
    print(header + "\n" + "-" * len(header))
    buckets: dict[int, list[int]] = collections.defaultdict(list)
    for step in sorted(by_step):
        if step >= first_data:
            buckets[int((times[step] - t0) // bucket)].append(step)
    latencies = {s: times[s] - times[s - 1] for s in by_step if s - 1 in times and s > first_data}
    window_peaks = []
    for index in sorted(buckets):
        chosen = buckets[index]
        span = max(times[chosen[-1]] - times[chosen[0]] + (latencies.get(chosen[0]) or args.step_interval), 1e-9)
        sums = [by_step[s]["Sum"] for s in chosen if "Sum" in by_step[s]]
        rows = sum(r["elements_in"] for r in sums)
        lags = [r["processing_time"] / 1e6 - r["output_watermark"] / 1e6 for r in sums if abs(r["output_watermark"]) < 2**62]
        steps_latency = [latencies[s] for s in chosen if s in latencies]
        late = sum(by_step[s][name]["dropped"] for s in chosen for name in by_step[s])
        window_peaks.append(max((r["state_windows"] for r in sums), default=0))
        print(
            f"{index * bucket:>6.0f} {len(chosen):>5} {rows / span:>8,.0f} {percentile(steps_latency, 0.5):>10.2f} {percentile(steps_latency, 0.95):>6.2f} "
            f"{max(steps_latency, default=float('nan')):>6.2f} {statistics.fmean(lags) if lags else float('nan'):>8.1f} {max(lags, default=float('nan')):>7.1f} "
            f"{max((r['state_keys'] for r in sums), default=0):>5} {window_peaks[-1]:>7} {late:>5}"
        )
    all_latency = [latencies[s] for s in sorted(latencies)]
    steady = [s for s in sorted(by_step) if times[s] - t0 >= bucket]  # the first bucket warms up
    steady_rows = sum(by_step[s]["Sum"]["elements_in"] for s in steady if "Sum" in by_step[s])
    steady_span = (times[steady[-1]] - times[steady[0] - 1]) if steady else float("nan")
    rows_in = sum(r["elements_in"] for r in records if r["stage"] == "Sum")
    source_in = sum(r["elements_in"] for r in records if r["stage"] == source)
    all_lags = [r["processing_time"] / 1e6 - r["output_watermark"] / 1e6 for s in steady for r in [by_step[s].get("Sum")] if r and abs(r["output_watermark"]) < 2**62]
    figures = {
        "rows_per_s": steady_rows / steady_span, "step_p50": percentile(all_latency, 0.5), "step_p95": percentile(all_latency, 0.95),
        "step_max": max(all_latency, default=float("nan")), "lag_median": percentile(all_lags, 0.5),
        "cpu_per_million": cpu_seconds / max(1, rows_in) * 1e6,
        "state": window_peaks[-1] if window_peaks else 0,
    }
    # The source's output feeds Sum and Count; computed once per step, each row enters once.
    once = source_in == rows_in
    if not once:
        print(f"   FAILURE: the source stage logged {source_in:,} elements in, {source_in / max(1, rows_in):.2f}x the {rows_in:,} rows"
              " that reached Sum: its output, read by two grouping stages, was computed for each; rows/s counts Sum's")
    print(f"   steady (after the first bucket): {figures['rows_per_s']:,.0f} rows/s; step latency p50 {figures['step_p50']:.2f} s, p95 {figures['step_p95']:.2f} s, max {figures['step_max']:.2f} s; Sum watermark lag median {figures['lag_median']:.1f} s")
    first_steady = window_peaks[1] if len(window_peaks) > 2 else (window_peaks[0] if window_peaks else 0)
    bounded = bool(window_peaks) and window_peaks[-1] <= 3 * max(first_steady, 1)
    print(f"   state bounded: {'yes' if bounded else 'NO'} (Sum's open windows peak {window_peaks[-1] if window_peaks else 0} in the last bucket, {first_steady} in the first steady one; limit 3x)")
    counts = totals(committed(paths["out"], "counts"))
    per_window: collections.Counter = collections.Counter()
    for (_, start), count in counts.items():
        per_window[start] += count
    full = [per_window[start] for start in sorted(per_window)[1:]]  # the first window started part-way
    exact = all(count == args.rate * 10 for count in full)
    print(f"   windows written: {len(per_window)}; rows per window after the first: {'all' if exact else 'NOT all'} {args.rate * 10:,}"
          f" (min {min(full, default=0):,}, max {max(full, default=0):,}); {sum(per_window.values()):,} rows in written windows of {rows_in:,} read")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(paths["ck"]) for f in fs)
    files = sum(len(fs) for _, _, fs in os.walk(paths["ck"]))
    print(f"   checkpoint directory at the end: {size / 1e6:.1f} MB in {files} files; CPU {cpu_seconds:.0f} s ({cpu_seconds / seconds:.2f} cores, JVM start included)")
    return ok and bounded and exact and once, figures


def peer_part(args: argparse.Namespace, workdir: str, figures: dict[str, float]) -> bool:
    start_spark = measuring.start_spark
    print(f"\n== peer: Structured Streaming on the rate source, {args.rate:,} rows/s for {args.peer_seconds} s", flush=True)
    spark = start_spark("local[2]", [], "stream-soak-peer", {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.numRecentProgressUpdates": "100000"})
    from pyspark.sql import functions as F

    frame = spark.readStream.format("rate").option("rowsPerSecond", args.rate).option("numPartitions", 2).load()
    query = (
        frame.withWatermark("timestamp", "0 seconds")
        .groupBy(F.window("timestamp", "10 seconds"), (F.col("value") % 100).alias("key"))
        .agg(F.sum("value"), F.count("*"))
        .writeStream.outputMode("append").format("noop").trigger(processingTime="1 second")
        .option("checkpointLocation", f"{workdir}/peer-checkpoint").start()
    )
    cpu = measuring.TreeCpu(os.getpid())
    deadline = time.monotonic() + args.peer_seconds
    while time.monotonic() < deadline and query.isActive:
        cpu.sample()
        time.sleep(1.0)
    error = query.exception()
    query.stop()
    progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    spark.stop()
    if error is not None or not progress:
        print(f"   FAILURE: the peer query {'failed: ' + str(error) if error else 'read nothing'}")
        return False
    stamp = [datetime.datetime.fromisoformat(p["timestamp"]).timestamp() for p in progress]
    steady = [i for i, t in enumerate(stamp) if t - stamp[0] >= min(60.0, args.peer_seconds / 4)]
    rows = sum(progress[i]["numInputRows"] for i in steady[1:])
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    gaps = [b - a for a, b in itertools.pairwise(stamp)]
    lags = [t - datetime.datetime.fromisoformat(p["eventTime"]["watermark"]).timestamp() for t, p in zip(stamp, progress) if p.get("eventTime", {}).get("watermark")]
    lags = [lag for lag in lags if lag < 1e6]  # before the first watermark Spark reports the epoch
    state = [p["stateOperators"][0]["numRowsTotal"] for p in progress if p.get("stateOperators")]
    cpu_seconds = cpu.seconds
    peer = {
        "rows_per_s": rows / (stamp[steady[-1]] - stamp[steady[0]]) if len(steady) > 1 else float("nan"),
        "step_p50": percentile(gaps, 0.5), "step_p95": percentile(gaps, 0.95), "step_max": max(gaps, default=float("nan")),
        "lag_median": percentile(lags, 0.5), "cpu_per_million": cpu_seconds / max(1, sum(p["numInputRows"] for p in progress)) * 1e6,
        "state": state[-1] if state else 0,
    }
    print(f"   {len(progress)} batches with data; batch duration (triggerExecution) p50 {percentile(durations, 0.5):.2f} s, p95 {percentile(durations, 0.95):.2f} s, max {max(durations):.2f} s; state rows at the end {peer['state']}")
    header = f"{'':<28} {'sparkbeam':>10} {'peer':>10} {'sparkbeam/peer':>14}"
    print(header + "\n" + "-" * len(header))
    for name, label in [("rows_per_s", "rows/s (steady)"), ("step_p50", "step/batch interval p50 s"), ("step_p95", "step/batch interval p95 s"),
                        ("step_max", "step/batch interval max s"), ("lag_median", "watermark lag median s"), ("cpu_per_million", "CPU s per 1M rows"), ("state", "state at the end")]:
        ratio = figures[name] / peer[name] if peer[name] else float("nan")
        print(f"{label:<28} {figures[name]:>10.2f} {peer[name]:>10.2f} {ratio:>13.2f}x")
    print("   state at the end: sparkbeam's open (key, window) pairs of Sum; the peer's state rows (one per key and window)")
    return True


# -- part 3: memory -----------------------------------------------------------------------------

MEMORY_SERIES = [
    # (sample field, column, what it is)
    ("driver_rss_mb", "driver RSS MB", "the driver's Python process"),
    ("python_objects", "objects k", "objects the driver's garbage collector tracks, in thousands"),
    ("jvm_rss_mb", "JVM RSS MB", "Spark's JVM (driver and executor in local mode)"),
    ("jvm_heap_mb", "heap MB", "the JVM's heap in use right after a full collection"),
    ("storage_mb", "storage MB", "the block managers' storage memory in use (persisted keyed state, broadcasts)"),
    ("workers_pss_mb", "workers MB", "PSS of the Python worker processes"),
]


def memory_part(args: argparse.Namespace, workdir: str) -> bool:
    seconds = args.memory_minutes * 60
    print(
        f"\n== memory: {args.memory_rate:,} rows/s for {args.memory_minutes:g} min, steps of {args.step_interval:g} s, Reshuffle and 10 s sums, "
        f"timeline and emissions kept for {args.retention_steps} steps, a sample every {args.sample_seconds:g} s", flush=True,
    )
    paths = round_paths(f"{workdir}/memory", "")
    samples_path, capture_path = f"{workdir}/memory/samples.jsonl", f"{workdir}/memory/sums.jsonl"
    arguments = ["memory", paths["out"], paths["ck"], paths["log"], capture_path, samples_path, str(args.memory_rate),
                 str(args.step_interval), str(args.retention_steps), str(args.sample_seconds)]
    ok, elapsed, cpu_seconds, stopped_by = run_for(arguments, paths["stderr"], seconds)
    records = read_timeline(paths["log"])
    samples = read_timeline(samples_path)  # JSON lines, as the timeline's
    if not records or len(samples) < 2:
        print(f"   FAILURE: {len(records)} timeline records and {len(samples)} memory samples")
        return False
    by_step: dict[int, dict[str, dict]] = collections.defaultdict(dict)
    for record in records:
        by_step[record["step"]][record["stage"]] = record
    spread = next(r["stage"] for r in records if r["stage"].endswith("ReshufflePerKey/GroupByKey"))
    step_times = sorted((stages[spread]["processing_time"] / 1e6, step) for step, stages in by_step.items() if spread in stages)
    rows_in = sum(r["elements_in"] for r in records if r["stage"] == spread)
    print(f"   {len(by_step)} steps in {elapsed:.0f} s (stopped by {stopped_by}), {rows_in:,} rows through the Reshuffle; CPU {cpu_seconds:.0f} s ({cpu_seconds / elapsed:.2f} cores)")
    t0 = samples[0]["wall"]
    header = f"{'minute':>6} {'step':>5} " + " ".join(f"{column:>13}" for _, column, _ in MEMORY_SERIES) + f" {'workers':>7} {'reshuffle keys':>14} {'sum windows':>11}"
    print(header + "\n" + "-" * len(header))
    points = []
    for sample in samples:
        earlier = [step for wall, step in step_times if wall <= sample["wall"]]
        step = earlier[-1] if earlier else -1
        stages = by_step.get(step, {})
        sums = next((r for name, r in stages.items() if name.startswith("Sum")), None)
        points.append((sample, step))
        print(
            f"{(sample['wall'] - t0) / 60:>6.1f} {step:>5} "
            + " ".join(f"{_figure(sample.get(field), field):>13}" for field, _, _ in MEMORY_SERIES)
            + f" {sample['workers']:>7} {stages[spread]['state_keys'] if spread in stages else '-':>14} {sums['state_windows'] if sums else '-':>11}"
        )
    # Steady once the kept history is full (it grows until then, by design) and Spark warmed up.
    warm = [(sample, step) for sample, step in points if step >= args.retention_steps and sample["wall"] - t0 >= 300]
    halves = points[len(points) // 2:]
    print(f"   slopes in MB per minute (objects: thousands per minute), Theil-Sen: over the samples after step {args.retention_steps} "
          f"(the kept history full) and 5 minutes, and over the second half of the run")
    flat = True
    for field, column, meaning in MEMORY_SERIES:
        steady_slope = _slope(warm, field, t0)
        half_slope = _slope(halves, field, t0)
        print(f"   {column:<14} {steady_slope:>+8.3f} {half_slope:>+8.3f}   {meaning}")
        if field in ("driver_rss_mb", "jvm_heap_mb", "storage_mb") and not math.isnan(half_slope):
            values = [sample[field] for sample, _ in halves if sample.get(field) is not None]
            # Flat: the second half's trend, over the whole run, moves it by under 5% of its
            # level, or 2 MB for the small ones (storage memory is a few MB, in a saw-tooth).
            flat = flat and abs(half_slope) * args.memory_minutes <= max(0.05 * statistics.fmean(values), 2.0)
    leftover = [step for step, stages in by_step.items() if stages.get(spread, {}).get("state_keys")]
    logged_steps = sorted(by_step)
    # The interrupt may fall between a step's timeline and its captures: compare the steps before.
    last = logged_steps[-1]
    emitted = sum(r["elements_out"] for r in records if r["stage"].startswith("Sum") and r["step"] < last)
    captured = sum(1 for line in read_timeline(capture_path) if line["step"] < last)
    print(f"   memory flat (driver RSS, JVM live heap, storage: second-half trend over the run < 5% of the level or 2 MB): {'yes' if flat else 'NO'}")
    print(f"   Reshuffle's keys left in state after a step: {'none' if not leftover else f'at {len(leftover)} steps, e.g. {leftover[:5]}'}")
    print(f"   timeline log: steps {logged_steps[0]}-{logged_steps[-1]}, {'every one' if logged_steps == list(range(len(logged_steps))) else 'SOME MISSING'}; "
          f"capture log: {captured:,} panes of the {emitted:,} Sum emitted")
    return ok and flat and not leftover and captured == emitted and logged_steps == list(range(len(logged_steps)))


def _figure(value: float | None, field: str) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.0f}" if field == "python_objects" else f"{value:.1f}"


def _slope(points: list[tuple[dict, int]], field: str, t0: float) -> float:
    usable = [(sample["wall"], sample[field]) for sample, _ in points if sample.get(field) is not None]
    slope = measuring.median_slope([(wall - t0) / 60 for wall, _ in usable], [value for _, value in usable])
    return slope / 1000 if field == "python_objects" else slope


# -- the command ------------------------------------------------------------------------------


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
          f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}; work in {workdir}")
    started, ok = time.monotonic(), True
    if "kills" in args.parts:
        ok = kills_part(args, workdir) and ok
        print(f"   load average now {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    if "rate" in args.parts:
        rate_ok, figures = rate_part(args, workdir)
        ok = ok and rate_ok
        print(f"   load average now {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
        if args.peer_seconds:
            ok = peer_part(args, workdir, figures) and ok
            print(f"   load average now {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    if "memory" in args.parts:
        ok = memory_part(args, workdir) and ok
        print(f"   load average now {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"\n{'all checks held' if ok else 'SOME CHECKS FAILED'}; {time.monotonic() - started:.0f} s in all")
    if ok and args.workdir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
