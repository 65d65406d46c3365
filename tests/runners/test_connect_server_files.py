"""A stream's directories on a Spark Connect server of another machine, reached through it
(runners/spark/connect/server_files.py): the file operations as jobs on the tests' server.

The streams themselves run so in the full matrix (tests/full_matrix.py: the recovery job
stopped at --max_steps and resumed, killed with SIGKILL and resumed, and a watched folder
without --checkpoint_dir, each with every direct access of the client refused by
tests/runners/server_files_guard.py).
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from sparkbeam.io import commits


class _Recording:
    """A stand-in served file system: records what ``commits`` hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def exists(self, path: str) -> bool:
        self.calls.append(("exists", path))
        return True


def test_serve_routes_the_paths_under_its_directory_and_no_others(tmp_path):
    served = str(tmp_path / "ck")
    recording = _Recording()
    stop = commits.serve(served, recording)
    try:
        assert commits.local_path(served) is None and commits.local_path(served + "/journal/1.json") is None
        assert commits.exists(served + "/lease")
        assert commits.local_path(served + "-other/x") == served + "-other/x"  # a sibling of the same spelling's start
        assert not commits.exists(served + "-other/x")
    finally:
        stop()
    assert recording.calls == [("exists", served + "/lease")]
    assert commits.local_path(served) == served


@pytest.mark.spark
def test_the_file_operations_run_on_the_server_as_jobs_answering_data(connect_server, tmp_path):
    from sparkbeam.runners.spark.connect.server_files import (
        ServerFileSystem,
        server_sees_client_files,
    )
    from sparkbeam.runners.spark.connect.session import ConnectTarget, connect_session

    session = connect_session(ConnectTarget(connect_server.url, "--spark_remote"))
    assert server_sees_client_files(session)  # the tests' server is on this machine
    files = ServerFileSystem(session)
    root = str(tmp_path / "ck")
    entry, lease, staged = commits.join(root, "journal", "0000000000.json"), commits.join(root, "lease.json"), None
    stop = commits.serve(root, files)
    try:
        with commits.batched(root):  # what answers nothing goes in the job of what answers next
            commits.makedirs(commits.join(root, "journal"), private=True)
            commits.write_bytes(entry, b'{"step": 0}', private=True)  # written, synced and renamed there
            staged = commits.temporary_beside(commits.join(root, "checkpoints"))
            commits.makedirs(staged, private=True)
            commits.commit_directory(staged, commits.join(root, "checkpoints"))
            assert sorted(commits.list_names(root)) == ["checkpoints", "journal"]
        assert files.jobs == 1
        read, first, second, directory, there, size = files.run(
            ("read_bytes", entry), ("create_new", lease, b"first"), ("create_new", lease, b"second"),
            ("is_directory", commits.join(root, "checkpoints")), ("exists", staged), ("stat", entry),
        )
        assert json.loads(read["data"]) == {"step": 0}
        assert (first["flag"], second["flag"], directory["flag"], there["flag"]) == (True, False, True, False)
        assert size["numbers"][0] == len(b'{"step": 0}')
        with pytest.raises(FileNotFoundError, match=r"on the Spark Connect server"):
            commits.read_bytes(commits.join(root, "missing.json"))
        commits.remove(commits.join(root, "journal"))
        assert files.jobs == 4
    finally:
        stop()
    # What the server did, seen here directly (the tests' server shares this machine's files).
    assert sorted(os.listdir(root)) == ["checkpoints", "lease.json"]
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700 and stat.S_IMODE(os.stat(os.path.join(root, "checkpoints")).st_mode) == 0o700
    with open(os.path.join(root, "lease.json"), "rb") as handle:
        assert handle.read() == b"first"
