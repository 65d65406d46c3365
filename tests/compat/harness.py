"""Run one of Beam's examples twice: unmodified on apache_beam, then on sparkbeam.

An ``Example`` names the module and a driver. A driver is what the example's own tests do
with it: call its ``run(argv)`` with local files, or apply its transforms to a small
input, on the ``Side`` it is given; it returns a multiset of what came out (lines of the
output files, or records ``(value, timestamp, window, pane)``). Beam runs first, on its
FnApiRunner: its output proves the driver drives something. Then sparkbeam runs it on the
shared Spark session, one of two ways, and the two multisets are compared:

- ``run_example``: the module with its imports rewritten to sparkbeam's SDK (``tests/compat``);
- ``run_example_unmodified``: the module as installed, still importing apache_beam, with
  ``--runner=sparkbeam.SparkRunner`` (``tests/beam_frontend``).

An example that sparkbeam cannot run yet carries a ``Gap``: the exception it must fail
with (type and message) and why. The test is then a strict xfail, so a fix that makes it
pass, or a failure that changes, both show up.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import importlib
import itertools
import pathlib
import re
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from tests.compat.rewrite import load_rewritten
from tests.oracle import _pane_key, _window_key, canonical

Output = collections.Counter


@attrs.frozen
class Side:
    """One of the two runs: which SDK the example's code is bound to, and where it writes."""

    name: str  # "beam", "sparkbeam" (the rewritten module) or "sparkbeam-runner" (unmodified)
    sdk: types.ModuleType  # apache_beam or sparkbeam, for what the driver builds itself
    pipeline_args: tuple[str, ...]  # extra flags for the example's run(argv)
    inputs: pathlib.Path  # shared by both sides: paths in the outputs are the same
    outputs: pathlib.Path

    def args(self, **flags: Any) -> list[str]:
        """``--name=value`` flags for the example's own parser, then the pipeline's flags."""
        return [f"--{name}={value}" for name, value in flags.items()] + list(self.pipeline_args)

    def write_input(self, name: str, text: str) -> str:
        path = self.inputs / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return str(path)

    def output_prefix(self, name: str) -> str:
        return str(self.outputs / name)

    def collect(self, build: Callable[[Any], Any]) -> Output:
        """Run ``build(pipeline)`` on a fresh pipeline of this side. It returns a PCollection,
        or a dict of named ones; their elements as a multiset of (value, timestamp in ms,
        window, pane), tagged with the name for a dict."""
        if self.name == "beam":
            return _collect_beam(build, self.pipeline_args)
        if self.name == "sparkbeam-runner":
            return _collect_beam_on_sparkbeam(build, self.pipeline_args)
        return _collect_sparkbeam(build)


_BEAM_RESULTS: dict[int, list] = {}
_BEAM_LOCK = threading.Lock()
_TOKENS = itertools.count()


def _named(outputs: Any) -> dict[str | None, Any]:
    return dict(outputs) if isinstance(outputs, dict) else {None: outputs}


def _record(name: str | None, element: Any, timestamp: Any, window: Any, pane: Any) -> Any:
    row = (canonical(element), timestamp.micros // 1000, _window_key(window), _pane_key(pane))
    return row if name is None else (name, *row)


def _collect_beam(build: Callable[[Any], Any], pipeline_args: tuple[str, ...]) -> Output:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    token = next(_TOKENS)
    _BEAM_RESULTS[token] = []

    def recorder(name: str | None) -> Callable[..., None]:
        def record(element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
            # Beam pickles this function by value: reach the real registry through the module.
            from tests.compat import harness as registry

            with registry._BEAM_LOCK:
                registry._BEAM_RESULTS[token].append(registry._record(name, element, timestamp, window, pane))

        return record

    with beam.Pipeline(options=PipelineOptions(list(pipeline_args))) as p:
        for name, pcoll in _named(build(p)).items():
            pcoll | f"CompatRecord{name or ''}" >> beam.Map(recorder(name))
    return collections.Counter(_BEAM_RESULTS.pop(token))


def _collect_sparkbeam(build: Callable[[Any], Any]) -> Output:
    import sparkbeam

    p = sparkbeam.Pipeline()
    outputs = {name: sparkbeam.capture(pcoll) for name, pcoll in _named(build(p)).items()}
    result = p.run()
    return _emitted(result, outputs)


def _collect_beam_on_sparkbeam(build: Callable[[Any], Any], pipeline_args: tuple[str, ...]) -> Output:
    """An apache_beam pipeline on sparkbeam's runner: its outputs captured as the SDK's are
    (the recorder of ``_collect_beam`` would append in Spark's worker processes)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    import sparkbeam

    p = beam.Pipeline(options=PipelineOptions(list(pipeline_args)))
    outputs = {name: sparkbeam.capture(pcoll) for name, pcoll in _named(build(p)).items()}
    result = p.run()
    return _emitted(result, outputs)


def _emitted(result: Any, outputs: dict[str | None, Any]) -> Output:
    return collections.Counter(
        _record(name, emission.value, emission.timestamp, window, emission.pane)
        for name, pcoll in outputs.items()
        for emission in result.emissions(pcoll)
        for window in emission.windows
    )


def read_lines(pattern: str) -> Output:
    """The lines of every file matching ``pattern`` (the shards of one write), as a multiset."""
    files = [path for path in glob.glob(pattern) if pathlib.Path(path).is_file()]
    lines: Output = collections.Counter()
    for path in files:
        lines.update(pathlib.Path(path).read_text(encoding="utf-8").splitlines())
    return lines


def tagged(parts: dict[str, Output]) -> Output:
    """Several outputs of one example as one multiset of (part, item)."""
    return collections.Counter({(part, item): count for part, output in parts.items() for item, count in output.items()})


def assert_same(expected: Output, actual: Output) -> None:
    if expected != actual:
        missing = sorted((expected - actual).elements(), key=repr)
        unexpected = sorted((actual - expected).elements(), key=repr)
        msg = (
            "sparkbeam's output differs from Beam's\n  missing (Beam has, we lack):\n    "
            + "\n    ".join(map(repr, missing))
            + "\n  unexpected (we have, Beam lacks):\n    "
            + "\n    ".join(map(repr, unexpected))
        )
        raise AssertionError(msg)


@attrs.frozen
class Gap:
    """Why sparkbeam cannot run an example yet, and exactly how it fails meanwhile."""

    raises: type[BaseException]
    match: str  # a regular expression the error's message must contain
    reason: str  # one line for the README and the test report

    def xfail(self) -> Any:
        return pytest.mark.xfail(strict=True, raises=self.raises, reason=self.reason)

    @contextlib.contextmanager
    def expected_failure(self, what: str) -> Iterator[None]:
        """Lets this gap's own failure through (for the xfail marker); any other failure of
        the same type becomes an AssertionError, so that the xfail does not hide it."""
        try:
            yield
        except self.raises as error:
            if not re.search(self.match, str(error)):
                msg = f"{what} was expected to fail matching {self.match!r}, but failed with: {error}"
                raise AssertionError(msg) from error
            raise


@attrs.frozen
class Example:
    family: str  # wordcount, game, cookbook, complete
    name: str
    module: str  # the Beam module, e.g. apache_beam.examples.wordcount
    drive: Callable[[types.ModuleType, Side], Output]
    compare: Callable[[Output, Output], None] = assert_same
    gap: Gap | None = None

    @property
    def id(self) -> str:
        return f"{self.family}/{self.name}"

    def param(self) -> Any:
        marks = [] if self.gap is None else [self.gap.xfail()]
        return pytest.param(self, id=self.id, marks=marks)

    @contextlib.contextmanager
    def expected_failure(self) -> Iterator[None]:
        """The gap's expected failure (``Gap.expected_failure``), if the example has one."""
        if self.gap is None:
            yield
            return
        with self.gap.expected_failure(self.id):
            yield


def _beam_output(example: Example, beam_side: Side) -> Output:
    for directory in (beam_side.inputs, beam_side.outputs):
        directory.mkdir(parents=True, exist_ok=True)
    expected = example.drive(importlib.import_module(example.module), beam_side)
    if not expected:
        msg = f"{example.id}: Beam's run output nothing, so the comparison would prove nothing: fix the driver"
        raise AssertionError(msg)
    return expected


def run_example(example: Example, workdir: pathlib.Path) -> None:
    """The example unmodified on Beam's FnApiRunner, then import-rewritten on sparkbeam."""
    import apache_beam

    import sparkbeam

    inputs = workdir / "inputs"
    expected = _beam_output(example, Side("beam", apache_beam, ("--runner=FnApiRunner",), inputs, workdir / "beam"))
    our_side = Side("sparkbeam", sparkbeam, (), inputs, workdir / "sparkbeam")
    our_side.outputs.mkdir(parents=True, exist_ok=True)
    with example.expected_failure():
        actual = example.drive(load_rewritten(example.module), our_side)
        example.compare(expected, actual)


#: the flags the unmodified examples run with on sparkbeam (the rule off: current Beam)
SPARKBEAM_RUNNER_FLAGS = ("--runner=sparkbeam.SparkRunner", "--no_overlapping_window_rule", "--state_partitions=2")


def run_example_unmodified(example: Example, workdir: pathlib.Path, gap: Gap | None = None, flags: tuple[str, ...] = ()) -> None:
    """The example as installed (importing apache_beam) on Beam's FnApiRunner, then on
    sparkbeam's runner by the flag alone (and ``flags``: ``--spark_remote=...`` for a Spark
    Connect server). ``gap`` is how it fails there, if it does."""
    import apache_beam

    inputs = workdir / "inputs"
    expected = _beam_output(example, Side("beam", apache_beam, ("--runner=FnApiRunner",), inputs, workdir / "beam"))
    our_side = Side("sparkbeam-runner", apache_beam, (*SPARKBEAM_RUNNER_FLAGS, *flags), inputs, workdir / "sparkbeam")
    our_side.outputs.mkdir(parents=True, exist_ok=True)
    with attrs.evolve(example, gap=gap).expected_failure():
        actual = example.drive(importlib.import_module(example.module), our_side)
        example.compare(expected, actual)
