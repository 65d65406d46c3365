"""The step loop: every stage's watermarks one step (micro-batch) at a time, the clocks it
reads "now" from, elements waiting for side inputs, the timeline and history a run keeps,
and the in-memory backend (the engine over Python lists, no Spark). It is the top room: it
may import every other room, and no room imports it."""
