"""The soak's ``memory`` part: a rate run for many minutes, the driver's and the JVM's memory
sampled all along, checked flat (see stream_soak.py)."""

from __future__ import annotations

import argparse
import collections
import math
import statistics

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
import measuring
from stream_soak_outputs import read_timeline
from stream_soak_process import round_paths, run_for

__all__ = ["memory_part"]

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
