"""Streaming windowed scores: count and sum per key per 1-minute window, arriving step by step.

One command replays the same stream of events, cut into arrival batches each followed by a
watermark advance, through sparkbeam in streaming mode (a TestStream), Apache Beam's
BundleBasedDirectRunner in streaming mode (Beam's TestStream) and a hand-written PySpark
Structured Streaming query (one file per batch, ``maxFilesPerTrigger=1``). It checks that
all of them end with exactly the same {(key, window_start): (count, sum)} and prints each
one's wall-clock time, events per second and time per step, with the ratios::

    python benchmarks/streaming_windowed_scores.py --events 100000 --events 1000000
    python benchmarks/streaming_windowed_scores.py --events 1000000 --steps 20 --peers sparkbeam,structured

It then measures the cost of a step that carries no data (``--idle-steps``, 0 to skip).
benchmarks/README.md says what is timed and how to read the tables. Exit status: 0 when
every peer ran and agreed, 1 when results disagree, 2 when a peer failed or was unavailable.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

# Sibling modules: run as a file, this script has its own directory on sys.path. Each peer
# is a module of its own (streaming_sparkbeam, streaming_beam, streaming_structured).
from measuring import driver_peak_rss_mb
from streaming_beam import BeamPeer, PrismPeer
from streaming_idle import measure_idle
from streaming_peer import Peer
from streaming_runs import Outcome, measure
from streaming_script import Script, make_script
from streaming_sparkbeam import SparkbeamConnectPeer, SparkbeamPeer
from streaming_structured import StructuredPeer
from streaming_table import format_table
from workloads import (
    KEY_COUNT,
    Bench,
    add_common_arguments,
    expected_totals,
    generate_events,
    make_workdir,
    parse_common,
    prepare_peers,
    share_behind,
    start_bench,
    stop_bench,
)

ALL_PEERS = ("sparkbeam", "sparkbeam-connect", "beam", "prism", "structured")

PEERS: dict[str, Callable[[Bench], Peer]] = {
    "sparkbeam": SparkbeamPeer,
    "sparkbeam-connect": SparkbeamConnectPeer,
    "beam": BeamPeer,
    "prism": PrismPeer,
    "structured": StructuredPeer,
}


# -- the command -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(
        parser,
        ALL_PEERS,
        warmup_events=5_000,
        warmup_help="untimed warm-up run per peer on this many events in 2 steps; 0 for none (default 5000)",
        partitions_help="state partitions of sparkbeam and Structured Streaming (default: Spark's default parallelism, at least 2)",
        workdir_help="where the batch files and checkpoints go (default: a temporary directory, removed after)",
    )
    parser.add_argument(
        "--steps", type=int, default=20, help="arrival batches the events are cut into (default 20)"
    )
    parser.add_argument(
        "--beam-events",
        type=int,
        default=100_000,
        help="Beam's local runner runs a stream of at most this many events (default 100000): it is slow",
    )
    parser.add_argument(
        "--idle-steps",
        type=int,
        default=20,
        help="steps with no data for the per-step overhead (default 20; 0 skips it)",
    )
    args = parse_common(parser, argv, ALL_PEERS)
    if args.steps < 1 or any(count < args.steps for count in args.events):
        parser.error("--steps must be positive, and --events at least --steps")
    if args.idle_steps < 0 or args.beam_events < args.steps:
        parser.error("--idle-steps must be 0 or more and --beam-events at least --steps")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = make_workdir(args, "sparkbeam-stream-bench-")
    bench = start_bench(
        args,
        workdir,
        "sparkbeam-streaming-benchmark",
        "state partitions",
        # Enough progress reports to cover every micro-batch of the longest run.
        {"spark.sql.streaming.numRecentProgressUpdates": "10000"},
    )
    spark = bench.spark
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # PySpark's workers inherit it: every new worker compiles sparkbeam from source.
        print(
            "note: PYTHONDONTWRITEBYTECODE is set, so each new PySpark worker compiles the modules it "
            "imports (sparkbeam's) from source; steps that start workers pay for it"
        )

    peers, unavailable = prepare_peers(args.peers, lambda name: PEERS[name](bench), lambda _, peer: peer.describe)

    warmup = None
    if args.warmup_events:
        warmup = make_script(generate_events(args.warmup_events, args.seed + 1), 2)

    scripts: dict[int, Script] = {}

    def script_of(count: int) -> Script:
        if count not in scripts:
            scripts[count] = make_script(generate_events(count, args.seed), args.steps)
        return scripts[count]

    exit_status = 0
    warmed: set[str] = set()
    try:
        for count in args.events:
            print()
            before = time.perf_counter()
            script = script_of(count)
            generated = time.perf_counter() - before
            if not script.is_late_free():
                print(
                    "   internal error: the script has late events; the comparison would not hold"
                )
                return 1
            events = script.all_events
            print(
                f"== {count:,} events, {KEY_COUNT} keys, {len(expected_totals(events)):,} (key, window) results, "
                f"{len(script.batches)} arrival batches of ~{len(script.batches[0]):,}; "
                f"{share_behind(events):.0%} arrive after an event with a later event time"
            )
            print(
                f"   watermark after each batch: latest event time so far - {script.out_of_orderness_ms // 1000} s "
                f"(the smallest whole minutes with no late event), then +inf; generated in {generated:.2f} s (untimed)"
            )
            outcomes = []
            for name in args.peers:
                if name in unavailable:
                    outcomes.append(Outcome(name, count, problem=unavailable[name]))
                    continue
                peer_script = (
                    script
                    if name != "beam" or count <= args.beam_events
                    else script_of(args.beam_events)
                )
                outcome = measure(
                    name,
                    peers[name],
                    peer_script,
                    None if name in warmed else warmup,
                    args.repeat,
                    args.profile_dir,
                    spark,
                )
                warmed.add(name)
                print(
                    f"   {name}: {'-' if outcome.seconds is None else f'{outcome.seconds:.2f} s'} "
                    f"{outcome.problem or ''} (load average now {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
                outcomes.append(outcome)
            print(format_table(outcomes))
            for outcome in outcomes:
                for line in outcome.details:
                    print(f"   {line}")
            if any(o.disagrees for o in outcomes):
                exit_status = 1
            elif any(o.seconds is None for o in outcomes) and exit_status == 0:
                exit_status = 2

        if args.idle_steps and not measure_idle(peers, args.idle_steps) and exit_status == 0:
            exit_status = 2
    finally:
        stop_bench(bench, args)
    print()
    print(
        "seconds: best wall-clock run, from building the pipeline (query) to holding the results on the "
        "driver; input preparation (TestStream objects, batch files) is not timed"
    )
    print(
        "steps: sparkbeam's steps (one TestStream event each: a batch, a watermark move), Beam's "
        "TestStream events, Structured Streaming's micro-batches; s/step = seconds / steps"
    )
    print(
        "vs sparkbeam: seconds per event divided by sparkbeam's (below 1x is faster); CPU s: CPU "
        "time of this process + the JVM + PySpark's workers per run; others: cores other processes "
        f"kept busy meanwhile; this process peaked at {driver_peak_rss_mb():.0f} MB RSS"
    )
    print(
        "semantics: Spark's watermark is one per query (latest event time seen - delay, applied from "
        "the next micro-batch), sparkbeam's and Beam's are per stage, announced by the TestStream; the "
        "watermarks are chosen so that both are the same here and nothing is late. Structured "
        "Streaming emits every changed window each batch (update mode); sparkbeam and Beam emit "
        "each window once, when the watermark passes it"
    )
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
