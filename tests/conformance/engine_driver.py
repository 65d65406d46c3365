"""Transcript drivers for the core ``GroupingEngine`` alone (one key, no Spark), and the
pytest parameters of the engine's transcript tests. Nothing here needs apache_beam."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sparkbeam.combine import CombineFn
from sparkbeam.runners.core.grouping.grouping import GroupingStats, build_grouping_engine
from sparkbeam.runners.core.loop.clock import ManualClock
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import WindowFn

from .transcripts import (
    DROP_KEYS,
    StateExpectation,
    Transcript,
    TranscriptMismatch,
    batch_final_panes,
    bundle_variants,
    check_final_panes,
    pane_info_dict,
    run_case,
    run_transcript,
    split_bundles,
    whole_seconds,
)

KEY = "key"


class ConcatCombineFn(CombineFn):
    """Concatenates values, so CombinePerKey panes compare with GroupByKey panes (Beam's
    transcript test runs both)."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, element):
        accumulator.append(element)
        return accumulator

    def merge_accumulators(self, accumulators):
        return [value for accumulator in accumulators for value in accumulator]

    def extract_output(self, accumulator):
        return accumulator


def assign(window_fn: WindowFn, value: Any, timestamp: int) -> WindowedValue:
    context = WindowFn.AssignContext(Timestamp.from_micros(timestamp), value)
    return WindowedValue(value, timestamp, tuple(window_fn.assign(context)))


class EngineDriver:
    """Plays a transcript through one key's ``GroupingEngine`` state, as Beam's
    ``TriggerDriverTranscriptTest`` plays it through ``GeneralTriggerDriver``: the
    element's output watermark is the input watermark, and timers fire after each input."""

    def __init__(
        self,
        case: Transcript,
        *,
        combine_fn: CombineFn | None = None,
        bundling: str = "original",
        seed: int = 0,
    ) -> None:
        self.case = case
        self.engine = build_grouping_engine(
            case.windowing(),
            combine_fn=combine_fn,
            overlapping_window_rule=case.overlapping_window_rule,
        )
        self.state = self.engine.new_key_state()
        self.stats = GroupingStats()
        self.clock = ManualClock(0)
        self.watermark = MIN_TIMESTAMP.micros
        self.bundling = bundling
        self.seed = seed

    def _fire(self) -> list[WindowedValue]:
        return self.engine.fire_timers(
            self.state, KEY, input_watermark=self.watermark, now=self.clock.now_micros(), stats=self.stats
        )

    def add_input(self, elements: Sequence[tuple[Any, int]]) -> list[WindowedValue]:
        window_fn = self.case.window_fn
        panes: list[WindowedValue] = []
        for bundle in split_bundles(elements, self.bundling, self.seed):
            values = [assign(window_fn, value, timestamp) for value, timestamp in bundle]
            panes += self.engine.add_elements(
                self.state,
                KEY,
                values,
                input_watermark=self.watermark,
                output_watermark=self.watermark,
                now=self.clock.now_micros(),
                stats=self.stats,
            )
            panes += self._fire()
        return panes

    def advance_watermark(self, micros: int) -> list[WindowedValue]:
        self.watermark = micros
        return self._fire()

    def advance_clock(self, micros: int) -> list[WindowedValue]:
        self.clock.advance(micros)
        return self._fire()

    def check_state(self, expectation: StateExpectation) -> None:
        by_window = {
            (whole_seconds(window.start.micros), whole_seconds(window.max_timestamp().micros)): window_state
            for window, window_state in self.state.windows.items()
        }
        problems = []
        for window in expectation.present:
            window_state = by_window.get(window)
            if window_state is None or window_state.closed:
                problems.append(f"{list(window)} should hold open state")
        for window in expectation.absent:
            if window in by_window:
                problems.append(f"{list(window)} should hold no state")
        for window in expectation.tombstone:
            window_state = by_window.get(window)
            if window_state is None or not window_state.closed:
                problems.append(f"{list(window)} should be closed")
        for counter in DROP_KEYS:
            wanted = getattr(expectation, counter)
            if wanted is not None and getattr(self.stats, counter) != wanted:
                problems.append(f"{counter} is {getattr(self.stats, counter)}, not {wanted}")
        if expectation.has_earliest_hold:
            hold = self.engine.earliest_hold(self.state)
            actual = None if hold is None else whole_seconds(hold[0])
            if actual != expectation.earliest_hold:
                problems.append(f"earliest hold is {actual}, not {expectation.earliest_hold}")
        if problems:
            msg = f"State mismatch: {'; '.join(problems)} (state: {self.state.windows})"
            raise TranscriptMismatch(msg)


def run_batch(case: Transcript, final_panes: list[dict], *, combine_fn: CombineFn | None = None) -> None:
    """Beam's BatchTranscriptTest through the engine in batch mode: every input at the
    minimum watermark, then timers at the maximum watermark and clock."""
    engine = build_grouping_engine(
        case.windowing(),
        combine_fn=combine_fn,
        overlapping_window_rule=case.overlapping_window_rule,
        batch=True,
    )
    state, stats = engine.new_key_state(), GroupingStats()
    elements = [assign(case.window_fn, value, timestamp) for value, timestamp in case.inputs()]
    panes = engine.add_elements(
        state,
        KEY,
        elements,
        input_watermark=MIN_TIMESTAMP.micros,
        output_watermark=MIN_TIMESTAMP.micros,
        now=MIN_TIMESTAMP.micros,
        stats=stats,
    )
    panes += engine.fire_timers(
        state, KEY, input_watermark=MAX_TIMESTAMP.micros, now=MAX_TIMESTAMP.micros, stats=stats
    )
    if not engine.is_empty(state):
        msg = f"batch grouping left state behind: {state.windows}"
        raise TranscriptMismatch(msg)
    check_final_panes([pane_info_dict(pane) for pane in panes], final_panes)


# ---------------------------------------------------------------------------- pytest parameters


def streaming_params(cases: list[Transcript]):
    """pytest params: each case in each bundling Beam's harness replays it with, grouped and combined."""
    for case in cases:
        for bundling, seed in bundle_variants(case):
            suffix = f"{bundling}({seed})" if bundling == "reshuffled" else bundling
            for aggregation in ("group", "combine"):
                yield pytest.param(case, bundling, seed, aggregation, id=f"{case.name}-{suffix}-{aggregation}")


def batch_params(cases: list[Transcript]):
    """pytest params: each case in batch (skipped where Beam's BatchTranscriptTest skips it)."""
    for case in cases:
        finals = batch_final_panes(case)
        for aggregation in ("group", "combine"):
            marks = [pytest.mark.skip(reason=finals)] if isinstance(finals, str) else []
            yield pytest.param(case, finals, aggregation, id=f"{case.name}-{aggregation}", marks=marks)


def play_streaming(case: Transcript, bundling: str, seed: int, aggregation: str, *, check_state: bool) -> None:
    combine_fn = ConcatCombineFn() if aggregation == "combine" else None

    def play(case: Transcript) -> None:
        driver = EngineDriver(case, combine_fn=combine_fn, bundling=bundling, seed=seed)
        run_transcript(case, driver, check_state=check_state)

    run_case(case, play)


def play_batch(case: Transcript, finals: list[dict], aggregation: str) -> None:
    combine_fn = ConcatCombineFn() if aggregation == "combine" else None
    run_case(case, lambda case: run_batch(case, finals, combine_fn=combine_fn))
