"""Runnable examples; ``python -m sparkbeam.examples.hourly_team_score`` is the main one."""
