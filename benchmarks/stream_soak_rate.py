"""The soak's ``rate`` part: a long rate-source run of sparkbeam (throughput, step latency,
watermark lag, bounded state, exact counts), then the same on Structured Streaming (see
stream_soak.py)."""

from __future__ import annotations

import argparse
import collections
import datetime
import itertools
import os
import statistics
import time

# Sibling modules: run as a file, a benchmark has its own directory on sys.path.
import measuring
from measuring import percentile
from stream_soak_outputs import committed, read_timeline, totals
from stream_soak_process import round_paths, run_until_max_steps

__all__ = ["peer_part", "rate_part"]


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
