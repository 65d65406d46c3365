"""The one atomic-commit helper: write to a temporary beside, commit by rename, remove leftovers."""

from __future__ import annotations

import os

import pytest

from sparkbeam.io import commits
from tests.other_user import FIRST_UID, run_as, shared_temp_dir


def test_a_small_file_is_written_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "manifest.json"
    commits.write_bytes(str(path), b"one")
    commits.write_bytes(str(path), b"two")  # replaces
    assert path.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "manifest.json"
    commits.write_bytes(str(path), b"old")
    with pytest.raises(TypeError):
        commits.write_bytes(str(path), "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_a_directory_is_replaced_whole_and_a_crashed_replacement_is_cleaned_up(tmp_path):
    final = tmp_path / "scores-step-00000007"
    final.mkdir()
    (final / "old").write_text("old")
    (tmp_path / ".sparkbeam-replaced-scores-step-00000007").mkdir()  # as a crash between renames leaves it
    with commits.staging_directory(str(final)) as temp:
        assert commits.is_temporary(temp) and os.path.dirname(temp) == str(tmp_path)
        (tmp_path / temp / "new").write_text("new")
        commits.commit_directory(temp, str(final))
    assert sorted(os.listdir(tmp_path)) == ["scores-step-00000007"]
    assert os.listdir(final) == ["new"]
    commits.commit_directory(None, str(final))  # nothing in its place
    assert os.listdir(tmp_path) == []


def test_a_staging_directory_not_committed_is_removed(tmp_path):
    with pytest.raises(RuntimeError), commits.staging_directory(str(tmp_path / "deep" / "out")) as temp:
        (tmp_path / temp / "half").write_text("half")
        raise RuntimeError("the job failed")
    assert os.listdir(tmp_path / "deep") == []


def test_leftovers_are_recognised_by_name(tmp_path):
    assert commits.is_temporary(commits.temporary_beside(str(tmp_path / "0000000003.json")))
    assert not commits.is_temporary("0000000003.json")
    leftover = tmp_path / os.path.basename(commits.temporary_beside("x"))
    leftover.write_text("partial")
    commits.remove(str(leftover))
    commits.remove(str(leftover), missing_ok=True)  # already gone is fine where the caller says so
    assert os.listdir(tmp_path) == []


def test_a_missing_path_is_an_error_unless_the_caller_says_it_may_be_gone(tmp_path):
    with pytest.raises(FileNotFoundError):
        commits.remove(str(tmp_path / "never-written"))
    commits.remove(str(tmp_path / "never-written"), missing_ok=True)


def try_to_remove(paths: list[str]) -> list[str]:
    """What ``remove`` raised for each path, removed or not."""
    outcomes = []
    for path in paths:
        try:
            commits.remove(path, missing_ok=True)
        except OSError as error:
            outcomes.append(f"{type(error).__name__}: {error.filename}")
        else:
            outcomes.append("removed")
    return outcomes


def test_a_permission_error_while_removing_is_raised_not_swallowed(monkeypatch):
    """Leftovers in a folder the remover may not change: the error reaches the caller. As
    root (CI) the remover is another uid; otherwise this user, kept out by the mode."""
    with shared_temp_dir(monkeypatch) as shared:
        locked = os.path.join(shared, "locked")
        os.makedirs(os.path.join(locked, "tree", "inner"))
        for path in (os.path.join(locked, "file"), os.path.join(locked, "tree", "inner", "file")):
            with open(path, "w") as handle:
                handle.write("x")
        paths = [os.path.join(locked, "file"), os.path.join(locked, "tree")]
        try:
            os.chmod(locked, 0o555)
            os.chmod(os.path.join(locked, "tree", "inner"), 0o555)
            if os.geteuid() == 0:
                outcomes, _ = run_as(FIRST_UID, try_to_remove, paths)
            else:
                outcomes = try_to_remove(paths)
        finally:
            os.chmod(locked, 0o755)
            os.chmod(os.path.join(locked, "tree", "inner"), 0o755)
        assert outcomes == [
            f"PermissionError: {paths[0]}",
            f"PermissionError: {os.path.join(locked, 'tree', 'inner', 'file')}",
        ]
        assert os.path.exists(paths[0]) and os.path.exists(os.path.join(locked, "tree", "inner", "file"))


def test_a_rename_into_place_syncs_the_folder_after_it(tmp_path, monkeypatch):
    """Journal entries and manifests must survive a power loss: the rename's folder entry is
    synced after the rename (and the file's bytes before it)."""
    events = []
    replace, fsync = os.replace, os.fsync

    def recording_replace(source, destination):
        replace(source, destination)
        events.append(("rename into", os.path.dirname(destination)))

    def recording_fsync(descriptor):
        fsync(descriptor)
        target = os.readlink(f"/proc/self/fd/{descriptor}")
        events.append(("sync folder" if os.path.isdir(target) else "sync file", target))

    monkeypatch.setattr(os, "replace", recording_replace)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    journal = tmp_path / "journal"
    journal.mkdir()
    commits.write_bytes(str(journal / "0000000003.json"), b"{}")
    assert [kind for kind, _ in events] == ["sync file", "rename into", "sync folder"]
    assert events[1:] == [("rename into", str(journal)), ("sync folder", str(journal))]
