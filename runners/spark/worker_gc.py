"""What a reused Python worker's garbage collection costs per task, made to follow the task.

PySpark's daemon runs a full ``gc.collect()`` in a reused Python worker after every task
(``pyspark/daemon.py``). A full collection walks every object the cyclic collector tracks:
in a worker that has imported sparkbeam, PySpark, pyarrow and pandas, about 90,000 objects
that live as long as the process, 20-45 ms of CPU per task on the benchmark machine, the
Python workers' largest cost in a Kafka step (benchmarks/README.md, "Where a Kafka step's
time goes"). ``task_starts`` moves what is alive when a task starts (what the worker keeps
between tasks: the modules, their caches) to the collector's permanent generation
(``gc.freeze``), so that collection after the task walks what the task made.

Reference counting still frees a frozen object as soon as nothing refers to it; only an
unreachable cycle of frozen objects would wait. So every ``FULL_COLLECTION_EVERY``-th task
unfreezes them instead, and PySpark's collection after that task walks and frees
everything, as it does without this: a cycle made garbage meanwhile waits for at most that
many tasks. Only a worker's process freezes, never the driver's.
"""

from __future__ import annotations

import gc

__all__ = ["FULL_COLLECTION_EVERY", "task_starts"]

#: every this many tasks, the collection after a task walks everything again (see above)
FULL_COLLECTION_EVERY = 100

_tasks_started = 0


def task_starts() -> None:
    """Called as a task attempt starts in a Python worker (never in the driver's process)."""
    global _tasks_started
    _tasks_started += 1
    if _tasks_started % FULL_COLLECTION_EVERY == 0:
        gc.unfreeze()  # this task's end: PySpark's collection frees any frozen cycle
    else:
        gc.freeze()
