"""What each source stage contributes to a step: bounded reads split on the driver, text
lines read in byte ranges, unbounded sources' micro-batches and their watermarks (the
"valve" combining partitions' watermarks). It imports only ``lowering``; never the element
runners, the grouping engine, the planner or the step loop, nor any backend."""
