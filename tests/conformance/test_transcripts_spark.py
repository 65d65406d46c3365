"""Every transcript (Beam's file and ours) through the Spark runner, streaming and batch.

Streaming runs each case as a TestStream on Spark, with the order-agnostic cases fed in
every bundling of Beam's harness at once (one key per bundling); batch follows Beam's
BatchTranscriptTest rules. Negative cases must fail as they say.
"""

from __future__ import annotations

import os

import pytest

from .spark_driver import play_batch, play_streaming
from .transcripts import batch_final_panes, bundle_variants, load_transcripts, run_case

apache_beam = pytest.importorskip("apache_beam", reason="Beam's transcripts ship with apache-beam")

pytestmark = pytest.mark.spark

BEAM_FILE = os.path.join(os.path.dirname(apache_beam.__file__), "testing", "data", "trigger_transcripts.yaml")
OUR_FILE = os.path.join(os.path.dirname(__file__), "data", "sparkbeam_transcripts.yaml")
CASES = [(f"beam:{case.name}", case) for case in load_transcripts(BEAM_FILE)] + [
    (f"ours:{case.name}", case) for case in load_transcripts(OUR_FILE)
]


def _streaming_marks(case):
    if case.error and "State" in case.error:
        return [pytest.mark.skip(reason="a state claim: window state is not observable through Spark's outputs")]
    return []


@pytest.mark.parametrize("case", [pytest.param(case, id=name, marks=_streaming_marks(case)) for name, case in CASES])
def test_transcript_streaming_on_spark(spark, case):
    variants = bundle_variants(case)
    run_case(case, lambda case: play_streaming(case, variants))


@pytest.mark.parametrize(
    ("case", "finals"),
    [
        pytest.param(
            case,
            finals,
            id=name,
            marks=[pytest.mark.skip(reason=finals)] if isinstance(finals, str) else [],
        )
        for name, case in CASES
        for finals in [batch_final_panes(case)]
    ],
)
def test_transcript_batch_on_spark(spark, case, finals):
    run_case(case, lambda case: play_batch(case, finals))
