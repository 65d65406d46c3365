"""sparkbeam on Spark Connect: the physical plan's strategies with DataFrame operations only.

``session.py`` says which runs go through Spark Connect (``--spark_remote``, Spark's
``SPARK_REMOTE``, an active Connect session) and reaches the server; ``refusals.py`` refuses
before the run what the backend does not run yet; ``backend.py`` runs the strategies it
registered, with the functions of ``tasks.py`` on the server's Python workers; ``runner.py``
drives the shared step loop over it.
"""
