"""The words every room shares: the user's pipeline lowered to a flat list of picklable ops
(``ops``), the errors that name a transform, the one registry class, a run's typed
settings, the strategies a physical plan names, stable descriptions of settings, the checks
made before a run starts, and the values a step ships to its workers and gets back
(``step_values``). It imports no other room of ``runners/core``, and nothing from
``runners/spark``, ``runners/beam``, pyspark or apache_beam."""
