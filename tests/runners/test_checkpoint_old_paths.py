"""A checkpoint written before ``runners/core`` moved into rooms still resumes: its pickles
name engine classes by their old module paths (``sparkbeam.runners.core.records``), which
``runners/spark/old_paths.py`` maps to the new ones (``...core.grouping.records``)."""

from __future__ import annotations

import base64
import contextlib
import importlib
import io
import os
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

import sparkbeam as beam
from sparkbeam.io import commits
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.grouping.records import KeyedState, StateBucket
from sparkbeam.runners.core.lowering.step_values import StageSummary
from sparkbeam.runners.spark import old_paths, state_chunks
from sparkbeam.runners.spark.checkpoint_key import load_key
from sparkbeam.runners.spark.checkpoints import LOOP_FILE, CheckpointStore
from sparkbeam.transforms import window

CORE = "sparkbeam.runners.core."


@contextlib.contextmanager
def pickled_with_old_paths() -> Iterator[None]:
    """Inside: every engine class pickles under its module path before the rooms (as the
    version before them wrote it), each old module an alias of the new one."""
    # Three old modules share their name with a room now (grouping, plan, sources): every
    # module is imported before any alias replaces a room's package, and each is put back.
    modules = {old: importlib.import_module(f"{CORE}{room}.{old}") for old, room in old_paths._ROOM_OF.items()}
    saved = {CORE + old: sys.modules.get(CORE + old) for old in modules}
    renamed: list[tuple[type, str]] = []
    try:
        for old, module in modules.items():
            sys.modules[CORE + old] = module
            for value in vars(module).values():
                if isinstance(value, type) and value.__module__ == module.__name__:
                    renamed.append((value, value.__module__))
                    value.__module__ = CORE + old
        for old_module, name in old_paths._MOVED_NAMES:
            value = getattr(sys.modules[old_module], name)
            renamed.append((value, value.__module__))
            value.__module__ = old_module
        yield
    finally:
        for cls, module_name in renamed:
            cls.__module__ = module_name
        for name, previous in saved.items():
            if previous is None:
                del sys.modules[name]
            else:
                sys.modules[name] = previous


def test_a_pickle_with_old_paths_names_modules_that_are_gone_and_still_loads():
    summary = StageSummary(elements_in=3, earliest_hold=7)
    state = KeyedState({"window": [1, 2]})
    with pickled_with_old_paths():
        payload = pickle.dumps((summary, state), pickle.HIGHEST_PROTOCOL)
    assert b"sparkbeam.runners.core.steps" in payload and b"sparkbeam.runners.core.records" in payload
    with pytest.raises(ModuleNotFoundError, match=r"sparkbeam\.runners\.core\.(steps|records)"):
        pickle.loads(payload)
    assert old_paths.loads(payload) == (summary, state)


def test_old_paths_map_only_the_engine_modules_that_moved():
    assert old_paths.current_path(CORE + "records", "StateBucket") == (CORE + "grouping.records", "StateBucket")
    assert old_paths.current_path(CORE + "steps", "StepParams") == (CORE + "lowering.step_values", "StepParams")
    assert old_paths.current_path(CORE + "steps", "StepLoop") == (CORE + "loop.steps", "StepLoop")
    assert old_paths.current_path(CORE + "grouping.records", "KeyedState") == (CORE + "grouping.records", "KeyedState")
    assert old_paths.current_path("builtins", "set") == ("builtins", "set")


def counts(p: beam.Pipeline, directory: str) -> Any:
    read = p | "Read" >> beam.io.ReadFromTextStream(
        directory, timestamp=lambda line: int(line.split(",")[1]), max_files_per_trigger=1
    )
    return beam.capture(
        read
        | "Key" >> beam.Map(lambda line: (line.split(",")[0], 1))
        | "Fixed" >> beam.WindowInto(window.FixedWindows(10))
        | "Count" >> beam.CombinePerKey(sum)
    )


def _rewrite_sealed_lines(path: str, store: CheckpointStore) -> int:
    """Re-pickle every piece of a sealed part file with old paths (bucket payloads too)."""
    pieces = 0
    lines = []
    for line in commits.read_bytes(path).splitlines():
        if not line:
            continue
        payload = store.sealer.open("state", base64.b64decode(line), where=path)
        source = io.BytesIO(payload)
        unpickler = old_paths.Unpickler(source)
        records = []
        while source.tell() < len(payload):
            records.append(unpickler.load())
        with pickled_with_old_paths():
            records = [
                (key, attrs.evolve(value, payload=state_chunks.pack_bucket(state_chunks.unpack_bucket(value.payload))))
                if type(value) is StateBucket and value.payload
                else (key, value)
                for key, value in records
            ]
            buffer = io.BytesIO()
            pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
            for record in records:
                pickler.dump(record)
        lines.append(base64.b64encode(store.sealer.seal("state", buffer.getvalue())))
        if len(records) == 1 and records[0][0] == "sparkbeam-state-part":
            continue  # a delta's part whose partition's buckets did not change: its marker alone
        assert b"sparkbeam.runners.core.records" in buffer.getvalue()  # StateBucket or KeyedState, by its old path
        pieces += 1
    commits.write_bytes(path, b"\n".join(lines) + b"\n", private=True)
    # Hadoop's local file system checks a part file against its .crc beside it.
    crc = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    return pieces


@pytest.mark.spark
def test_a_checkpoint_written_with_the_old_module_paths_resumes(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    for index in range(4):
        path = directory / f"f{index}.txt"
        path.write_text("".join(f"k,{index * 10 + j}\n" for j in range(3)))
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    settings = {"step_interval": 0.2, "state_partitions": 2, "available_now": True, "checkpoint_interval": 1}
    checkpoint = str(tmp_path / "ck")
    first = beam.Pipeline(options=PipelineOptions(checkpoint_dir=checkpoint, max_steps=2, **settings))
    counts(first, str(directory))
    assert first.run().watermarks().steps == 2

    # What the version before the rooms would have written: the same records, old paths.
    store = CheckpointStore.inspect(checkpoint, key=load_key()[0])
    manifest = store.newest()
    assert manifest is not None
    resume_dir = store.checkpoint_path(manifest["step"])
    loop_path = commits.join(resume_dir, LOOP_FILE)
    saved = old_paths.loads(store.read_sealed(loop_path, "loop"))
    with pickled_with_old_paths():
        old_loop = pickle.dumps(saved, pickle.HIGHEST_PROTOCOL)
    assert b"sparkbeam.runners.core.steps" in old_loop or b"sparkbeam.runners.core.timeline" in old_loop
    store.write_sealed(loop_path, "loop", old_loop)
    rewritten = 0
    # every file the state is restored from: the stage's base and deltas (state_checkpoints.py)
    for chain in store.chains(manifest).values():
        for at, state_dir in chain.files:
            for name in commits.list_names(store.state_path(at, state_dir)):
                if name.startswith("part-"):
                    rewritten += _rewrite_sealed_lines(commits.join(store.state_path(at, state_dir), name), store)
    assert rewritten > 0

    second = beam.Pipeline(options=PipelineOptions(checkpoint_dir=checkpoint, **settings))
    resumed = counts(second, str(directory))
    result = second.run()
    emitted = sorted((e.value, int(e.windows[0].start)) for e in result.emissions(resumed))
    assert emitted == [(("k", 3), start) for start in (0, 10, 20, 30)]
