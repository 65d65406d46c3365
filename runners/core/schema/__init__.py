"""Schema'd segments: the part of a batch pipeline a backend can run as one SQL plan, and
the schema'd file reads such a plan may start from. It imports ``lowering``, ``sources`` and
``elements``; never the grouping engine, keyed state, the planner, the step loop, any
backend, or a private ``sparkbeam.transforms`` module."""
