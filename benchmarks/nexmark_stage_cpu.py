"""Nexmark on sparkbeam's executors: a query's reading stage run in this process, no Spark.

What a Python worker does for each event of ``benchmarks/nexmark_queries.py``: the query is
translated as the runner translates it, and the fused body of its first stage (read, parse,
stamp, and what the query fuses after them) runs over the file's lines as a task runs it,
its outputs pickled in batches as PySpark ships them. Prints CPU microseconds per event
(best of ``--passes``), or a cProfile table with ``--profile``::

    python benchmarks/nexmark_stage_cpu.py --events 20000 --query 0
    python benchmarks/nexmark_stage_cpu.py --events 20000 --query 0 --profile --without-comparable
    python benchmarks/nexmark_stage_cpu.py --events 20000 --query 0 --swap

``--swap`` runs the query by import swap instead (Beam's Nexmark copied with its imports
pointed at sparkbeam, on sparkbeam's own SDK, as ``nexmark_queries.py``'s swap column).

``--without-comparable`` leaves out the harness's last step (the output made comparable
with Beam's, which both runners run): what is left is the query and the runner.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pickle
import pstats
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--query", type=int, default=0)
    parser.add_argument("--passes", type=int, default=5, help="timed passes over the lines (best is printed)")
    parser.add_argument("--profile", action="store_true", help="one pass under cProfile instead")
    parser.add_argument("--without-comparable", action="store_true", help="leave out the harness's comparable step")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--swap", action="store_true", help="the query by import swap, on sparkbeam's own SDK")
    args = parser.parse_args(argv)

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    import sparkbeam
    import tests.beam_frontend.nexmark as nexmark
    from sparkbeam.runners.spark import stage_records, worker
    from sparkbeam.testing.nexmark_generator import NexmarkConfig, write_events
    from tests.beam_frontend.engine import plan_of
    from tests.beam_frontend.pairs import sparkbeam_flags

    if args.without_comparable:
        nexmark.canonical = nexmark.comparable = lambda value: value  # type: ignore[assignment]
    path = str(write_events(os.path.join(tempfile.mkdtemp(prefix="sparkbeam-nexmark-"), "events.json"), NexmarkConfig(events=args.events, seed=args.seed)))
    (query,) = [q for q in nexmark.QUERIES if q.number == args.query]
    if args.swap:
        from sparkbeam.runners.core.lowering.ops import lower
        from sparkbeam.runners.core.plan.plan import plan_stages
        from tests.compat.rewrite import load_rewritten_package

        pipeline = sparkbeam.Pipeline()
        sparkbeam.capture(nexmark.load_swapped_query(query, pipeline, path, load_rewritten_package(nexmark.NEXMARK)))
        plan = plan_stages(lower(pipeline))
    else:
        pipeline = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions(sparkbeam_flags()))
        sparkbeam.capture(nexmark.load_query(query, pipeline, path))
        plan = plan_of(pipeline)
    stage = next(s for s in plan.stages if s.body and getattr(s.head, "source", None) is not None)
    (pcoll,) = stage.head.outputs
    with open(path, encoding="utf-8") as lines_file:
        lines = [line.rstrip("\n") for line in lines_file]

    def one_pass() -> int:
        outputs = stage_records.as_plain_tuples(worker.run_bare_body_on_values(stage, None, None, pcoll, iter(lines)))
        batch: list = []
        count = 0
        for fields in outputs:
            batch.append(fields)
            count += 1
            if len(batch) == 1000:  # about PySpark's batches of pickled output
                pickle.dumps(batch, 5)
                batch = []
        pickle.dumps(batch, 5)
        return count

    print(f"q{query.number}: stage {stage.name!r}: " + ", ".join(f"{type(op).__name__} {op.label!r}" for op in stage.body))
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        one_pass()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        return 0
    best = float("inf")
    for _ in range(args.passes):
        started = time.process_time()
        outputs = one_pass()
        best = min(best, time.process_time() - started)
    print(f"{len(lines):,} events, {outputs:,} outputs: {best / len(lines) * 1e6:.1f} CPU µs per event (best of {args.passes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
