"""Beam's own trigger transcripts, run through the core GroupingEngine alone.

Every case of ``apache_beam/testing/data/trigger_transcripts.yaml`` (read from the
installed package) runs as GroupByKey (lists) and as CombinePerKey (a concatenating
CombineFn), in each bundling Beam's harness would replay it with, and in batch following
Beam's BatchTranscriptTest rules. Beam's ``state`` steps are ignored, as Beam's harness
ignores them (see ``test_beam_garbage_collection_state_needs_a_watermark``).
"""

from __future__ import annotations

import os

import apache_beam
import pytest

from .engine_driver import EngineDriver, batch_params, play_batch, play_streaming, streaming_params
from .transcripts import StateExpectation, load_transcripts

BEAM_TRANSCRIPTS = os.path.join(
    os.path.dirname(apache_beam.__file__), "testing", "data", "trigger_transcripts.yaml"
)
BEAM_CASES = load_transcripts(BEAM_TRANSCRIPTS)
_BY_NAME = {case.name: case for case in BEAM_CASES}


def test_beam_file_has_the_cases_we_expect():
    assert len(BEAM_CASES) >= 18
    assert {case.name for case in BEAM_CASES if case.error} >= {
        "bad_output",
        "bad_expected_values",
        "bad_expected_window",
        "missing_output",
        "missing_output_at_end",
    }


@pytest.mark.parametrize(("case", "bundling", "seed", "aggregation"), list(streaming_params(BEAM_CASES)))
def test_beam_transcript_streaming(case, bundling, seed, aggregation):
    play_streaming(case, bundling, seed, aggregation, check_state=False)


@pytest.mark.parametrize(("case", "finals", "aggregation"), list(batch_params(BEAM_CASES)))
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
