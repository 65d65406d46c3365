"""What a stream reads back from its checkpoint directory cannot run code unless it is sealed
with the checkpoint key, which lives outside the directory.

One stream writes a checkpoint (module fixture); each test copies it, changes one file as
someone who can write the directory would, and resumes: the loop's state, a keyed-state
piece, a write-ahead-log batch that fail their seal are refused naming the file, and the
pickle planted in them never runs (it would create a file). The checkpoint key's own rules,
the modes of what a checkpoint holds, and JSON files that are not JSON are checked too.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import pickle
import shutil
import stat

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.spark import checkpoint_key
from sparkbeam.runners.spark.checkpoint_key import KeyFileError, load_key
from sparkbeam.runners.spark.checkpoints import (
    IDENTITY,
    LOOP_FILE,
    CheckpointError,
    CheckpointStore,
)
from sparkbeam.runners.spark.errors import SparkTaskError
from sparkbeam.runners.spark.sealing import Sealer, UnauthenticatedFileError

pytestmark = pytest.mark.timeout(300)


class Planted:
    """A pickle that, loaded, creates a file: proof that loading ran code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def write_lines(path: str, lines: list[str], mtime: int) -> None:
    temp = os.path.join(os.path.dirname(path), "." + os.path.basename(path))
    with open(temp, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.utime(temp, (mtime, mtime))
    os.replace(temp, path)


def build(p, directory: str):
    read = p | "Read" >> beam.io.ReadFromTextStream(
        directory, timestamp=lambda line: int(line.split(",")[1]), max_files_per_trigger=1
    )
    return beam.capture(read | "Key" >> beam.Map(lambda line: (line.split(",")[0], 1)) | "Count" >> beam.CombinePerKey(sum))


def run(directory: str, checkpoint: str, **settings):
    options = {"step_interval": 0.2, "state_partitions": 2, "available_now": True, **settings}
    p = beam.Pipeline(options=PipelineOptions(checkpoint_dir=checkpoint, **options))
    counts = build(p, directory)
    return p.run(), counts


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, spark):
    """A stream stopped after 2 of its 4 files, with a checkpoint at step 2 (keyed state
    held: the global window has not fired), and one stopped with only its journal."""
    base = tmp_path_factory.mktemp("stopped")
    directory = base / "in"
    directory.mkdir()
    for index in range(4):
        write_lines(str(directory / f"f{index}.txt"), [f"k{j},{index}" for j in range(3)], 1_700_000_000 + index)
    run(str(directory), str(base / "ck"), max_steps=2, checkpoint_interval=1)
    run(str(directory), str(base / "journal-only"), max_steps=2, checkpoint_interval=50)
    return base


def copy_of(stopped, tmp_path, name: str = "ck") -> str:
    checkpoint = str(tmp_path / name)
    shutil.copytree(str(stopped / name), checkpoint)
    return checkpoint


def store_of(checkpoint: str) -> CheckpointStore:
    return CheckpointStore.inspect(checkpoint, key=load_key()[0])


def without_checksum(path: str) -> None:
    """Drop Hadoop's checksum beside a part file, as whoever changes the file would."""
    os.remove(os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.crc"))


def forged_line(marker: str, scope: str, purpose: str) -> bytes:
    """A piece sealed with a key that is not the checkpoint's, holding the planted pickle."""
    return base64.b64encode(Sealer(os.urandom(32), scope).seal(purpose, pickle.dumps(Planted(marker))))


@pytest.mark.spark
def test_the_resumed_stream_counts_every_line_once(stopped, tmp_path):
    result, counts = run(str(stopped / "in"), copy_of(stopped, tmp_path))
    assert sorted(e.value for e in result.emissions(counts)) == [("k0", 4), ("k1", 4), ("k2", 4)]


@pytest.mark.spark
def test_a_changed_loop_file_is_refused_naming_it_and_never_loaded(stopped, tmp_path):
    checkpoint = copy_of(stopped, tmp_path)
    store = store_of(checkpoint)
    loop_file = os.path.join(store.checkpoint_path(store.newest()["step"]), LOOP_FILE)
    marker = str(tmp_path / "ran")
    with open(loop_file, "wb") as handle:
        handle.write(pickle.dumps(Planted(marker)))  # a plain pickle, as the file used to be
    with pytest.raises(UnauthenticatedFileError, match=rf"{loop_file} failed authentication: it is not a sealed"):
        run(str(stopped / "in"), checkpoint)
    sealed_by_another = Sealer(os.urandom(32), store.identity["id"]).seal("loop", pickle.dumps(Planted(marker)))
    with open(loop_file, "wb") as handle:
        handle.write(sealed_by_another)
    with pytest.raises(UnauthenticatedFileError, match=rf"{loop_file} failed authentication: it was written with another"):
        run(str(stopped / "in"), checkpoint)
    assert not os.path.exists(marker)


@pytest.mark.spark
def test_a_changed_keyed_state_piece_is_refused_naming_its_file_on_the_executor(stopped, tmp_path):
    checkpoint = copy_of(stopped, tmp_path)
    store = store_of(checkpoint)
    newest = store.newest()
    (state_dir,) = newest["state"].values()
    parts = [path for path in glob.glob(os.path.join(store.checkpoint_path(newest["step"]), state_dir, "part-*")) if os.path.getsize(path)]
    assert parts, "the checkpoint holds no keyed state: the test would test nothing"
    marker = str(tmp_path / "ran")
    with open(parts[0], "ab") as handle:
        handle.write(forged_line(marker, store.identity["id"], "state") + b"\n")
    without_checksum(parts[0])
    with pytest.raises(SparkTaskError, match=rf"UnauthenticatedFileError: {parts[0]} failed authentication"):
        run(str(stopped / "in"), checkpoint)
    assert not os.path.exists(marker)


@pytest.mark.spark
def test_a_changed_write_ahead_log_batch_is_refused_naming_its_file(stopped, tmp_path):
    checkpoint = copy_of(stopped, tmp_path, "journal-only")
    journal = sorted(glob.glob(os.path.join(checkpoint, "journal", "*.json")))
    assert journal and not glob.glob(os.path.join(checkpoint, "checkpoints", "*.json"))  # resumes by replaying step 0
    with open(journal[0]) as handle:
        (batch,) = json.load(handle)["sources"]["0"]["batches"][-1:]
    parts = sorted(glob.glob(os.path.join(checkpoint, "sources", "0", "wal", f"{batch:010d}", "part-*")))
    marker = str(tmp_path / "ran")
    with open(parts[0], "wb") as handle:  # the batch's records replaced by the planted pickle
        handle.write(base64.b64encode(pickle.dumps([Planted(marker)])) + b"\n")
    without_checksum(parts[0])
    with pytest.raises(SparkTaskError, match=rf"UnauthenticatedFileError: {parts[0]} failed authentication"):
        run(str(stopped / "in"), checkpoint)
    assert not os.path.exists(marker)


@pytest.mark.spark
def test_a_checkpoint_of_another_key_is_refused_naming_both_keys(stopped, tmp_path):
    checkpoint = copy_of(stopped, tmp_path)
    other = tmp_path / "other-key"
    other.write_text(os.urandom(32).hex())
    other.chmod(0o600)
    with pytest.raises(CheckpointError, match=rf"sealed with another checkpoint key .*{other}"):
        run(str(stopped / "in"), checkpoint, checkpoint_key_file=str(other))


@pytest.mark.spark
def test_what_a_checkpoint_holds_is_the_users_alone(stopped):
    checkpoint = str(stopped / "ck")
    assert stat.S_IMODE(os.stat(checkpoint).st_mode) == 0o700
    ours = [
        os.path.join(checkpoint, IDENTITY),
        *glob.glob(os.path.join(checkpoint, "journal", "*.json")),
        *glob.glob(os.path.join(checkpoint, "checkpoints", "*.json")),
        *glob.glob(os.path.join(checkpoint, "checkpoints", "*", LOOP_FILE)),
        *glob.glob(os.path.join(checkpoint, "checkpoints", "*", "state-*", "part-*")),
        *glob.glob(os.path.join(checkpoint, "sources", "0", "wal", "*.json")),
        *glob.glob(os.path.join(checkpoint, "sources", "0", "wal", "*", "part-*")),
    ]
    assert len(ours) > 8
    assert {path: stat.S_IMODE(os.stat(path).st_mode) for path in ours} == dict.fromkeys(ours, 0o600)
    folders = [path for path in glob.glob(os.path.join(checkpoint, "**"), recursive=True) if os.path.isdir(path) and "/spark" not in path]
    assert {path: stat.S_IMODE(os.stat(path).st_mode) for path in folders} == dict.fromkeys(folders, 0o700)


@pytest.mark.spark
@pytest.mark.parametrize("name", [IDENTITY, "journal"])
def test_a_json_file_that_is_not_json_is_refused_naming_it(stopped, tmp_path, name):
    checkpoint = copy_of(stopped, tmp_path, "journal-only")
    path = os.path.join(checkpoint, name) if name == IDENTITY else sorted(glob.glob(os.path.join(checkpoint, "journal", "*.json")))[0]
    with open(path, "w") as handle:
        handle.write('{"format": ')
    with pytest.raises(CheckpointError, match=rf"{path}: the checkpoint's .* is not valid JSON"):
        run(str(stopped / "in"), checkpoint)


@pytest.mark.spark
def test_a_stream_whose_manifests_cannot_be_read_stops_instead_of_starting_from_nothing(stopped, tmp_path):
    """Its journal goes on from its checkpoints: starting from empty state would lose the
    state and feed the journaled batches again (tests/runners/test_checkpoint_store.py
    has the rules)."""
    checkpoint = copy_of(stopped, tmp_path)
    manifests = sorted(glob.glob(os.path.join(checkpoint, "checkpoints", "*.json")))
    assert manifests
    for path in manifests:
        with open(path, "w") as handle:
            handle.write("")
    with pytest.raises(CheckpointError, match=rf"no checkpoint can be read, so the run stops rather than start again from empty state: {manifests[-1]}"):
        run(str(stopped / "in"), checkpoint)


# -- the key --------------------------------------------------------------------------------


@pytest.fixture
def own_config(tmp_path, monkeypatch):
    monkeypatch.delenv(checkpoint_key.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "sparkbeam"


def test_the_users_key_is_made_on_first_use_private_and_kept(own_config):
    key, path = load_key()
    assert path == str(own_config / "checkpoint-key") and len(key) == 32
    assert stat.S_IMODE(os.stat(own_config).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_key() == (key, path)


def test_a_key_others_can_read_is_refused(own_config):
    _, path = load_key()
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match=rf"{path} can be read or written by other users .*chmod 600"):
        load_key()
    os.chmod(path, 0o600)
    os.chmod(own_config, 0o755)
    with pytest.raises(KeyFileError, match=rf"folder {own_config} can be read or written by other users .*chmod 700"):
        load_key()


def test_a_named_key_file_must_exist_and_be_a_key(tmp_path):
    missing = tmp_path / "nothing"
    with pytest.raises(KeyFileError, match=rf"--checkpoint_key_file: the checkpoint key file {missing} does not exist; make one with"):
        load_key(str(missing))
    wrong = tmp_path / "wrong"
    wrong.write_text("not a key")
    wrong.chmod(0o600)
    with pytest.raises(KeyFileError, match=rf"{wrong} is not a checkpoint key \(64 hexadecimal digits\)"):
        load_key(str(wrong))


def test_a_key_behind_a_symbolic_link_is_not_followed(tmp_path):
    real = tmp_path / "real"
    real.write_text(os.urandom(32).hex())
    real.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(KeyFileError, match=rf"cannot open the checkpoint key file {link} .*symbolic link is not followed"):
        load_key(str(link))
    assert len(load_key(str(real))[0]) == 32


def test_the_sealer_never_shows_its_key():
    key = bytes(range(32))
    assert key.hex() not in repr(Sealer(key, "x")) and str(list(key)) not in repr(Sealer(key, "x"))
