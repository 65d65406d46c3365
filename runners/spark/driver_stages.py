"""Tiny element-wise stages run in the driver's process instead of a Spark job.

A Spark job costs about 0.1 s however little it does. Beam's ``WriteToText`` hangs three
one-element chains off an ``Impulse`` (initialise, pre-finalise and finalise its files),
each read as a side input or by the next: three Spark jobs for three calls. On a local
master whose executors run this very interpreter on this machine (no packages installed
for the executors alone), a stage whose inputs the driver holds (an ``Impulse``'s element,
or what such a stage made here), few, runs the same fused body here, on a fresh copy of
the stage as an executor would unpickle it, with its element counts, its metrics
(committed as a successful task's) and its failures (the user's exception, with the
transform named) as a Spark task reports them; its outputs stay on the driver too, and
go to Spark only for a stage that runs there. A ``Create``'s values, anything bigger, a
sink, a grouping, a stateful or splittable DoFn, parked elements: all run on Spark.

Which stages are candidates, and on which steps they run here, is the physical plan's
choice (``runners/core/plan/physical.py``: ``Strategy.DRIVER_RUN`` when the driver holds every
input, at most ``DRIVER_STAGE_MAX_ELEMENTS``); this module says whether the session allows
it and runs a stage the plan sends here.
"""

from __future__ import annotations

from typing import Any

# PySpark's own copy, as Spark pickles a task's functions with it.
from pyspark import cloudpickle

from sparkbeam.runners.core.plan.physical import DRIVER_STAGE_MAX_ELEMENTS
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.spark import metrics, stage_records, worker
from sparkbeam.runners.spark.errors import user_errors
from sparkbeam.runners.spark.session import executors_share_this_interpreter

__all__ = ["DRIVER_STAGE_MAX_ELEMENTS", "DRIVER_STAGE_MAX_OUTPUTS", "driver_can_run_stages", "run_on_driver"]

#: at most this many output elements: past it the attempt is abandoned for Spark
DRIVER_STAGE_MAX_OUTPUTS = 4096


def driver_can_run_stages(spark_context: Any) -> bool:
    """Whether the driver's process is as good a place as an executor's: a plain local
    master (``local``, ``local[N]``; a ``local-cluster``'s executors are processes of their
    own) whose Python workers are this interpreter, with nothing added to their path."""
    master = spark_context.master
    plain_local = master == "local" or master.startswith("local[")
    added_path = spark_context.environment.get("PYTHONPATH") or spark_context._python_includes
    return plain_local and executors_share_this_interpreter(spark_context) and not added_path


def run_on_driver(stage: Stage, inputs: dict[int, Any], side_inputs: dict[int, list], channel: Any, counters: Any) -> dict[int, list] | None:
    """The stage's outputs, pcoll -> elements, from its fused body run here as one task; or
    None, the attempt abandoned (its metrics reported as a failed attempt's), when it makes
    more than ``DRIVER_STAGE_MAX_OUTPUTS`` elements (a ``FlatMap`` that explodes an
    ``Impulse``, as Beam's ``Create`` does): such a stage runs on Spark instead."""
    # A fresh copy, as a task unpickles it: DoFns set up and torn down per bundle do not
    # carry instance state from one run to the next.
    shipped = cloudpickle.loads(cloudpickle.dumps(stage_records.shippable(stage)))
    tagged = [(pcoll, element) for pcoll, dataset in inputs.items() for element in dataset.collected]
    outputs: dict[int, list] = {pcoll: [] for pcoll in stage.outputs}
    made = 0
    with user_errors(channel.error_key), metrics.driver_task():
        task = metrics.metered(channel, worker.run_body, shipped, _Held(side_inputs) if side_inputs else None, counters, iter(tagged))
        for pcoll, element in task:
            made += 1
            if made > DRIVER_STAGE_MAX_OUTPUTS:
                metrics.task_failed()
                task.close()
                return None
            outputs[pcoll].append(element)
    return outputs


class _Held:
    """Side inputs the driver holds, read as an executor reads a broadcast's."""

    def __init__(self, value: dict[int, list]) -> None:
        self.value = value
