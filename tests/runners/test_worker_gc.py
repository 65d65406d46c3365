"""A reused Python worker freezes what it keeps between tasks, so that PySpark's full
collection after each task walks only what the task made (``runners/spark/worker_gc.py``)."""

from __future__ import annotations

import gc

import pytest

from sparkbeam.runners.spark import metrics, worker_gc


@pytest.fixture
def unfrozen_after(monkeypatch):
    monkeypatch.setattr(worker_gc, "_tasks_started", 0)
    yield
    gc.unfreeze()


def _collectable(objects) -> list[bool]:
    """Whether each object is in a generation the collector walks (not the permanent one)."""
    walked = {id(o) for o in gc.get_objects()}
    return [id(o) in walked for o in objects]


def test_a_task_start_freezes_what_is_alive_and_every_hundredth_unfreezes_it(unfrozen_after):
    # The process-wide freeze count is not compared between calls: other threads of the test
    # worker free frozen objects meanwhile, which lowers it. What the worker keeps is checked.
    gc.unfreeze()
    kept = [[] for _ in range(20)]  # tracked by the collector
    assert all(_collectable(kept))
    worker_gc.task_starts()
    assert gc.get_freeze_count() >= len(kept)
    assert not any(_collectable(kept))
    made_by_a_task = [[] for _ in range(20)]
    for _ in range(worker_gc.FULL_COLLECTION_EVERY - 2):
        worker_gc.task_starts()
        assert not any(_collectable(kept))  # stays frozen until the hundredth
    worker_gc.task_starts()  # the hundredth: PySpark's collection after it walks everything
    assert gc.get_freeze_count() == 0
    assert all(_collectable(kept)) and all(_collectable(made_by_a_task))


def test_a_frozen_cycle_made_garbage_is_freed_after_the_hundredth_task(unfrozen_after):
    import weakref

    class Node:
        pass

    gc.unfreeze()
    node = Node()
    node.self = node  # a cycle: reference counting alone never frees it
    alive = weakref.ref(node)
    worker_gc.task_starts()
    del node
    gc.collect()  # what PySpark's daemon runs after the task
    assert alive() is not None  # frozen: waits
    for _ in range(worker_gc.FULL_COLLECTION_EVERY - 1):
        worker_gc.task_starts()
    gc.collect()
    assert alive() is None


def test_the_drivers_process_never_freezes(unfrozen_after, monkeypatch):
    gc.unfreeze()
    monkeypatch.setattr(metrics, "_TASK", None)
    metrics.task_container()  # in the driver: no task attempt
    assert gc.get_freeze_count() == 0


def test_a_sparkbeam_task_in_a_worker_starts_with_the_workers_objects_frozen(spark):
    def frozen_in_task(_):
        metrics.task_container()
        yield worker_gc._tasks_started % worker_gc.FULL_COLLECTION_EVERY == 0, gc.get_freeze_count()

    seen = spark.sparkContext.parallelize(range(4), 4).mapPartitions(frozen_in_task).collect()
    frozen = [count for hundredth, count in seen if not hundredth]  # a worker's hundredth task unfreezes
    assert frozen and all(count > 1000 for count in frozen)
