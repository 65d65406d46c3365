"""Accumulators read once, then handed back so that a long stream does not keep them all.

PySpark keeps every accumulator it creates in a registry of its module for the life of
the process (``pyspark.accumulators._accumulatorRegistry``), where executors' updates find
it. A stream makes a few per step (elements in and out of each stage, each source batch's
statistics), so the driver would grow by them for as long as the stream runs. An
accumulator whose value the driver has read after the jobs that add to it ended (their
updates are merged before a job completes) is not needed any more: ``release`` takes it
out of the registry, and an update that would still arrive for it is ignored by PySpark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["read_and_release"]


def read_and_release(*accumulators: Any) -> list[Any]:
    """The accumulators' values, after which PySpark forgets them."""
    from pyspark import accumulators as registry

    values = [accumulator.value for accumulator in accumulators]
    for accumulator in accumulators:
        registry._accumulatorRegistry.pop(accumulator.aid, None)
    return values
