"""Beam's own trigger transcripts, run through the core GroupingEngine alone.

Every case of ``apache_beam/testing/data/trigger_transcripts.yaml`` (read from the
installed package) runs as GroupByKey (lists) and as CombinePerKey (a concatenating
CombineFn), in each bundling Beam's harness would replay it with, and in batch following
Beam's BatchTranscriptTest rules. Beam's ``state`` steps are ignored, as Beam's harness
ignores them (see ``test_beam_garbage_collection_state_needs_a_watermark``).
"""

from __future__ import annotations

import os

import pytest

from .engine_driver import ConcatCombineFn, EngineDriver, run_batch
from .transcripts import (
    StateExpectation,
    Transcript,
    batch_final_panes,
    bundle_variants,
    load_transcripts,
    run_case,
    run_transcript,
)

apache_beam = pytest.importorskip("apache_beam", reason="Beam's transcripts ship with apache-beam")

BEAM_TRANSCRIPTS = os.path.join(
    os.path.dirname(apache_beam.__file__), "testing", "data", "trigger_transcripts.yaml"
)
BEAM_CASES = load_transcripts(BEAM_TRANSCRIPTS)
_BY_NAME = {case.name: case for case in BEAM_CASES}


def _streaming_params(cases: list[Transcript]):
    for case in cases:
        for bundling, seed in bundle_variants(case):
            suffix = f"{bundling}({seed})" if bundling == "reshuffled" else bundling
            for aggregation in ("group", "combine"):
                yield pytest.param(case, bundling, seed, aggregation, id=f"{case.name}-{suffix}-{aggregation}")


def _batch_params(cases: list[Transcript]):
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


def test_beam_file_has_the_cases_we_expect():
    assert len(BEAM_CASES) >= 18
    assert {case.name for case in BEAM_CASES if case.error} >= {
        "bad_output",
        "bad_expected_values",
        "bad_expected_window",
        "missing_output",
        "missing_output_at_end",
    }


@pytest.mark.parametrize(("case", "bundling", "seed", "aggregation"), list(_streaming_params(BEAM_CASES)))
def test_beam_transcript_streaming(case, bundling, seed, aggregation):
    play_streaming(case, bundling, seed, aggregation, check_state=False)


@pytest.mark.parametrize(("case", "finals", "aggregation"), list(_batch_params(BEAM_CASES)))
def test_beam_transcript_batch(case, finals, aggregation):
    play_batch(case, finals, aggregation)


def test_beam_garbage_collection_state_needs_a_watermark():
    """Beam's ``garbage_collection`` case asserts [0, 9] absent and [10, 19] a tombstone
    with no watermark step: both windows finished their AfterCount(2) trigger, so with no
    watermark both are tombstones. Once the watermark passes [0, 9]'s GC time (19 s) and
    not [10, 19]'s (29 s), the expected state holds."""
    case = _BY_NAME["garbage_collection"]
    expectation = next(step.params for step in case.steps if step.action == "state")
    driver = EngineDriver(case)
    for step in case.steps:
        if step.action == "input":
            driver.add_input(step.params)
    with pytest.raises(AssertionError, match=r"\[0, 9\] should hold no state"):
        driver.check_state(expectation)
    driver.advance_watermark(20_000_000)
    driver.check_state(expectation)
    driver.check_state(StateExpectation(late_dropped=0, closed_dropped=0))
