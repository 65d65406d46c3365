"""sparkbeam's own transcripts (data/sparkbeam_transcripts.yaml) through the Spark runner,
streaming and batch, as ``test_transcripts_spark.py`` runs Beam's. They test our engine on
Spark and need no apache_beam (``test_our_transcripts_need_no_apache_beam`` proves it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .spark_driver import play_batch, play_streaming, spark_batch_params, spark_streaming_params
from .transcripts import bundle_variants, load_transcripts, run_case

pytestmark = pytest.mark.spark

CASES = load_transcripts(Path(__file__).parent / "data" / "sparkbeam_transcripts.yaml")


@pytest.mark.parametrize("case", spark_streaming_params(CASES))
def test_sparkbeam_transcript_streaming_on_spark(spark_session_kind, case):
    run_case(case, lambda case: play_streaming(case, bundle_variants(case), spark_session_kind))


@pytest.mark.parametrize(("case", "finals"), spark_batch_params(CASES))
def test_sparkbeam_transcript_batch_on_spark(spark, case, finals):
    run_case(case, lambda case: play_batch(case, finals))
