"""Where a small step of #27's stream goes: per Spark job and stage, per kind of step, and the
driver's Python memory between steps.

Runs ``state_at_scale.py``'s stream (a first step opening a day-long window for N keys, then
10 small steps of 1,000 events, a checkpoint every 3 steps) on sparkbeam alone, with Spark's
event log on, and prints:

- per step: its kind (``plain``; ``writes``: a checkpoint is written after it; ``reads back``:
  the first step after a checkpoint, which reads the state back from its files), wall
  seconds, the driver's RSS after it, and each Spark job it ran (its description, wall
  seconds, tasks, and the summed executor run time and deserialisation time of its tasks);
- per kind of small step, the median seconds in each kind of job;
- with ``--tracemalloc``: the driver's allocations that grew most between the end of the
  first small step and the end of the last one (the driver's memory should stay flat).

    python benchmarks/step_breakdown.py --keys 300000
    python benchmarks/step_breakdown.py --keys 300000 --tracemalloc
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import state_at_scale


def _kind(step: int, interval: int) -> str:
    if step == 0:
        return "first"
    return "writes" if (step + 1) % interval == 0 else "reads back" if step % interval == 0 else "plain"


def _events(directory: str) -> list[dict[str, Any]]:
    # Spark 4 writes a folder of rolled files per application (eventlog_v2_*/events_<n>_*)
    paths = sorted(glob.glob(os.path.join(directory, "**", "events_*"), recursive=True), key=_roll_number)
    paths = paths or glob.glob(os.path.join(directory, "*"))
    events = []
    for path in paths:
        if path.endswith(".zstd"):  # spark.eventLog.compress set elsewhere
            text = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout.decode()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        events.extend(json.loads(line) for line in text.splitlines() if line)
    return events


def _roll_number(path: str) -> int:
    return int(os.path.basename(path).split("_")[1])


def _jobs(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per job group (one per step, ``step_probe``): its jobs in order, each with its
    description, wall seconds, tasks and the tasks' summed run and deserialisation time."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    for event in events:
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            job = {
                "group": props.get("spark.jobGroup.id", ""),
                "what": props.get("spark.job.description", "") or "",
                "start": event["Submission Time"],
                "end": event["Submission Time"],
                "tasks": 0, "run_ms": 0, "deser_ms": 0, "gc_ms": 0, "shuffle_read": 0, "shuffle_write": 0,
                "stages": [],
            }
            jobs[event["Job ID"]] = job
            for stage in event["Stage IDs"]:
                stage_job[stage] = event["Job ID"]
        elif kind == "SparkListenerJobEnd":
            jobs[event["Job ID"]]["end"] = event["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            job_id = stage_job.get(info["Stage ID"])
            if job_id is not None and "Completion Time" in info:
                seconds = (info["Completion Time"] - info["Submission Time"]) / 1000
                jobs[job_id]["stages"].append((info["Stage Name"].split(" at ")[0], info["Number of Tasks"], seconds))
        elif kind == "SparkListenerTaskEnd":
            job_id = stage_job.get(event["Stage ID"])
            metrics = event.get("Task Metrics") or {}
            if job_id is None or not metrics:
                continue
            job = jobs[job_id]
            job["tasks"] += 1
            job["run_ms"] += metrics.get("Executor Run Time", 0)
            job["deser_ms"] += metrics.get("Executor Deserialize Time", 0)
            job["gc_ms"] += metrics.get("JVM GC Time", 0)
            job["shuffle_read"] += (metrics.get("Shuffle Read Metrics") or {}).get("Remote Bytes Read", 0) + (
                metrics.get("Shuffle Read Metrics") or {}
            ).get("Local Bytes Read", 0)
            job["shuffle_write"] += (metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
    groups: dict[str, list[dict[str, Any]]] = {}
    for _, job in sorted(jobs.items()):
        groups.setdefault(job["group"], []).append(job)
    return groups


def _label(what: str) -> str:
    """A job's description without its step number, to group jobs across steps."""
    text = what.split(" (step ")[0] if " (step " in what else what
    if text.startswith("checkpoint of the keyed state"):
        return "checkpoint write (state)"
    return text[:60]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--checkpoint_interval", type=int, default=3)
    parser.add_argument("--tracemalloc", action="store_true", help="snapshot the driver's allocations between steps")
    parser.add_argument("--events", default=None, help="keep Spark's event log in this folder (else a temporary one)")
    parser.add_argument("--python_profile", default=None, help="cProfile the executors' Python per RDD (spark.python.profile), dumped into this folder")
    args = parser.parse_args()

    import psutil
    from pyspark.sql import SparkSession

    from sparkbeam.runners.core.loop.steps import StepLoop

    work = tempfile.mkdtemp(prefix="step-breakdown-")
    logs = args.events or os.path.join(work, "events")
    os.makedirs(logs, exist_ok=True)
    try:
        data = state_at_scale.batches(args.keys)
        expected = state_at_scale.oracle(data)
        directory = os.path.join(work, "in")
        state_at_scale._write_files(data, directory)
        del data
        (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.hadoop.cloneConf", "true")
            .config("spark.driver.memory", "4g")
            .config("spark.eventLog.enabled", "true")
            .config("spark.eventLog.dir", logs)
            .config("spark.eventLog.compress", "false")
            .config("spark.python.profile", "true" if args.python_profile else "false")
            .getOrCreate()
        )
        me = psutil.Process()
        rss: list[float] = []
        snapshots: list[Any] = []
        if args.tracemalloc:
            import tracemalloc

            tracemalloc.start(12)
        timed = StepLoop.run_step

        def run_step(loop: Any) -> None:
            timed(loop)
            rss.append(me.memory_info().rss / 2**20)
            if args.tracemalloc and loop.step in (2, state_at_scale.SMALL_STEPS):
                snapshots.append(tracemalloc.take_snapshot())

        StepLoop.run_step = run_step  # type: ignore[method-assign]
        started = time.perf_counter()
        seconds, got, _, peak = state_at_scale._sparkbeam_run(directory, work, "incremental", args.checkpoint_interval)
        total = time.perf_counter() - started
        StepLoop.run_step = timed  # type: ignore[method-assign]
        from pyspark import SparkContext

        if args.python_profile:
            SparkContext.getOrCreate().dump_profiles(args.python_profile)
        SparkContext.getOrCreate().stop()  # flushes the event log
        print(f"{args.keys:,} keys, {len(seconds)} steps in {total:.1f} s, sums {'exact' if got == expected else 'WRONG'}, "
              f"driver RSS peak {peak.python / 2**20:.0f} MB (start {peak.start / 2**20:.0f}), load {state_at_scale._load()}")
        groups = _jobs(_events(logs))
        by_kind: dict[str, dict[str, list[float]]] = {}
        for step, wall in enumerate(seconds):
            kind = _kind(step, args.checkpoint_interval)
            jobs = groups.get(f"{step_group_prefix(groups)}-{step}", [])
            in_jobs = sum(job["end"] - job["start"] for job in jobs) / 1000
            print(f"step {step:>2} {kind:>10} {wall:7.2f} s  jobs {len(jobs)}: {in_jobs:6.2f} s  driver RSS {rss[step] if step < len(rss) else float('nan'):6.0f} MB")
            per_label: dict[str, float] = {}
            for job in jobs:
                label = _label(job["what"])
                per_label[label] = per_label.get(label, 0.0) + (job["end"] - job["start"]) / 1000
                stages = "; ".join(f"{name} x{tasks} {sec:.2f}s" for name, tasks, sec in job["stages"])
                print(
                    f"      {(job['end'] - job['start']) / 1000:6.2f} s  {label:<42} tasks {job['tasks']:>3} run {job['run_ms'] / 1000:6.2f} s "
                    f"deser {job['deser_ms'] / 1000:5.2f} s gc {job['gc_ms'] / 1000:5.2f} s shuffle r/w {job['shuffle_read'] / 1e6:6.1f}/{job['shuffle_write'] / 1e6:6.1f} MB  [{stages}]"
                )
            per_label["(driver, outside jobs)"] = wall - in_jobs
            if step > 0:
                for label, value in per_label.items():
                    by_kind.setdefault(kind, {}).setdefault(label, []).append(value)
        print("\nmedian seconds per kind of small step:")
        for kind, labels in by_kind.items():
            print(f"  {kind}:")
            for label, values in sorted(labels.items(), key=lambda item: -statistics.median(item[1])):
                print(f"    {statistics.median(values):7.3f}  {label} ({len(values)} steps)")
        if len(snapshots) == 2:
            print("\ndriver allocations grown most from the end of step 1 to the end of step 9 (the last step before the windows close):")
            for stat in snapshots[1].compare_to(snapshots[0], "traceback")[:12]:
                print(f"  {stat.size_diff / 2**20:+8.2f} MB {stat.count_diff:+9d} blocks")
                for line in stat.traceback.format()[-8:]:
                    print("     ", line)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def step_group_prefix(groups: dict[str, Any]) -> str:
    """The probe's job-group prefix (``step_probe``: ``sbstep<n>-<step>``)."""
    for group in groups:
        if group.startswith("sbstep"):
            return group.rsplit("-", 1)[0]
    return "sbstep1"


if __name__ == "__main__":
    main()
