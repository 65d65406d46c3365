"""Oracle pairs for the Beam front end: one apache_beam pipeline, two runners.

A builder ``build(ns, p)`` written against apache_beam (``tests.oracle._beam_ns``) runs on
Beam's own local runner (``tests.oracle.run_beam``) and, unchanged, on sparkbeam with
``--runner=sparkbeam.SparkRunner``; the outputs are compared as multisets of (value,
timestamp in ms, window, pane), as ``tests.oracle`` compares sparkbeam's SDK with Beam.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import sparkbeam
from tests.oracle import _beam_ns, _pane_key, _window_key, canonical, run_beam


def sparkbeam_flags(*, streaming: bool = False, **flags: Any) -> list[str]:
    """Command-line flags for a run on sparkbeam (overlapping-window rule off: current Beam)."""
    argv = ["--runner=sparkbeam.SparkRunner", "--no_overlapping_window_rule"]
    if streaming:
        argv += ["--streaming", "--allow_unsafe_triggers"]
    argv += [f"--{name}={value}" for name, value in flags.items()]
    return argv


def run_on_sparkbeam(
    build: Callable[[Any, Any], Any], *, streaming: bool = False, canonical_output: bool = False, **flags: Any
) -> tuple[collections.Counter, Any]:
    """The builder's output on sparkbeam's runner, and the run's result. ``canonical_output``:
    as ``run_beam``'s (values recorded as they are: the builder's last step made them canonical)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    pipeline = beam.Pipeline(options=PipelineOptions(sparkbeam_flags(streaming=streaming, **flags)))
    output = sparkbeam.capture(build(_beam_ns(), pipeline))
    result = pipeline.run()
    rows = collections.Counter(
        (e.value if canonical_output else canonical(e.value), e.timestamp.micros // 1000, _window_key(w), _pane_key(e.pane))
        for e in result.emissions(output)
        for w in e.windows
    )
    return rows, result


def assert_runners_agree(
    build: Callable[[Any, Any], Any],
    *,
    streaming: bool = False,
    beam_runner: str | None = None,
    beam_flags: Sequence[str] = (),
    canonical_output: bool = False,
    **flags: Any,
) -> Any:
    """Fail with the differences if sparkbeam's output differs from Beam's (``beam_runner``,
    ``beam_flags`` and ``canonical_output``: see ``run_beam``); an empty output fails too
    (it would prove nothing). Returns sparkbeam's result."""
    expected = run_beam(build, streaming=streaming, runner=beam_runner, flags=beam_flags, canonical_output=canonical_output)
    actual, result = run_on_sparkbeam(build, streaming=streaming, canonical_output=canonical_output, **flags)
    if expected != actual:
        missing = sorted((expected - actual).elements(), key=repr)
        unexpected = sorted((actual - expected).elements(), key=repr)
        msg = (
            f"sparkbeam's Beam runner differs from Beam's {beam_runner or 'local runner'}\n  missing (Beam has, we lack):\n    "
            + "\n    ".join(map(repr, missing))
            + "\n  unexpected (we have, Beam lacks):\n    "
            + "\n    ".join(map(repr, unexpected))
        )
        raise AssertionError(msg)
    if not actual:
        msg = "both runners output nothing, so the comparison proves nothing: fix the builder"
        raise AssertionError(msg)
    return result
