"""Trigger transcripts in Beam's YAML format: parse them, drive any executor, check panes.

A transcript file holds YAML documents, each one case::

    name: fixed_default
    window_fn: FixedWindows(10)          # sparkbeam names; an empty () may be omitted
    trigger_fn: Default
    accumulation_mode: discarding        # default: accumulating (Beam's harness default)
    timestamp_combiner: OUTPUT_AT_EOW    # default
    allowed_lateness: 0                  # seconds, default 0
    overlapping_window_rule: false       # sparkbeam extension, default true
    transcript:
      - input: [1, 2, 3]                 # elements; each value is its own timestamp (s)
      - watermark: 25                    # the input watermark moves to 25 s
      - clock: 5                         # processing time advances BY 5 s (as Beam's
                                         #   TestStream harness: advance_processing_time)
      - expect:                          # the panes the previous action produced
          - {window: [0, 9], values: [1, 2, 3], timestamp: 9, index: 0}
      - state: {present: [[20, 29]], absent: [[0, 9]], tombstone: [[10, 19]]}
    error: Unmatched output              # the case must fail with this message (regex)

Matching is Beam's (``trigger_test.TranscriptTest``): an expected pane matches the first
actual pane whose attributes agree on every key both have; windows are
``[start, max_timestamp]`` and times are floored to integral seconds; output not
matched by the ``expect`` steps that follow an action fails the case at the next action
("Unexpected output"), an expected pane with no match fails at once ("Unmatched output").

``state`` is a sparkbeam extension to Beam's (ignored) ``state`` step: ``present``,
``absent`` and ``tombstone`` windows, plus the drop counters since the case began
(``late_dropped``, ``closed_dropped``, ``merged_into_closed_dropped``,
``expired_state_dropped``) and ``earliest_hold`` (seconds, or ``null`` for none).

The parser, the matcher and the step loop know nothing about the executor: a driver
(``TranscriptDriver``) feeds elements, watermarks and clock moves to one (the core engine,
the Spark runner) and returns the panes it emitted.
"""

from __future__ import annotations

import ast
import random
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import yaml

from sparkbeam import trigger as trigger_module
from sparkbeam import window as window_module
from sparkbeam.trigger import AccumulationMode, DefaultTrigger, TriggerFn
from sparkbeam.utils.timestamp import Duration, to_micros
from sparkbeam.utils.windowed_value import PaneInfoTiming, WindowedValue
from sparkbeam.window import FixedWindows, IntervalWindow, TimestampCombiner, WindowFn
from sparkbeam.windowing import Windowing

__all__ = [
    "BUNDLINGS",
    "DROP_KEYS",
    "PANE_KEYS",
    "CustomTimestampingFixedWindowsWindowFn",
    "StateExpectation",
    "Step",
    "Transcript",
    "TranscriptDriver",
    "TranscriptMismatch",
    "batch_final_panes",
    "bundle_variants",
    "check_final_panes",
    "check_step",
    "load_transcripts",
    "pane_info_dict",
    "parse_spec",
    "run_case",
    "run_transcript",
    "split_bundles",
    "whole_seconds",
]

PANE_KEYS = frozenset(
    {"window", "values", "timestamp", "index", "nonspeculative_index", "early", "late", "final"}
)
_CASE_KEYS = frozenset(
    {
        "name",
        "window_fn",
        "trigger_fn",
        "accumulation_mode",
        "timestamp_combiner",
        "allowed_lateness",
        "overlapping_window_rule",
        "transcript",
        "error",
        "broken_on",
    }
)
DROP_KEYS = ("late_dropped", "closed_dropped", "merged_into_closed_dropped", "expired_state_dropped")
_STATE_KEYS = frozenset({"present", "absent", "tombstone", "earliest_hold", *DROP_KEYS})


class TranscriptMismatch(AssertionError):
    """The executor's panes differ from the transcript's expectations."""


class CustomTimestampingFixedWindowsWindowFn(FixedWindows):
    """Fixed windows whose EARLIEST_TRANSFORMED output time is 100 s after the element
    (the window fn Beam's transcripts name)."""

    def get_transformed_output_time(self, window, input_timestamp):
        return input_timestamp + 100


_WINDOW_FN_NAMES: dict[str, Any] = {
    name: getattr(window_module, name) for name in window_module.__all__
} | {"CustomTimestampingFixedWindowsWindowFn": CustomTimestampingFixedWindowsWindowFn}
_TRIGGER_NAMES: dict[str, Any] = {
    name: getattr(trigger_module, name) for name in trigger_module.__all__
} | {"Default": DefaultTrigger}


# ---------------------------------------------------------------------------- parsing


def parse_spec(text: str, names: Mapping[str, Any]) -> Any:
    """Evaluate ``'AfterWatermark(early=AfterCount(2))'`` over ``names``, safely.

    Only calls of known names, numbers and lists are allowed; a bare known class is
    instantiated with no arguments (``Default`` means ``DefaultTrigger()``).
    """
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as error:
        msg = f"cannot parse {text!r}: {error.msg}"
        raise ValueError(msg) from None
    return _evaluate(tree.body, names, text)


def _evaluate(node: ast.AST, names: Mapping[str, Any], text: str) -> Any:
    if isinstance(node, ast.Name):
        if node.id not in names:
            msg = f"unknown name {node.id!r} in {text!r}; known: {', '.join(sorted(names))}"
            raise ValueError(msg)
        value = names[node.id]
        return value() if isinstance(value, type) else value
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in names:
            msg = f"unknown function {ast.unparse(node.func)!r} in {text!r}"
            raise ValueError(msg)
        args = [_evaluate(arg, names, text) for arg in node.args]
        kwargs = {kw.arg: _evaluate(kw.value, names, text) for kw in node.keywords if kw.arg}
        return names[node.func.id](*args, **kwargs)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, names, text)
    if isinstance(node, ast.List):
        return [_evaluate(item, names, text) for item in node.elts]
    msg = f"unsupported expression {ast.unparse(node)!r} in {text!r}"
    raise ValueError(msg)


@attrs.frozen
class StateExpectation:
    """What a ``state`` step asserts about the executor's state (windows in seconds)."""

    present: tuple[tuple[int, int], ...] = ()
    absent: tuple[tuple[int, int], ...] = ()
    tombstone: tuple[tuple[int, int], ...] = ()
    late_dropped: int | None = None
    closed_dropped: int | None = None
    merged_into_closed_dropped: int | None = None
    expired_state_dropped: int | None = None
    has_earliest_hold: bool = False  # whether earliest_hold was given (None is a value)
    earliest_hold: int | None = None


@attrs.frozen
class Step:
    """One transcript action. Times are microseconds; ``input`` holds (value, timestamp)."""

    action: str
    params: Any
    raw: Any = attrs.field(eq=False)


@attrs.frozen
class Transcript:
    """One parsed case of a transcript file."""

    name: str
    window_fn: WindowFn
    trigger_fn: TriggerFn
    accumulation_mode: AccumulationMode
    timestamp_combiner: TimestampCombiner
    allowed_lateness: Duration
    overlapping_window_rule: bool
    steps: tuple[Step, ...]
    error: str | None = None
    broken_on: tuple[str, ...] = ()
    ignored_keys: tuple[str, ...] = ()  # unknown top-level keys (Beam ignores them too)

    def windowing(self) -> Windowing:
        return Windowing(
            self.window_fn,
            self.trigger_fn,
            self.accumulation_mode,
            self.timestamp_combiner,
            self.allowed_lateness,
        )

    def inputs(self) -> list[tuple[Any, int]]:
        return [element for step in self.steps if step.action == "input" for element in step.params]


def _windows(value: Any, where: str) -> tuple[tuple[int, int], ...]:
    windows = []
    for window in value or ():
        if not (isinstance(window, list) and len(window) == 2):
            msg = f"{where}: a window is [start, max_timestamp], got {window!r}"
            raise ValueError(msg)
        windows.append((int(window[0]), int(window[1])))
    return tuple(windows)


def _parse_step(line: Any, where: str) -> Step:
    if not (isinstance(line, dict) and len(line) == 1):
        msg = f"{where}: each transcript line is one 'action: params' pair, got {line!r}"
        raise ValueError(msg)
    ((action, params),) = line.items()
    if action == "input":
        elements = tuple((value, to_micros(value)) for value in params or ())
        return Step("input", elements, line)
    if action in ("watermark", "clock"):
        return Step(action, to_micros(params), line)
    if action == "expect":
        panes = tuple(params or ())
        for pane in panes:
            unknown = set(pane) - PANE_KEYS
            if unknown:
                msg = f"{where}: unknown pane attributes {sorted(unknown)} in {pane!r}"
                raise ValueError(msg)
        return Step("expect", panes, line)
    if action == "state":
        params = params or {}
        unknown = set(params) - _STATE_KEYS
        if unknown:
            msg = f"{where}: unknown state keys {sorted(unknown)}"
            raise ValueError(msg)
        return Step(
            "state",
            StateExpectation(
                present=_windows(params.get("present"), where),
                absent=_windows(params.get("absent"), where),
                tombstone=_windows(params.get("tombstone"), where),
                **{counter: params.get(counter) for counter in DROP_KEYS},
                has_earliest_hold="earliest_hold" in params,
                earliest_hold=params.get("earliest_hold"),
            ),
            line,
        )
    msg = f"{where}: unknown action {action!r} (input, watermark, clock, expect, state)"
    raise ValueError(msg)


def _parse_case(spec: dict, source: str) -> Transcript:
    name = str(spec.get("name", "unnamed"))
    where = f"{source}: {name}"
    accumulation = str(spec.get("accumulation_mode", "accumulating")).upper()
    combiner = str(spec.get("timestamp_combiner", "OUTPUT_AT_EOW")).upper()
    try:
        accumulation_mode = AccumulationMode[accumulation]
        timestamp_combiner = TimestampCombiner[combiner]
    except KeyError as error:
        msg = f"{where}: unknown mode {error}"
        raise ValueError(msg) from None
    return Transcript(
        name=name,
        window_fn=parse_spec(spec.get("window_fn", "GlobalWindows"), _WINDOW_FN_NAMES),
        trigger_fn=parse_spec(spec.get("trigger_fn", "Default"), _TRIGGER_NAMES),
        accumulation_mode=accumulation_mode,
        timestamp_combiner=timestamp_combiner,
        allowed_lateness=Duration.of(spec.get("allowed_lateness", 0)),
        overlapping_window_rule=bool(spec.get("overlapping_window_rule", True)),
        steps=tuple(_parse_step(line, where) for line in spec.get("transcript") or ()),
        error=spec.get("error"),
        broken_on=tuple(spec.get("broken_on") or ()),
        ignored_keys=tuple(sorted(set(spec) - _CASE_KEYS)),
    )


def load_transcripts(path: str | Path) -> list[Transcript]:
    """Every case of a transcript file, with unique names (``name``, ``name_1``, ...)."""
    path = Path(path)
    cases: list[Transcript] = []
    seen: set[str] = set()
    with path.open() as stream:
        for spec in yaml.safe_load_all(stream):
            if not spec:
                continue
            case = _parse_case(spec, path.name)
            name, counter = case.name, 0
            while name in seen:
                counter += 1
                name = f"{case.name}_{counter}"
            seen.add(name)
            cases.append(attrs.evolve(case, name=name))
    return cases


# ---------------------------------------------------------------------------- matching


def whole_seconds(micros: int) -> int:
    """Integral seconds of a time, floored as Beam's ``int(Timestamp)`` floors."""
    return micros // 1_000_000


def pane_info_dict(pane: WindowedValue) -> dict[str, Any]:
    """The attributes a transcript matches, for a pane ``WindowedValue((key, values), ...)``."""
    (window,) = pane.windows
    _key, values = pane.value
    timing = pane.pane_info.timing
    return {
        "window": [whole_seconds(window.start.micros), whole_seconds(window.max_timestamp().micros)],
        "values": sorted(values),
        "timestamp": whole_seconds(pane.timestamp_micros),
        "index": pane.pane_info.index,
        "nonspeculative_index": pane.pane_info.nonspeculative_index,
        "early": timing == PaneInfoTiming.EARLY,
        "late": timing == PaneInfoTiming.LATE,
        "final": pane.pane_info.is_last,
    }


def _agrees(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    return all(actual[key] == expected[key] for key in actual if key in expected)


def check_step(actual_infos: Sequence[Mapping[str, Any]], expected: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Match each expected pane to an actual one (first that agrees), Beam's way.

    Raises ``TranscriptMismatch`` ("Unmatched output") for an expected pane with no match;
    returns the actual panes left unmatched, which the caller must treat as unexpected
    unless a following ``expect`` step claims them.
    """
    remaining = list(actual_infos)
    for pane in expected:
        for candidate in remaining:
            if _agrees(candidate, pane):
                remaining.remove(candidate)
                break
        else:
            msg = f"Unmatched output {pane} in {remaining}"
            raise TranscriptMismatch(msg)
    return remaining


def check_final_panes(actual_infos: Sequence[Mapping[str, Any]], expected: Sequence[Mapping[str, Any]]) -> None:
    """Beam's batch check: as many panes as expected, each agreeing with some expected pane."""
    if len(actual_infos) > len(expected):
        msg = f"Unexpected output: expected {list(expected)} but got {list(actual_infos)}"
        raise TranscriptMismatch(msg)
    if len(actual_infos) < len(expected):
        msg = f"Unmatched output: expected {list(expected)} but got {list(actual_infos)}"
        raise TranscriptMismatch(msg)
    for actual in actual_infos:
        if not any(all(actual[k] == pane[k] for k in pane if k in actual) for pane in expected):
            msg = f"Unmatched output: {actual} not found in {list(expected)}"
            raise TranscriptMismatch(msg)


# ---------------------------------------------------------------------------- driving


class TranscriptDriver(Protocol):
    """An executor under test. Each call returns the panes emitted in response, as
    ``WindowedValue((key, values), timestamp_micros, (window,), pane_info)``."""

    def add_input(self, elements: Sequence[tuple[Any, int]]) -> list[WindowedValue]:
        """Elements (value, timestamp in µs) arrive, then timers due are fired."""
        ...

    def advance_watermark(self, micros: int) -> list[WindowedValue]: ...

    def advance_clock(self, micros: int) -> list[WindowedValue]:
        """Processing time advances by ``micros``."""
        ...

    def check_state(self, expectation: StateExpectation) -> None:
        """Raise ``TranscriptMismatch`` unless the executor's state meets ``expectation``."""
        ...


def run_transcript(transcript: Transcript, driver: TranscriptDriver, *, check_state: bool = True) -> None:
    """Play ``transcript`` against ``driver``; raise ``TranscriptMismatch`` on a difference.

    ``check_state=False`` skips ``state`` steps, as Beam's own harness does.
    """
    output: list[Mapping[str, Any]] = []
    for step in transcript.steps:
        if step.action != "expect" and output:
            msg = f"Unexpected output: {output} before {step.raw}"
            raise TranscriptMismatch(msg)
        if step.action == "input":
            output = [pane_info_dict(p) for p in driver.add_input(step.params)]
        elif step.action == "watermark":
            output = [pane_info_dict(p) for p in driver.advance_watermark(step.params)]
        elif step.action == "clock":
            output = [pane_info_dict(p) for p in driver.advance_clock(step.params)]
        elif step.action == "expect":
            output = check_step(output, step.params)
        elif step.action == "state":
            if check_state:
                driver.check_state(step.params)
        else:  # pragma: no cover - the parser rejects other actions
            msg = f"unknown action {step.action!r}"
            raise ValueError(msg)
    if output:
        msg = f"Unexpected output: {output} at the end of the transcript"
        raise TranscriptMismatch(msg)


def run_case(case: Transcript, play: Callable[[Transcript], None]) -> None:
    """Run ``play(case)``; for a case with ``error:``, require a failure matching it."""
    if case.error is None:
        play(case)
        return
    try:
        play(case)
    except Exception as error:  # any failure counts, as in Beam's harness
        if not re.search(case.error, str(error)):
            msg = f"case {case.name!r} failed with {error!r}, which does not match {case.error!r}"
            raise AssertionError(msg) from error
        return
    msg = f"case {case.name!r} should fail with {case.error!r} but passed"
    raise AssertionError(msg)


# ---------------------------------------------------------------------------- bundling

BUNDLINGS = (
    "original",
    "reversed",
    "reshuffled",
    "one-element-bundles",
    "one-element-bundles-reversed",
    "two-element-bundles",
)


def bundle_variants(case: Transcript) -> list[tuple[str, int]]:
    """The bundlings to replay ``case`` with, each with its seed (Beam's rule: only
    DefaultTrigger with ACCUMULATING is order-agnostic; others run as written)."""
    seed = zlib.crc32(case.name.encode())
    order_agnostic = isinstance(case.trigger_fn, DefaultTrigger) and (
        case.accumulation_mode is AccumulationMode.ACCUMULATING
    )
    if not order_agnostic:
        return [("original", seed)]
    return [(bundling, seed) for bundling in BUNDLINGS]


def split_bundles(elements: Sequence[Any], bundling: str, seed: int) -> list[list[Any]]:
    """``elements`` of one input step, cut and ordered into bundles as ``bundling`` says."""
    elements = list(elements)
    if bundling == "original":
        return [elements]
    if bundling == "reversed":
        return [elements[::-1]]
    if bundling == "reshuffled":
        random.Random(seed).shuffle(elements)
        return [elements]
    if bundling == "one-element-bundles":
        return [[element] for element in elements]
    if bundling == "one-element-bundles-reversed":
        return [[element] for element in reversed(elements)]
    if bundling == "two-element-bundles":
        return [elements[ix : ix + 2] for ix in range(0, len(elements), 2)]
    msg = f"unknown bundling {bundling!r}; one of {BUNDLINGS}"
    raise ValueError(msg)


# ---------------------------------------------------------------------------- batch


def batch_final_panes(case: Transcript) -> list[dict[str, Any]] | str:
    """What Beam's BatchTranscriptTest expects of ``case`` run in batch: the last expected
    pane of each surviving window (window, values, timestamp), or the reason the case does
    not apply to batch.

    Only the reasons that follow from the expectations themselves skip a case (discarding
    panes and late data have no batch equivalent). Beam's harness also skips
    OUTPUT_AT_EARLIEST_TRANSFORMED, which its batch runner lacks and sparkbeam's has.
    Cases with processing time run too, as in Beam's harness: in batch the clock reaches
    the end of time with the watermark.
    """
    if case.accumulation_mode is not AccumulationMode.ACCUMULATING:
        return "Batch mode only makes sense for accumulating."
    watermark = None
    for step in case.steps:
        if step.action == "watermark":
            watermark = step.params
        elif (
            step.action == "input"
            and watermark is not None
            and any(ts <= watermark for _value, ts in step.params)
        ):
            return "Batch mode never has late data."
    final_by_window: dict[tuple[int, int], dict[str, Any]] = {}
    for step in case.steps:
        if step.action == "expect":
            for pane in step.params:
                trimmed = {k: pane[k] for k in ("window", "values", "timestamp") if k in pane}
                final_by_window[tuple(pane["window"])] = trimmed
    finals = list(final_by_window.values())
    if case.window_fn.is_merging():
        merged_away: set[IntervalWindow] = set()

        class _Collect(WindowFn.MergeContext):
            def merge(self, to_be_merged, merge_result):
                merged_away.update(w for w in to_be_merged if w != merge_result)

        case.window_fn.merge(_Collect([IntervalWindow(*pane["window"]) for pane in finals]))
        finals = [pane for pane in finals if IntervalWindow(*pane["window"]) not in merged_away]
    return finals
