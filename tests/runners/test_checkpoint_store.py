"""Which checkpoint a restart resumes from, when manifests or journal entries cannot be used.

A manifest that cannot be read is read again a few times (a file system's passing error);
a newer one that stays unusable is skipped, named in the log, for an older complete one;
with none usable while the journal says steps ran from a checkpoint, the run stops naming
them, never starting again from empty state (which would feed old batches twice).
"""

from __future__ import annotations

import json
import logging

import pytest

from sparkbeam.io import commits
from sparkbeam.runners.spark.checkpoints import CheckpointError, CheckpointStore

NO_PAUSES: tuple[float, ...] = ()


def make_store(tmp_path, manifests: list[int], journal: list[int]) -> CheckpointStore:
    store = CheckpointStore(str(tmp_path), [])
    for step in manifests:
        directory = tmp_path / "checkpoints" / f"{step:010d}"
        directory.mkdir(parents=True)
        (directory / "loop.sealed").write_bytes(b"sealed")
        (tmp_path / "checkpoints" / f"{step:010d}.json").write_text(json.dumps({"step": step, "files": ["loop.sealed"]}))
    (tmp_path / "journal").mkdir(exist_ok=True)
    for step in journal:
        (tmp_path / "journal" / f"{step:010d}.json").write_text(json.dumps({"step": step, "now": 0, "sources": {}}))
    return store


def test_the_newest_complete_checkpoint_and_the_journal_after_it(tmp_path):
    store = make_store(tmp_path, [3, 6], [3, 4, 5, 6, 7])
    assert store.restore_point(NO_PAUSES)["step"] == 6
    assert sorted(store.journal_from(6)) == [6, 7]


def test_a_first_run_cut_short_before_its_first_checkpoint_replays_its_journal(tmp_path):
    store = make_store(tmp_path, [], [0, 1])
    assert store.restore_point(NO_PAUSES) is None
    assert sorted(store.journal_from(0)) == [0, 1]


def test_a_manifest_unreadable_for_a_moment_is_read_again(tmp_path, monkeypatch, caplog):
    store = make_store(tmp_path, [3], [3, 4])
    real_read, failures = commits.read_bytes, []

    def read_bytes(path):
        if path.endswith("0000000003.json") and len(failures) < 2:
            failures.append(path)
            raise OSError("connection reset")
        return real_read(path)

    monkeypatch.setattr(commits, "read_bytes", read_bytes)
    with caplog.at_level(logging.WARNING):
        assert store.restore_point((0.01, 0.01, 0.01))["step"] == 3
    assert len(failures) == 2 and "skipped" not in caplog.text


@pytest.mark.parametrize("damage", ["not json", "files missing", "unreadable"])
def test_with_no_usable_manifest_while_the_journal_goes_on_the_run_stops_naming_them(tmp_path, monkeypatch, damage):
    store = make_store(tmp_path, [3, 6], [3, 4, 5, 6, 7])
    for step in (3, 6):
        manifest = tmp_path / "checkpoints" / f"{step:010d}.json"
        if damage == "not json":
            manifest.write_text('{"step": ')
        elif damage == "files missing":
            (tmp_path / "checkpoints" / f"{step:010d}" / "loop.sealed").unlink()
    if damage == "unreadable":
        real_read = commits.read_bytes

        def read_bytes(path):
            if "/checkpoints/" in path:
                raise OSError("input/output error")
            return real_read(path)

        monkeypatch.setattr(commits, "read_bytes", read_bytes)
    reason = {"not json": "is not valid JSON", "files missing": r"its files loop.sealed are missing", "unreadable": "input/output error"}[damage]
    with pytest.raises(CheckpointError, match=rf"no checkpoint can be read, so the run stops rather than start again from empty state: .*0000000006.json.*{reason}.*0000000003.json"):
        store.restore_point((0.01,))


def test_a_damaged_newer_checkpoint_is_skipped_for_an_older_one_and_named(tmp_path, caplog):
    store = make_store(tmp_path, [3, 6], [3, 4, 5, 6, 7])
    (tmp_path / "checkpoints" / "0000000006.json").write_text("[]")
    with caplog.at_level(logging.WARNING):
        assert store.restore_point((0.01,))["step"] == 3
    assert "0000000006.json" in caplog.text and "resuming from the one of step 3" in caplog.text


def test_a_journal_without_its_checkpoint_or_with_a_gap_stops_the_run(tmp_path):
    store = make_store(tmp_path, [], [6, 7])
    with pytest.raises(CheckpointError, match="its journal starts at step 6 but no checkpoint resumes there"):
        store.restore_point(NO_PAUSES)
    gap = make_store(tmp_path / "gap", [3], [3, 5])
    with pytest.raises(CheckpointError, match=r"the journal has no entry for step 4 but one for step 5.*Restore .*0000000004.json"):
        gap.journal_from(3)


def test_a_directory_of_the_previous_format_is_claimed_and_marked_with_the_new_one(tmp_path):
    from sparkbeam.runners.spark.checkpoints import FORMAT, IDENTITY

    identity = {"format": "sparkbeam-checkpoint/4", "shape": [], "id": "abc", "created": 0}
    (tmp_path / IDENTITY).write_text(json.dumps(identity))
    store = CheckpointStore(str(tmp_path), [])
    store.claim()
    # Its chunks of state are read as they are; the version that wrote it refuses it from now on.
    assert json.loads((tmp_path / IDENTITY).read_text()) == {**identity, "format": FORMAT}
    assert store.checkpoint_id == "abc"
    (tmp_path / IDENTITY).write_text(json.dumps({**identity, "format": "sparkbeam-checkpoint/99"}))
    with pytest.raises(CheckpointError, match="incompatible version"):
        CheckpointStore(str(tmp_path), []).claim()
