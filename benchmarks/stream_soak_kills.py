"""The soak's ``kills`` part: one job killed with SIGKILL and restarted many times, checked
against an uninterrupted run and plain Python (see stream_soak.py)."""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import shutil
import signal
import statistics
import time
from typing import Any

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
from stream_soak_jobs import TEAMS
from stream_soak_outputs import TimelineTail, committed, read_timeline, timeline_problems, totals
from stream_soak_process import round_paths, start_job, tail

__all__ = ["kills_part"]

EVENT_START = 1_767_225_600  # 2026-01-01T00:00Z, in seconds


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
