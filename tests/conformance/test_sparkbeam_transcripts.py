"""sparkbeam's own transcripts (data/sparkbeam_transcripts.yaml) through the core engine.

They cover what Beam's file lacks: the overlapping-window rule on and off, processing-time
triggers, AfterEach / AfterAll / OrFinally, Always, Never, late data across garbage
collection, and session merging with holds. ``state`` steps are checked. Cases marked
``error:`` are deliberately wrong and must fail.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .engine_driver import EngineDriver, batch_params, play_batch, play_streaming, streaming_params
from .transcripts import load_transcripts

OUR_CASES = load_transcripts(Path(__file__).parent / "data" / "sparkbeam_transcripts.yaml")


def test_our_file_covers_the_gaps_of_beams_file():
    names = {case.name for case in OUR_CASES}
    assert {"sliding_earliest_overlap_rule_on", "sliding_earliest_overlap_rule_off"} <= names
    assert any(step.action == "clock" for case in OUR_CASES for step in case.steps)
    assert sum(1 for case in OUR_CASES if case.error) >= 3
    # Hand-written expectations for the triggers Beam's direct runner cannot be the oracle of.
    assert {
        "repeated_count_discarding",
        "repeated_count_accumulating",
        "processing_time_first_firing_closes_the_window",
        "processing_time_early_and_late_around_the_watermark",
        "bad_repeated_count_accumulating_values",
        "bad_processing_time_fires_early",
    } <= names


@pytest.mark.parametrize(("case", "bundling", "seed", "aggregation"), list(streaming_params(OUR_CASES)))
def test_sparkbeam_transcript_streaming(case, bundling, seed, aggregation):
    play_streaming(case, bundling, seed, aggregation, check_state=True)


@pytest.mark.parametrize(("case", "finals", "aggregation"), list(batch_params(OUR_CASES)))
def test_sparkbeam_transcript_batch(case, finals, aggregation):
    play_batch(case, finals, aggregation)


def test_our_transcripts_need_no_apache_beam():
    # They test sparkbeam's engine: only the oracle comparisons need Beam. A fresh
    # interpreter in which importing apache_beam fails loads both of our transcript test
    # modules (engine and Spark) and plays every case through the engine.
    script = textwrap.dedent(
        """
        import sys

        class BlockBeam:
            def find_spec(self, name, path=None, target=None):
                if name == "apache_beam" or name.startswith("apache_beam."):
                    raise ImportError("imported " + name)
                return None

        sys.meta_path.insert(0, BlockBeam())
        from tests.conformance import test_sparkbeam_transcripts as engine_tests
        from tests.conformance import test_sparkbeam_transcripts_spark as spark_tests
        from tests.conformance.engine_driver import play_streaming
        from tests.conformance.transcripts import bundle_variants

        assert len(spark_tests.CASES) == len(engine_tests.OUR_CASES)
        for case in engine_tests.OUR_CASES:
            for bundling, seed in bundle_variants(case):
                play_streaming(case, bundling, seed, "group", check_state=True)
        assert "apache_beam" not in sys.modules
        print("ok", len(engine_tests.OUR_CASES))
        """
    )
    root = Path(__file__).resolve().parents[2]
    completed = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert completed.stdout.split() == ["ok", str(len(OUR_CASES))]


def test_a_state_step_is_ignored_when_state_checks_are_off():
    (case,) = [case for case in OUR_CASES if case.name == "bad_state_claim"]
    from .transcripts import run_transcript

    run_transcript(case, EngineDriver(case), check_state=False)


# ---------------------------------------------------------------------------- the harness itself


def test_specs_parse_with_bare_names_keywords_and_nesting():
    from sparkbeam.trigger import AfterCount, AfterWatermark, DefaultTrigger

    from .transcripts import _TRIGGER_NAMES, parse_spec

    assert parse_spec("Default", _TRIGGER_NAMES) == DefaultTrigger()
    assert parse_spec("AfterWatermark(early=AfterCount(2), late=Default)", _TRIGGER_NAMES) == (
        AfterWatermark(early=AfterCount(2), late=DefaultTrigger())
    )
    with pytest.raises(ValueError, match="unknown function 'AfterCont'"):
        parse_spec("AfterCont(2)", _TRIGGER_NAMES)
    with pytest.raises(ValueError, match="unknown function"):
        parse_spec("__import__('os').system('true')", _TRIGGER_NAMES)
    with pytest.raises(ValueError, match="unsupported expression"):
        parse_spec("AfterCount('2')", _TRIGGER_NAMES)


def test_a_misspelt_pane_attribute_is_a_parse_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: typo\ntranscript:\n  - expect:\n      - {timestmp: 9}\n")
    with pytest.raises(ValueError, match="unknown pane attributes"):
        load_transcripts(path)


def test_matching_is_partial_and_first_come():
    from .transcripts import TranscriptMismatch, check_step

    actual = [{"window": [0, 9], "index": 0}, {"window": [0, 9], "index": 1}]
    assert check_step(actual, [{"window": [0, 9]}]) == [{"window": [0, 9], "index": 1}]
    with pytest.raises(TranscriptMismatch, match="Unmatched output"):
        check_step(actual, [{"index": 2}])


def test_duplicate_case_names_get_a_counter(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("name: same\ntranscript: []\n---\nname: same\ntranscript: []\n")
    assert [case.name for case in load_transcripts(path)] == ["same", "same_1"]
