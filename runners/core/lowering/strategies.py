"""The words of the physical plan: how a stage runs, when that is decided at run time, and
what a backend can do (``physical.py`` makes the plan; each backend registers how it runs
each strategy, ``execution.BackendOps.strategies``).

These are plain values with no dependencies, so that the execution registry, the physical
pass and every backend can share them.
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["Capabilities", "Condition", "SourceRead", "StateStore", "Strategy"]


class Strategy(enum.Enum):
    """How a stage (its head and fused body) runs for a step."""

    #: the stage's fused body over its inputs (on Spark: one ``mapPartitions``)
    FUSED_MAP = "fused map"
    #: the fused body run inside the map side of the batch grouping that alone reads its
    #: output: no pass of its own (on Spark: the body is lazily handed on)
    MAP_SIDE_PASS = "map-side pass into the grouping"
    #: a source stage with nothing to run: its read's elements handed on as read
    AS_READ = "as read"
    #: the fused body run in the driver's process, as one task would run it
    DRIVER_RUN = "run on the driver"
    #: a stage reading side inputs in a stream: ready elements run, the others wait
    SIDE_INPUT_WAIT = "side-input wait"
    #: a batch grouping that fires once per key and window: combined before the shuffle,
    #: merged after it, no keyed state
    BATCH_COMBINE = "batch combine by key"
    #: keyed state, the combine lifted before the shuffle (partials per key and window)
    LIFTED_GROUPING = "lifted grouping"
    #: keyed state, the elements shuffled as they are
    UNLIFTED_GROUPING = "unlifted grouping"
    #: a stateful DoFn's keyed state and timers
    STATEFUL = "stateful DoFn"
    #: nothing runs: the stage's state and summary carried to the next step
    SKIP_IDLE = "skipped (idle)"


class StateStore(enum.Enum):
    """Where a keyed stage's state lives between steps, and what a step reads of it. A
    backend registers how it runs each it offers (beside its strategies); the physical
    plan picks one per keyed stage."""

    #: hash buckets of pickled keys, each with its holds and next timers: a step reads
    #: only the buckets whose keys receive elements or whose timers are due, and hands the
    #: others on as bytes (``keyed_buckets.py``)
    HASH_BUCKETS = "hash buckets"


class Condition(enum.Enum):
    """What the data of a step decides, checked at run time by ``physical.condition_holds``."""

    NOTHING_NEW = "no new elements"
    #: no processing-time timer due, and the input watermark reaches no event-time timer
    #: (window end, trigger, user timer, garbage collection) of the state
    NOTHING_DUE = "no timer due"
    HELD_OR_COUNTED = "the driver holds or has counted its elements"
    HELD_AND_FEW = "the driver holds every input, 1 to 256 elements"
    SIDE_INPUTS_COMPLETE = "every side input is complete and nothing waits"
    #: nothing waits, or no side input reached the end of a window something waits for
    NOTHING_RELEASABLE = "no side input can release what waits"


class SourceRead(enum.Enum):
    """Where a source stage's elements come from (an op kind's ``read``)."""

    #: the driver has them and keeps them (an Impulse's one element; a SQL plan's panes
    #: that a capture or side input reads)
    HELD = "kept on the driver"
    #: made on the executors; the driver knows how many (a SQL plan's panes)
    COUNTED = "made on the executors, counted"
    #: the driver has them and spreads them over the partitions (Create, TestStream)
    SPREAD = "spread from the driver"
    #: read by the executors (files, a bounded source's bundles, a stream's log)
    EXECUTORS = "read on the executors"


@attrs.frozen
class Capabilities:
    """What a backend declares it can do: the strategies it registered, and what its
    session allows."""

    backend: str
    strategies: frozenset[Strategy]
    #: a stage on few elements the driver holds may run in the driver's process (on
    #: Spark: a plain local master whose Python workers are this interpreter)
    driver_runs_tiny_stages: bool = False
    #: a keyed stage's summary job may wait, to run with the step's others as one
    puts_off_summaries: bool = False
    #: datasets are computed only when something reads them: a stage nothing reads needs
    #: a job of its own
    lazy: bool = False
    #: the keyed-state stores it registered (none: it keeps keyed state its own way)
    state_stores: frozenset[StateStore] = frozenset()

    def runs(self, strategy: Strategy) -> bool:
        return strategy in self.strategies
