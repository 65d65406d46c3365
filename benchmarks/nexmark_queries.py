"""Nexmark: Beam's queries, unchanged, in batch on sparkbeam's runner (both front ends), Beam's local runner and Prism.

Each of Beam's Nexmark queries (``apache_beam/testing/benchmarks/nexmark/queries``, as
installed) runs as Beam's launcher runs it in batch, on one file of events from
``sparkbeam.testing.nexmark_generator``, once on Beam's local runner and once with
``--runner=sparkbeam.SparkRunner`` on the shared SparkSession, once by import swap (Beam's
Nexmark package copied with its imports pointed at sparkbeam, run on sparkbeam's own SDK:
``tests/compat/rewrite.py``; ``--no-swap`` leaves it out), and once on Beam's Prism
runner (tools/prism.py: one job server for the command, LOOPBACK; ``--no-prism`` leaves it
out); the outputs (with their timestamps, windows and panes) must agree, and the per-query
times and their ratios are printed::

    python benchmarks/nexmark_queries.py --events 20000 --master 'local[2]'

How each query is driven, and which cannot run and why, is owned by the tests
(``tests/beam_frontend/nexmark.py``), which this command imports. Timed per query and
runner: building the pipeline, the run, the results on the driver, after an untimed
warm-up of query 0 on every runner (over the file's first 2,000 events); ``--rounds 3`` runs each query three times on each
runner, interleaved (each round in a turned order), and prints the medians and every run. The harness's last step (the output made
comparable and canonical, ``load_query``) is part of each query's pipeline on every runner
and is not repeated where the results are recorded. Exit status 1 when outputs disagree.

At 1,000,000 events Beam's local runners take minutes to hours per query: ``--skip-beam 7,4``
leaves Beam's runner out for those queries (sparkbeam's output is then compared with the import
swap's), and ``--cache`` keeps the events file and Beam's output and times per (query, events,
seed) in a private per-user folder and reuses them (``nexmark_cache.py``), so that a rerun of
sparkbeam's side does not rerun Beam's; the note says when and at what load the cached run was.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

# The tests own how a query is driven; the repository root holds them. Spark's Python
# workers inherit PYTHONPATH, so they can import what the queries' last step pickles.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))

import nexmark_cache  # noqa: E402
from measuring import load_average, start_spark  # noqa: E402  (a sibling module, after the path is set)
from workloads import BUSY_ELSEWHERE_WARNING, PeerUnavailable, prism_flags  # noqa: E402


def grpc_details(error: Exception) -> str:
    """The job service's own words from a gRPC error (its ``details``), else the first line."""
    found = re.search(r'details = "(.*?)"\s*\n\s*debug_error_string', str(error), re.DOTALL)
    words = found.group(1) if found else str(error).strip().splitlines()[0]
    return " ".join(words.split())[:240]


def how_prism_differs(on_prism: collections.Counter, ours: collections.Counter) -> str:
    """How many rows differ, and whether only in the panes' ``is_last`` (where Prism follows
    Beam's Java ReduceFnRunner, see the README's "Beam's Prism runner as a second streaming
    oracle"); rows are (value, timestamp, window, (is_first, is_last, timing, index, ...))."""

    def without_is_last(rows: collections.Counter) -> collections.Counter:
        return collections.Counter({(v, t, w, (p[0], *p[2:])): n for (v, t, w, p), n in rows.items()})

    missing, unexpected = sum((on_prism - ours).values()), sum((ours - on_prism).values())
    only_last = without_is_last(on_prism) == without_is_last(ours)
    return f"{missing} rows only on Prism, {unexpected} only on sparkbeam" + (", differing only in is_last" if only_last else "")


def swapped_package() -> str:
    """Beam's Nexmark package copied with its imports pointed at sparkbeam (import swap)."""
    from tests.compat.rewrite import load_rewritten_package

    return load_rewritten_package("apache_beam.testing.benchmarks.nexmark")


def run_swapped(build) -> collections.Counter:
    """A query's rows by import swap, on sparkbeam's own SDK and runner, recorded as
    ``run_on_sparkbeam(canonical_output=True)`` records them: the query's last step made
    them canonical (overlapping-window rule off, as Beam's current runners)."""
    import sparkbeam
    from sparkbeam.options.pipeline_options import PipelineOptions
    from tests.oracle import _pane_key, _window_key

    pipeline = sparkbeam.Pipeline(options=PipelineOptions(overlapping_window_rule=False))
    output = sparkbeam.capture(build(pipeline))
    result = pipeline.run()
    return collections.Counter(
        (e.value, e.timestamp.micros // 1000, _window_key(w), _pane_key(e.pane)) for e in result.emissions(output) for w in e.windows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="Nexmark events in the file (default 20000)")
    parser.add_argument("--queries", default="", help="comma-separated query numbers (default: all)")
    parser.add_argument("--master", default="local[*]", help="Spark master of the shared session (default local[*])")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--no-prism", action="store_true", help="leave Beam's Prism runner out")
    parser.add_argument("--no-swap", action="store_true", help="leave the import-swap front end out")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each query on each runner, interleaved; medians are printed (default 1)")
    parser.add_argument(
        "--skip-beam", default="", metavar="QUERIES",
        help="comma-separated queries whose Beam local runner is not run (unless --cache has its output): "
        "sparkbeam's output is then compared with the import swap's",
    )
    parser.add_argument(
        "--cache", action="store_true",
        help="keep the events file and Beam's runner's output and times per (query, events, seed) in a private "
        "per-user folder ($SPARKBEAM_NEXMARK_CACHE, else ~/.cache/sparkbeam/nexmark) and reuse them: a cached "
        "query's Beam runner is not run again (benchmarks/nexmark_cache.py)",
    )
    args = parser.parse_args(argv)

    from sparkbeam.testing.nexmark_generator import NexmarkConfig, write_events
    from tests.beam_frontend.nexmark import QUERIES, load_query, load_swapped_query
    from tests.beam_frontend.pairs import run_on_sparkbeam
    from tests.oracle import run_beam

    chosen = {int(q) for q in args.queries.split(",") if q.strip()} or {query.number for query in QUERIES}
    skip_beam = {int(q) for q in args.skip_beam.split(",") if q.strip()}
    print(f"python {sys.version.split()[0]} on {os.cpu_count()} cores, load average {load_average()}")
    spark = start_spark(args.master, [], "sparkbeam-nexmark")
    workdir = tempfile.mkdtemp(prefix="sparkbeam-nexmark-")
    reused = False
    if args.cache:
        cached_file, reused = nexmark_cache.events_file(args.events, args.seed)
        path = str(cached_file)
    else:
        path = str(write_events(os.path.join(workdir, "events.json"), NexmarkConfig(events=args.events, seed=args.seed)))
    print(
        f"{args.events:,} Nexmark events ({os.path.getsize(path) / 1e6:.1f} MB{', from the cache' if reused else ''}), "
        f"master {spark.sparkContext.master}"
    )

    def timed(run):
        started = time.perf_counter()
        output = run()
        return output, time.perf_counter() - started

    prism: list[str] | None = None
    if not args.no_prism:
        try:
            prism = prism_flags()  # built (first use) and started untimed
        except PeerUnavailable as error:
            print(f"Prism: not run: {error}")

    # Untimed: starts PySpark's workers and the runners' imports.
    # The queries' last step makes their outputs canonical (tests/beam_frontend/nexmark.py):
    # recorded as they are on every runner, so each pays for that step once.
    # On the file's first 2,000 events: the warm-up is for start-up, not the query, and at
    # 1M events a whole-file warm-up would take longer than the timed runs.
    warmup = os.path.join(workdir, "warmup.json")
    with open(path, encoding="utf-8") as events, open(warmup, "w", encoding="utf-8") as first:
        first.writelines(itertools.islice(events, 2000))
    run_beam(lambda ns, p: load_query(QUERIES[0], p, warmup), canonical_output=True)
    run_on_sparkbeam(lambda ns, p: load_query(QUERIES[0], p, warmup), canonical_output=True)
    swapped = None if args.no_swap else swapped_package()
    if swapped is not None:
        run_swapped(lambda p: load_swapped_query(QUERIES[0], p, warmup, swapped))
    if prism is not None:
        run_beam(lambda ns, p: load_query(QUERIES[0], p, warmup), runner="PrismRunner", flags=prism, canonical_output=True)

    header = (
        f"{'query':<6} {'results':>8} {'Beam s':>8} {'Prism s':>8} {'sparkbeam s':>12} "
        f"{'Beam/sparkbeam':>15} {'Prism/sparkbeam':>16} {'swap s':>8} {'Beam/swap':>10} {'load':>6}  note"
    )
    print(header)
    print("-" * len(header))
    status = 0
    for query in QUERIES:
        if query.number not in chosen:
            continue
        name = f"q{query.number}"
        if query.gap is not None:
            print(f"{name:<6} {'-':>8} {'-':>8} {'-':>8} {'-':>12} {'-':>15} {'-':>16} {'-':>8} {'-':>10} {'-':>6}  not run: {query.gap.reason}")
            continue

        def build(ns, p, query=query):
            return load_query(query, p, path)

        # Each round runs every runner once, the order turned by one each round, so that no
        # runner always meets the same moment of a machine whose load moves; medians are printed.
        runners = {"sparkbeam": lambda build=build: run_on_sparkbeam(build, canonical_output=True)[0]}
        seconds: dict[str, list[float]] = {}
        outputs: dict[str, list[collections.Counter]] = {}
        notes: list[str] = []
        cached = None
        if query.no_oracle is None and args.cache:
            cached = nexmark_cache.load_beam(query.number, args.events, args.seed, query.beam_runner)
        if cached is not None:
            # Beam's runner is not run again: its output and times as it gave them then.
            outputs["beam"], seconds["beam"] = [cached[0]], cached[1]
            notes.append(f"Beam's run from the cache ({cached[2]['at']}, load {cached[2]['load']:.1f})")
        elif query.no_oracle is None and query.number in skip_beam:
            notes.append("Beam's runner not run (--skip-beam)")
        if query.no_oracle is None:
            if cached is None and query.number not in skip_beam:
                runners["beam"] = lambda build=build, query=query: run_beam(build, runner=query.beam_runner, canonical_output=True)
            if prism is not None:
                runners["prism"] = lambda build=build: run_beam(build, runner="PrismRunner", flags=prism, canonical_output=True)
            if swapped is not None and query.compared_step is None:  # a step's output is compared by label in Beam's graph alone
                runners["swap"] = lambda query=query: run_swapped(lambda p: load_swapped_query(query, p, path, swapped))
        if "beam" in runners:
            # Beam's runner last in the first round: at 1M events it takes up to hours, and a
            # command stopped for time keeps the other runners' lines below.
            runners["beam"] = runners.pop("beam")
        seconds.update({runner: [] for runner in runners})
        outputs.update({runner: [] for runner in runners})
        loads = [os.getloadavg()[0]]
        order = list(runners)
        for round_index in range(args.rounds):
            for runner in order[round_index % len(order):] + order[: round_index % len(order)]:
                try:
                    rows, took = timed(runners[runner])
                except Exception as error:  # a query Prism cannot run: say so, keep going
                    if runner != "prism":
                        raise
                    notes.append(f"Prism failed: {grpc_details(error)}")
                    del runners["prism"], seconds["prism"], outputs["prism"]
                    order.remove("prism")
                    continue
                seconds[runner].append(took)
                outputs[runner].append(rows)
                print(f"       {name} {runner}: {took:.2f} s, {sum(rows.values())} rows, load {os.getloadavg()[0]:.1f}", flush=True)
            loads.append(os.getloadavg()[0])
        median = {runner: statistics.median(times) for runner, times in seconds.items()}
        load_cell = f"{statistics.median(loads):.1f}"
        ours = outputs["sparkbeam"][0]
        disagrees = any(rows != ours for rows in outputs["sparkbeam"][1:])
        notes += ["sparkbeam's runs DISAGREE with one another"] if disagrees else []
        if query.no_oracle is not None:
            print(f"{name:<6} {sum(ours.values()):>8} {'-':>8} {'-':>8} {median['sparkbeam']:>12.2f} {'-':>15} {'-':>16} {'-':>8} {'-':>10} {load_cell:>6}  {query.no_oracle}")
            status = status or int(disagrees)
            continue
        if "beam" in runners and args.cache:
            why_not = nexmark_cache.store_beam(
                query.number, args.events, args.seed, query.beam_runner, outputs["beam"][0], seconds["beam"], statistics.median(loads)
            )
            notes += [f"Beam's output {why_not}"] if why_not else []
        # The oracle: Beam's runner, else (--skip-beam) the import swap, else none.
        reference = "beam" if "beam" in outputs else "swap" if "swap" in outputs else None
        if reference is None:
            notes.append("no oracle ran: output unchecked")
            theirs = ours
        else:
            theirs = outputs[reference][0]
            notes += [] if reference == "beam" else ["compared with the import swap"]
        oracle_name = "Beam's runner" if reference == "beam" else "the import swap"
        agrees = not disagrees and all(rows == ours for rows in outputs.get(reference or "sparkbeam", []))
        if query.beam_runner != "FnApiRunner" and "beam" in outputs:
            notes.insert(0, f"Beam's runner: {query.beam_runner}")
        notes += [] if agrees else [f"DISAGREES with {oracle_name}"]
        beam_seconds, our_seconds = median.get("beam"), median["sparkbeam"]
        prism_cell, prism_ratio = "-", "-"
        if "prism" in median:
            prism_cell, prism_ratio = f"{median['prism']:.2f}", f"{median['prism'] / our_seconds:.2f}x"
            if any(rows != ours for rows in outputs["prism"]):
                notes.append(f"DISAGREES with Prism: {how_prism_differs(outputs['prism'][0], ours)}")
                agrees = False
        swap_cell, swap_ratio = "-", "-"
        if "swap" in median:
            swap_cell = f"{median['swap']:.2f}"
            swap_ratio = "-" if beam_seconds is None else f"{beam_seconds / median['swap']:.2f}x"
            if reference == "beam" and any(rows != theirs for rows in outputs["swap"]):
                notes.append("import swap DISAGREES with Beam's runner")
                agrees = False
        if args.rounds > 1:
            notes.append("runs: " + ", ".join(f"{runner} " + "/".join(f"{t:.1f}" for t in times) for runner, times in seconds.items()))
        status = status or (0 if agrees else 1)
        beam_cell, beam_ratio = ("-", "-") if beam_seconds is None else (f"{beam_seconds:.2f}", f"{beam_seconds / our_seconds:.2f}x")
        print(
            f"{name:<6} {sum(ours.values()):>8} {beam_cell:>8} {prism_cell:>8} {our_seconds:>12.2f} "
            f"{beam_ratio:>15} {prism_ratio:>16} {swap_cell:>8} {swap_ratio:>10} {load_cell:>6}  {'; '.join(notes)}",
            flush=True,
        )
        if theirs != ours:
            # What differs, so that a disagreement can be looked into without a rerun.
            short = "Beam" if reference == "beam" else "the swap"
            for label, rows in ((f"{short} has, sparkbeam lacks", theirs - ours), (f"sparkbeam has, {short} lacks", ours - theirs)):
                shown = sorted(rows.elements(), key=repr)
                print(f"       {label}: {len(shown)} rows" + "".join(f"\n         {row!r}" for row in shown[:3]))
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1) * (1 - BUSY_ELSEWHERE_WARNING):
        print(f"warning: load average {load:.2f} on {os.cpu_count()} cores: other processes inflate these timings")
    print(
        "Beam/sparkbeam, Prism/sparkbeam, Beam/swap above 1x: sparkbeam is faster (swap: by import "
        f"swap, on sparkbeam's own SDK). Times: build, run and results on the driver, median of {args.rounds} "
        "interleaved runs each; load: the median of the 1-minute load average between rounds."
    )
    spark.stop()
    shutil.rmtree(workdir)  # the events file (100 MB at 1M events) and the warm-up's
    return status


if __name__ == "__main__":
    sys.exit(main())
