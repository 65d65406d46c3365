"""Oracle pairs: build the same pipeline with apache_beam and with sparkbeam, compare outputs.

A test writes one builder ``build(ns, p) -> PCollection`` against a namespace ``ns`` that
is either Beam's or ours (``ns.beam``, ``ns.window``, ``ns.trigger``, ``ns.TestStream``,
``ns.TimestampedValue``). Both runs are reduced to multisets of
``(value, timestamp_ms, window, pane)``: timestamps in milliseconds because Beam's local
runners encode time in milliseconds, and list values sorted because grouping order is
unspecified in both.
"""

from __future__ import annotations

import collections
import itertools
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

import sparkbeam
import sparkbeam.testing.test_stream as sb_test_stream
from sparkbeam.options.pipeline_options import PipelineOptions

Row = tuple[Any, int, Any, tuple]

_BEAM_RESULTS: dict[int, list] = {}
_BEAM_LOCK = threading.Lock()
_TOKENS = itertools.count()


def _beam_ns() -> types.SimpleNamespace:
    import apache_beam as beam
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms import combiners, trigger, util, window

    return types.SimpleNamespace(
        beam=beam, window=window, trigger=trigger, TestStream=TestStream,
        TimestampedValue=window.TimestampedValue, combiners=combiners, pvalue=beam.pvalue,
        util=util,
    )


def _sparkbeam_ns() -> types.SimpleNamespace:
    from sparkbeam.transforms import trigger, util, window

    return types.SimpleNamespace(
        beam=sparkbeam, window=window, trigger=trigger, TestStream=sb_test_stream.TestStream,
        TimestampedValue=window.TimestampedValue, combiners=getattr(sparkbeam, "combiners", None),
        pvalue=sparkbeam.pvalue, util=util,
    )


def canonical(value: Any) -> Any:
    """A hashable, order-insensitive form of a value (lists and sets become sorted tuples,
    Rows and NamedTuples their (name, value) fields)."""
    if isinstance(value, (list, set, frozenset)) or type(value).__name__ == "_UnwindowedValues":
        items = [canonical(v) for v in value]
        try:
            return ("<list>", tuple(sorted(items)))
        except TypeError:
            return ("<list>", tuple(sorted(items, key=repr)))
    fields = _schema_fields(value)
    if fields is not None:
        return ("<row>", tuple((name, canonical(v)) for name, v in fields))
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    if isinstance(value, dict):
        return ("<dict>", tuple(sorted((canonical(k), canonical(v)) for k, v in value.items())))
    return value


def _schema_fields(value: Any) -> list[tuple[str, Any]] | None:
    """The (name, value) fields of a schema row (Beam's Row, ours, or a NamedTuple), else None.

    One form for all three: Beam's runners turn Rows into generated NamedTuples wherever
    they encode them (at a GroupByKey), sparkbeam keeps the Python objects; what must
    agree is the field names, their order and the values. Tests in tests/schemas check
    the Python types sparkbeam outputs on their own.
    """
    kind = type(value)
    if isinstance(value, sparkbeam.Row) or (kind.__name__ == "Row" and kind.__module__ == "apache_beam.pvalue"):
        return list(vars(value).items())
    names = getattr(kind, "_fields", None)
    if isinstance(value, tuple) and isinstance(names, tuple):
        return list(zip(names, value))
    return None


def _window_key(window: Any) -> Any:
    if type(window).__name__ == "GlobalWindow":
        return "global"
    return (window.start.micros // 1000, window.end.micros // 1000)


def _pane_key(pane: Any) -> tuple:
    timing = pane.timing
    names = {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}
    return (pane.is_first, pane.is_last, names[int(timing)], pane.index, pane.nonspeculative_index)


def run_beam(
    build: Callable[[Any, Any], Any],
    *,
    streaming: bool = False,
    runner: str | None = None,
    flags: Sequence[str] = (),
    canonical_output: bool = False,
) -> collections.Counter:
    """The builder's output on Beam's local runner: FnApiRunner, or BundleBasedDirectRunner
    when streaming; ``runner`` names another where FnApiRunner cannot run a pipeline, and
    ``flags`` are Beam's pipeline flags for it (``PrismServer.pipeline_flags()`` for Prism,
    whose LOOPBACK worker runs in this process, so the registry below still hears it).
    ``canonical_output``: the builder's last step already makes each value ``canonical``
    (Nexmark's harness), so values are recorded as they are, not made canonical again."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions as BeamOptions
    from apache_beam.options.pipeline_options import StandardOptions, TypeOptions

    token = next(_TOKENS)
    _BEAM_RESULTS[token] = []

    def record(element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        # Beam pickles this function by value, globals included: reach the real registry
        # through the module, not through a pickled copy of it.
        from tests import oracle as registry

        with registry._BEAM_LOCK:
            value = element if canonical_output else canonical(element)
            registry._BEAM_RESULTS[token].append((value, timestamp.micros // 1000, _window_key(window), _pane_key(pane)))

    # No flags: Beam would otherwise parse sys.argv, which holds pytest's arguments.
    options = BeamOptions(list(flags))
    if streaming:
        options.view_as(StandardOptions).streaming = True
        # As Beam's own transcript tests: sparkbeam counts what a finished trigger drops
        # instead of refusing such triggers.
        options.view_as(TypeOptions).allow_unsafe_triggers = True
    runner = runner or ("BundleBasedDirectRunner" if streaming else "FnApiRunner")
    with beam.Pipeline(runner=runner, options=options) as p:
        build(_beam_ns(), p) | "OracleRecord" >> beam.Map(record)
    return collections.Counter(_BEAM_RESULTS.pop(token))


def run_sparkbeam(build: Callable[[Any, Any], Any], *, streaming: bool = False, **options: Any) -> collections.Counter:
    p = sparkbeam.Pipeline(options=PipelineOptions(streaming=streaming, **options))
    output = sparkbeam.capture(build(_sparkbeam_ns(), p))
    result = p.run()
    return collections.Counter(
        (canonical(e.value), e.timestamp.micros // 1000, _window_key(w), _pane_key(e.pane))
        for e in result.emissions(output)
        for w in e.windows
    )


def assert_same_as_beam(
    build: Callable[[Any, Any], Any], *, streaming: bool = False, expect_empty: bool = False, **options: Any
) -> collections.Counter:
    """Run ``build`` on both and fail with the differences if the multisets differ.

    Two empty outputs agree, and prove nothing: a builder that filters everything away,
    or a recorder that never sees Beam's elements, would pass whatever sparkbeam does. So
    empty outputs fail unless the test says emptiness is the point (``expect_empty=True``),
    and then any output fails.
    """
    expected = run_beam(build, streaming=streaming)
    actual = run_sparkbeam(build, streaming=streaming, **options)
    if expected != actual:
        missing = expected - actual
        unexpected = actual - expected
        msg = "sparkbeam differs from Beam\n  missing (Beam has, we lack):\n    " + "\n    ".join(
            map(repr, sorted(missing.elements(), key=repr))
        ) + "\n  unexpected (we have, Beam lacks):\n    " + "\n    ".join(map(repr, sorted(unexpected.elements(), key=repr)))
        raise AssertionError(msg)
    if expect_empty and actual:
        msg = f"expect_empty=True, but Beam and sparkbeam both output {sorted(actual.elements(), key=repr)!r}"
        raise AssertionError(msg)
    if not expect_empty and not actual:
        msg = (
            "Beam and sparkbeam both output nothing, so the comparison proves nothing: fix the "
            "builder so that it outputs something, or pass expect_empty=True if emptiness is the point"
        )
        raise AssertionError(msg)
    return actual
