"""The per-key event-time grouping engine: windows and merging, triggers, holds and output
timestamps, lateness and drops, keys grouped as Beam groups them, combiner lifting, the
records that cross a shuffle, and one grouping step over a partition of keys. It imports
``lowering`` and ``elements`` (metrics) only; never keyed state, the planner, the step loop
or any backend."""
