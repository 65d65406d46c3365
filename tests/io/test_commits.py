"""The one atomic-commit helper: write to a temporary beside, commit by rename, remove leftovers."""

from __future__ import annotations

import os

import pytest

from sparkbeam.io import commits


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
    commits.remove(str(leftover))  # already gone is fine
    assert os.listdir(tmp_path) == []
