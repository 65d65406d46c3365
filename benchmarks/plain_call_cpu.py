"""CPU per element of a plain Map, FlatMap and Filter in a fused body, both front ends, no Spark.

The engine's fast paths for plain Maps (``runners/core/elements/fast_paths.py``) serve
sparkbeam's own SDK and, through a ``DirectCall``, the Beam front end (README, "How it
works"). This builds each case as a pipeline of either front end, takes the fused body of
its stage and runs 100,000 elements through it in this process, best of ``--passes``,
in CPU nanoseconds per element. Every case's ops run named in their metrics step per
call (Beam's ``Create`` puts two ParDos before them; sparkbeam's cases get two Maps)::

    python benchmarks/plain_call_cpu.py
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def inc(x: int) -> int:
    return x + 1


def one(x: int) -> list[int]:
    return [x]


def keep(x: int) -> bool:
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args(argv)

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.transforms import window as beam_window

    import sparkbeam
    from sparkbeam import window
    from sparkbeam.runners.core.elements.fused import FusedBody
    from sparkbeam.runners.core.elements.window_assignment import GLOBAL_WINDOWS
    from sparkbeam.runners.core.lowering.ops import lower
    from sparkbeam.runners.core.plan.plan import plan_stages
    from sparkbeam.utils.timestamp import MIN_TIMESTAMP
    from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
    from tests.beam_frontend.engine import plan_of

    class Yielding(beam.DoFn):
        def process(self, x):
            yield x

    def beam_case(*transforms: Any) -> Any:
        p = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions([]))
        pcoll = p | beam.Create([0])
        for index, transform in enumerate(transforms):
            pcoll = pcoll | f"T{index}" >> transform
        sparkbeam.capture(pcoll)
        return plan_of(p)

    def sparkbeam_case(*transforms: Any) -> Any:
        p = sparkbeam.Pipeline()
        pcoll = p | sparkbeam.Create([0]) | "P0" >> sparkbeam.Map(inc) | "P1" >> sparkbeam.Map(inc)
        for index, transform in enumerate(transforms):
            pcoll = pcoll | f"T{index}" >> transform
        sparkbeam.capture(pcoll)
        return plan_stages(lower(p))

    def nanoseconds(plan: Any) -> float:
        for stage in plan.stages:
            for op in stage.body:
                if op.label == "T0" or op.label.startswith("T0/"):
                    (source,) = op.inputs
                    elements = [WindowedValue(i, MIN_TIMESTAMP.micros, GLOBAL_WINDOWS, PANE_INFO_UNKNOWN) for i in range(args.elements)]
                    best = float("inf")
                    for _ in range(args.passes):
                        body = FusedBody(stage, bare=True)
                        gc.disable()
                        started = time.process_time()
                        for _output in body.run_bare(source, elements):
                            pass
                        best = min(best, time.process_time() - started)
                        gc.enable()
                    return best / args.elements * 1e9
        msg = "no op labelled T0 in the plan"
        raise RuntimeError(msg)

    cases = {
        "Map": (lambda: beam_case(beam.Map(inc)), lambda: sparkbeam_case(sparkbeam.Map(inc))),
        "FlatMap": (lambda: beam_case(beam.FlatMap(one)), lambda: sparkbeam_case(sparkbeam.FlatMap(one))),
        "DoFn, process alone": (lambda: beam_case(beam.ParDo(Yielding())), None),
        "Filter": (lambda: beam_case(beam.Filter(keep)), lambda: sparkbeam_case(sparkbeam.Filter(keep))),
        "Map stamp | Map": (
            lambda: beam_case(beam.Map(lambda x: beam_window.TimestampedValue(x, 1)), beam.Map(inc)),
            lambda: sparkbeam_case(sparkbeam.Map(lambda x: window.TimestampedValue(x, 1)), sparkbeam.Map(inc)),
        ),
        "4 Maps": (lambda: beam_case(*[beam.Map(inc) for _ in range(4)]), lambda: sparkbeam_case(*[sparkbeam.Map(inc) for _ in range(4)])),
    }
    print(f"{'case':<20} {'Beam front end ns':>18} {'sparkbeam SDK ns':>18}")
    for name, (on_beam, on_sparkbeam) in cases.items():
        ours = f"{nanoseconds(on_sparkbeam()):>18.0f}" if on_sparkbeam is not None else f"{'-':>18}"
        print(f"{name:<20} {nanoseconds(on_beam()):>18.0f} {ours}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
