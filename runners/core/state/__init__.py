"""Keyed state between steps: a stateful DoFn's cells and timers per key, one stateful step
over a partition of keys, and the hash buckets a step reads and writes only where it has
work. It imports ``lowering``, ``elements`` and ``grouping``; never the planner, the step
loop or any backend."""
