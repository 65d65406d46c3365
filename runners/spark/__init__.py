"""The Spark runner: translates a pipeline into PySpark stages and runs them."""
