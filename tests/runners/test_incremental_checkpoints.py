"""Incremental checkpoints of keyed state on Spark (``runners/spark/state_checkpoints.py``).

A stream whose first file brings 2,000 keys and whose next files touch 3 keys each,
checkpointed after every step: the first checkpoint writes the whole state (a base), the
next ones only the buckets their step wrote (deltas), counted in records; the base and
deltas restore exactly (after SIGKILL too); compaction writes a base again, and pruning
keeps every file a kept manifest's chain reads, and nothing else; a changed or missing
delta is refused naming the stage, the partition and the file.
"""

from __future__ import annotations

import base64
import collections
import glob
import itertools
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.grouping.records import StateBucket
from sparkbeam.runners.spark import sealed_files, state_checkpoints
from sparkbeam.runners.spark.checkpoint_key import load_key
from sparkbeam.runners.spark.checkpoints import LOOP_FILE, CheckpointStore
from sparkbeam.runners.spark.errors import SparkTaskError
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.state_checkpoints import StateFileError
from tests.runners import incremental_job

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

KEYS = 2_000
FILES = 6
TOUCHED = 3  # keys per file after the first


def write_input(directory) -> collections.Counter:
    os.makedirs(directory)
    expected: collections.Counter = collections.Counter()
    for index in range(FILES):
        keys = [f"k{j}" for j in range(KEYS)] if index == 0 else [f"k{(index * 7 + j) % KEYS}" for j in range(TOUCHED)]
        expected.update(keys)
        path = os.path.join(directory, f"f{index}.txt")
        with open(path, "w") as handle:
            handle.write("".join(f"{key},{index}\n" for key in keys))
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    return expected


def run(directory: str, checkpoint: str, **settings):
    options = {"step_interval": 0.2, "state_partitions": 2, "available_now": True, "checkpoint_interval": 1, **settings}
    p = beam.Pipeline(options=PipelineOptions(checkpoint_dir=checkpoint, **options))
    counts = beam.capture(incremental_job.build(p, directory))
    return p.run(), counts


def store_of(checkpoint: str) -> CheckpointStore:
    return CheckpointStore.inspect(checkpoint, key=load_key()[0])


def part_records(store: CheckpointStore, directory: str) -> list:
    """What a base's or delta's part files hold, read as a restore reads them (sealed)."""
    records = []
    for path in sorted(glob.glob(os.path.join(directory, "part-*"))):
        with open(path, "rb") as handle:
            records += list(sealed_files.opened(store.sealer, "state", path, handle.read().split(b"\n")))
    return records


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, spark):
    """The stream stopped after 4 steps (of its 6 files), checkpointed after each step."""
    base = tmp_path_factory.mktemp("incremental")
    expected = write_input(str(base / "in"))
    result, _ = run(str(base / "in"), str(base / "ck"), max_steps=4)
    # what each step read: on a busy machine the file query may not have delivered the next
    # file when a step starts, and that step reads nothing (its delta then holds no bucket)
    return base, expected, [record.elements_in for record in result.watermarks().for_stage("Read")]


def copy_of(stopped, tmp_path) -> str:
    checkpoint = str(tmp_path / "ck")
    shutil.copytree(str(stopped[0] / "ck"), checkpoint)
    return checkpoint


def test_a_checkpoint_writes_the_buckets_its_step_touched_and_the_first_one_everything(stopped):
    base, _, read = stopped
    store = store_of(str(base / "ck"))
    newest = store.newest()
    assert newest["step"] == 4
    ((stage_id, chain),) = store.chains(newest).items()
    # a base at step 1 (all 2,000 keys), a delta after each step since
    assert [name for _, name in chain.files] == [f"state-{stage_id}", *[f"delta-{stage_id}"] * 3]
    first = part_records(store, store.state_path(*chain.files[0]))
    buckets = [record for record in first if type(record[1]) is StateBucket]
    assert sum(bucket.state_keys for _, bucket in buckets) == KEYS and len(buckets) >= KEYS // 128
    assert len(read) == 4 and read[0] == KEYS and sum(read[1:]) > 0
    for (at, name), lines in zip(chain.files[1:], read[1:]):
        records = part_records(store, store.state_path(at, name))
        markers = [record for record in records if record[0] == "sparkbeam-state-part"]
        assert [marker[1][0] for marker in markers] == ["delta", "delta"]  # one per partition
        written = [record[1] for record in records if record not in markers]
        # the step's 3 keys fall in at most 3 buckets: those alone are written again
        assert (1 if lines else 0) <= len(written) <= (TOUCHED if lines else 0)
        assert all(bucket.version == at - 1 for bucket in written)
    # the base's checkpoint is pruned but for the base the kept manifests read
    assert os.listdir(store.checkpoint_path(1)) == [f"state-{stage_id}"]
    assert not os.path.exists(store.checkpoint_path(1) + ".json")
    assert {LOOP_FILE, f"delta-{stage_id}"} <= set(os.listdir(store.checkpoint_path(3)))


def test_base_and_deltas_restore_the_state_exactly(stopped, tmp_path):
    base, expected, _ = stopped
    result, counts = run(str(base / "in"), copy_of(stopped, tmp_path))
    assert dict(e.value for e in result.emissions(counts)) == dict(expected)


def test_compaction_writes_a_base_again_and_pruning_drops_what_no_kept_chain_reads(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(state_checkpoints, "MAX_DELTAS", 1)
    expected = write_input(str(tmp_path / "in"))
    checkpoint = str(tmp_path / "ck")
    run(str(tmp_path / "in"), checkpoint, max_steps=3)
    store = store_of(checkpoint)
    ((stage_id, chain),) = store.chains(store.newest()).items()
    assert chain.files == [(3, f"state-{stage_id}")]  # base, delta, then a base again
    ((_, older),) = store.chains(store.manifests()[1]).items()
    assert older.files == [(1, f"state-{stage_id}"), (2, f"delta-{stage_id}")]
    assert os.listdir(store.checkpoint_path(1)) == [f"state-{stage_id}"]  # read by the kept manifest of step 2
    run(str(tmp_path / "in"), checkpoint, max_steps=5)
    assert not os.path.exists(store.checkpoint_path(1)) and not os.path.exists(store.checkpoint_path(2))
    result, counts = run(str(tmp_path / "in"), checkpoint)
    assert dict(e.value for e in result.emissions(counts)) == dict(expected)


def test_the_lineage_is_cut_only_when_pruning_would_drop_what_it_reaches(spark, tmp_path, monkeypatch):
    """A checkpoint reads the state back from its files (cutting the lineage) only when
    pruning would drop the manifest of the last cut: with the newest 2 kept, every other
    checkpoint, and always the first and the finished one; the files the lineage reaches
    stay through every pruning, and the counts are exact."""
    from sparkbeam.runners.spark.backend import SparkBackend

    cuts: list[bool] = []
    reached: list[str] = []  # the state files the lineage reads since its last cut
    original_read_back, original_prune = SparkBackend.read_back_state, CheckpointStore.prune

    def read_back_state(self, chains, path_of, sealer, *, cut=True):
        cuts.append(cut)
        if cut:
            reached[:] = [path_of(at, name) for chain in chains.values() for at, name in chain.files]
        return original_read_back(self, chains, path_of, sealer, cut=cut)

    def prune(self, manifests=None):
        oldest = original_prune(self, manifests)
        missing = [path for path in reached if not os.path.isdir(path)]
        assert not missing, f"pruning removed state files the lineage reads: {missing}"
        return oldest

    monkeypatch.setattr(SparkBackend, "read_back_state", read_back_state)
    monkeypatch.setattr(CheckpointStore, "prune", prune)
    expected = write_input(str(tmp_path / "in"))
    result, counts = run(str(tmp_path / "in"), str(tmp_path / "ck"))
    assert dict(e.value for e in result.emissions(counts)) == dict(expected)
    assert len(cuts) >= 4 and cuts[0] and cuts[-1]  # the first, and the finished checkpoint
    assert not any(a is False and b is False for a, b in itertools.pairwise(cuts))  # never two in a row skipped
    assert cuts.count(False) >= 1


def test_a_changed_delta_is_refused_naming_stage_partition_and_file(stopped, tmp_path):
    checkpoint = copy_of(stopped, tmp_path)
    store = store_of(checkpoint)
    ((stage_id, chain),) = store.chains(store.newest()).items()
    part = os.path.join(store.state_path(*chain.files[-1]), "part-00001")
    forged = Sealer(os.urandom(32), store.identity["id"]).seal("state", pickle.dumps([("k0", 10**6)]))
    with open(part, "ab") as handle:
        handle.write(base64.b64encode(forged) + b"\n")
    os.remove(os.path.join(os.path.dirname(part), ".part-00001.crc"))
    pattern = rf"{part} failed authentication.*\(the checkpointed state of stage {stage_id}, partition 1"
    with pytest.raises(SparkTaskError, match=pattern):
        run(str(stopped[0] / "in"), checkpoint)


def test_a_missing_delta_part_is_refused_naming_stage_partition_and_file(stopped, tmp_path):
    checkpoint = copy_of(stopped, tmp_path)
    store = store_of(checkpoint)
    ((stage_id, chain),) = store.chains(store.newest()).items()
    part = os.path.join(store.state_path(*chain.files[1]), "part-00000")  # read by both kept checkpoints
    os.remove(part)
    with pytest.raises(StateFileError, match=rf"{part}: the checkpointed state of stage {stage_id}, partition 0, is missing"):
        run(str(stopped[0] / "in"), checkpoint)


def test_a_delta_chain_is_restored_exactly_after_sigkill(tmp_path):
    """The job killed once its newest checkpoint's chain has two deltas (wherever it is then),
    then run to its end: every key's count as plain Python counts it, written once."""
    expected = write_input(str(tmp_path / "in"))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ck")
    command = [sys.executable, incremental_job.__file__, str(tmp_path / "in"), out, checkpoint]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    killed = False
    while process.poll() is None and time.monotonic() < deadline:
        newest = CheckpointStore(checkpoint, []).newest() if os.path.exists(os.path.join(checkpoint, "checkpoints")) else None
        if newest is not None and sum(name.startswith("delta-") for name in newest.get("state", {}).values()) and newest["step"] >= 3:
            os.killpg(process.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.05)
    process.wait()
    assert killed, "the job ended before its chain held two deltas: the test would test nothing"
    finished = subprocess.run(command, env=env, capture_output=True, timeout=300)
    assert finished.returncode == 0, finished.stderr.decode()[-3000:]
    lines = collections.Counter()
    for path in glob.glob(os.path.join(out, "counts-step-*", "*")):
        with open(path) as handle:
            lines.update(line.rstrip("\n") for line in handle)
    assert all(times == 1 for times in lines.values())
    assert {line.split(",")[0]: int(line.split(",")[1]) for line in lines} == dict(expected)
