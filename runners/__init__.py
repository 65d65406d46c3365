"""Runners: ``core`` (engine logic with no Spark) and ``spark`` (execution on PySpark)."""
