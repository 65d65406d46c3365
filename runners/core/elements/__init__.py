"""Running element-wise code: the execution registry (what each op kind is and what each
backend registers for it), calling a user's DoFn, fusing a stage's element-wise ops into
one pass, window assignment, metrics scoped to the user's step, and the garbage-collector
pause around allocation-heavy blocks. It imports ``lowering`` and ``sources`` only; never
the grouping engine, keyed state, the planner or the step loop, nor any backend."""
