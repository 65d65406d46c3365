"""Deciding how a pipeline runs, once, before the first step: the stage plan (element-wise
ops fused into stages, a boundary at each source and grouping) and the physical plan (the
strategy that runs each stage, why, and the conditions a step checks). It imports
``lowering``, ``elements`` and ``grouping`` (the hold rules lifting depends on); never the
step loop or any backend."""
