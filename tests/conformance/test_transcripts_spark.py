"""Beam's own trigger transcripts through the Spark runner, streaming and batch.

Streaming runs each case as a TestStream on Spark, with the order-agnostic cases fed in
every bundling of Beam's harness at once (one key per bundling); batch follows Beam's
BatchTranscriptTest rules. Negative cases must fail as they say. sparkbeam's own
transcripts run on Spark in ``test_sparkbeam_transcripts_spark.py``, without apache_beam.
"""

from __future__ import annotations

import os

import apache_beam
import pytest

from .spark_driver import play_batch, play_streaming, spark_batch_params, spark_streaming_params
from .transcripts import bundle_variants, load_transcripts, run_case

pytestmark = pytest.mark.spark

BEAM_FILE = os.path.join(os.path.dirname(apache_beam.__file__), "testing", "data", "trigger_transcripts.yaml")
CASES = load_transcripts(BEAM_FILE)


@pytest.mark.parametrize("case", spark_streaming_params(CASES))
def test_beam_transcript_streaming_on_spark(spark_session_kind, case):
    run_case(case, lambda case: play_streaming(case, bundle_variants(case), spark_session_kind))


@pytest.mark.parametrize(("case", "finals"), spark_batch_params(CASES))
def test_beam_transcript_batch_on_spark(spark, case, finals):
    run_case(case, lambda case: play_batch(case, finals))
