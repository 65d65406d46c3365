"""A stream's step folders belong to its checkpoint: another run refuses to overwrite them.

A new run (a new ``--checkpoint_dir``, or none) on an output prefix where another run
committed step folders refuses before Spark starts, naming them and the options; with
``--overwrite_output`` it deletes them first. The run that wrote them resumes and rewrites
its own (the SIGKILL recovery tests, tests/runners/test_stream_recovery.py).
"""

from __future__ import annotations

import glob
import json
import os

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import lower
from sparkbeam.runners.core.plan.plan import plan_stages
from sparkbeam.runners.spark.output_owners import check_outputs, claim_outputs, owner_mark

pytestmark = pytest.mark.timeout(300)


def write_lines(path, lines: list[str]) -> None:
    temp = path.parent / f".{path.name}"
    temp.write_text("\n".join(lines) + "\n")
    os.replace(temp, path)


def copy_lines(input_dir: str, prefix: str, **settings):
    p = beam.Pipeline(options=PipelineOptions(step_interval=0.2, state_partitions=2, available_now=True, **settings))
    p | "Read" >> beam.io.ReadFromTextStream(input_dir) | "Write" >> beam.io.WriteToText(prefix)
    return p


def read_mark(prefix: str) -> dict:
    with open(owner_mark(prefix)) as handle:
        return json.load(handle)


def committed(prefix: str) -> list[str]:
    found = []
    for path in glob.glob(f"{prefix}-step-*/*"):
        with open(path) as handle:
            found += handle.read().splitlines()
    return sorted(found)


def folders(prefix: str) -> dict[str, int]:
    return {path: os.stat(path).st_mtime_ns for path in glob.glob(f"{prefix}-step-*/*")}


@pytest.mark.spark
def test_a_new_run_refuses_another_runs_step_folders_and_overwrites_them_only_when_told(spark, tmp_path):
    first_in, second_in = tmp_path / "first", tmp_path / "second"
    first_in.mkdir()
    second_in.mkdir()
    write_lines(first_in / "a.txt", ["a1", "a2"])
    write_lines(second_in / "b.txt", ["b1"])
    prefix = str(tmp_path / "out" / "lines")
    copy_lines(str(first_in), prefix, checkpoint_dir=str(tmp_path / "ck1")).run()
    assert committed(prefix) == ["a1", "a2"]
    written = folders(prefix)
    mark = read_mark(prefix)
    assert mark["checkpoint_dir"] == str(tmp_path / "ck1") and mark["prefix"] == prefix

    runs = [({"checkpoint_dir": str(tmp_path / "ck2")}, f"--checkpoint_dir={tmp_path / 'ck2'}"), ({}, "a new temporary checkpoint")]
    for settings, this_run in runs:
        with pytest.raises(TransformError, match=(
            rf"'Write' \(applied at .*\): {tmp_path / 'out'} already holds step folders lines-step-00000000 "
            rf"\(written by the stream of --checkpoint_dir={tmp_path / 'ck1'}\); this run \({this_run}\) counts its "
            r"steps from its own checkpoint and would overwrite or delete them. Write to a new output prefix, or pass "
            r"--overwrite_output to delete them first"
        )):
            copy_lines(str(second_in), prefix, **settings).run()
        assert folders(prefix) == written  # untouched
    assert not os.path.exists(tmp_path / "ck2")  # refused before anything was made

    copy_lines(str(second_in), prefix, checkpoint_dir=str(tmp_path / "ck2"), overwrite_output=True).run()
    assert committed(prefix) == ["b1"]  # the first run's folders deleted, not mixed in
    assert read_mark(prefix)["checkpoint_dir"] == str(tmp_path / "ck2")


def plan_writing(prefix: str):
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    p | "Read" >> beam.io.ReadFromTextStream("/nowhere") | "Write" >> beam.io.WriteToText(prefix)
    return plan_stages(lower(p))


def test_step_folders_without_a_mark_are_another_runs(tmp_path):
    prefix = str(tmp_path / "lines")
    plan = plan_writing(prefix)
    check_outputs(plan, None, None, overwrite=False)  # nothing there yet
    (tmp_path / "lines-step-00000003").mkdir()
    (tmp_path / "lines-other").mkdir()  # not a step folder of this prefix
    with pytest.raises(TransformError, match=r"lines-step-00000003 \(not written by this stream\)"):
        check_outputs(plan, "mine", str(tmp_path / "ck"), overwrite=False)
    check_outputs(plan, "mine", str(tmp_path / "ck"), overwrite=True)  # told to delete them


def test_a_prefix_is_this_checkpoints_by_its_identity_not_its_path(tmp_path):
    """A checkpoint directory removed and made anew under the same path is a new run."""
    prefix = str(tmp_path / "lines")
    plan = plan_writing(prefix)
    claim_outputs(plan, "old-id", str(tmp_path / "ck"), overwrite=False)
    (tmp_path / "lines-step-00000000").mkdir()
    check_outputs(plan, "old-id", str(tmp_path / "ck"), overwrite=False)  # its own: resumes
    with pytest.raises(TransformError, match=rf"written by the stream of --checkpoint_dir={tmp_path / 'ck'}"):
        check_outputs(plan, "new-id", str(tmp_path / "ck"), overwrite=False)
    # before Spark starts, a checkpoint on a cluster file system is known by its path alone
    check_outputs(plan, None, str(tmp_path / "ck"), overwrite=False, identity_pending=True)


def test_a_mark_without_step_folders_is_taken_over_and_overwrite_deletes_what_it_must(tmp_path):
    prefix = str(tmp_path / "lines")
    plan = plan_writing(prefix)
    claim_outputs(plan, "earlier", None, overwrite=False)
    claim_outputs(plan, "later", str(tmp_path / "ck"), overwrite=False)  # nothing of the earlier to lose
    assert read_mark(prefix)["checkpoint_id"] == "later"
    (tmp_path / "lines-step-00000001").mkdir()
    (tmp_path / ".sparkbeam-temp-lines-step-00000002-abc").mkdir()
    (tmp_path / "unrelated.txt").write_text("kept")
    with pytest.raises(TransformError, match="written by the stream of --checkpoint_dir="):
        claim_outputs(plan, "third", None, overwrite=False)
    claim_outputs(plan, "third", None, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == [".lines.sparkbeam-owner.json", "unrelated.txt"]
    assert read_mark(prefix) == {"checkpoint_id": "third", "checkpoint_dir": None, "prefix": prefix}
