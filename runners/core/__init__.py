"""Engine logic with no Spark, in rooms by concept. Imports run one way, lower first:
``lowering`` <- ``sources`` <- ``elements`` <- ``grouping`` <- ``state`` <- ``plan`` <- ``loop``,
with ``schema`` above ``elements`` (tests/test_code_quality.py checks it). Testable with
an injected clock."""
