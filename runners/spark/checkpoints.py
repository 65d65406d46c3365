"""The checkpoint directory of a streaming run: its identity, step journal, checkpoints and sources.

Layout under ``--checkpoint_dir``::

    sparkbeam-checkpoint.json        which pipeline owns the directory (its stage shape)
    sources/<stage>/spark/           Spark's own checkpoint of the source's query (offsets)
    sources/<stage>/wal/<batch>[.json]  the source's write-ahead log (see ``intake``)
    journal/<step>.json              what each step took: its time and each source's batches
    checkpoints/<step>/              the state to resume at <step>: the loop's (watermarks,
                                     sources, trigger summaries...) and each grouping's keyed
                                     state (trigger and timer state live in it)
    checkpoints/<step>.json          the manifest, written last and atomically

A checkpoint exists only once its manifest does. Recovery loads the newest manifest whose
files are all present, then replays the journal's steps after it: each with the input and
time it had, so it computes what it computed before (and file sinks rewrite the same
files). Every file is written to a temporary name and renamed into place; journal entries
and manifests are fsynced first. Paths are local, or a file system mounted at the same path
on every machine.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from typing import Any

from sparkbeam.runners.core.execution import kind_of
from sparkbeam.runners.core.plan import StagePlan

__all__ = ["CheckpointError", "CheckpointStore", "pipeline_shape", "write_atomically"]

IDENTITY = "sparkbeam-checkpoint.json"
# 2: keyed state as (key, records.KeyedState) pairs (1 had one-letter tags)
FORMAT = "sparkbeam-checkpoint/2"


class CheckpointError(ValueError):
    """The checkpoint directory cannot be used for this pipeline."""


def pipeline_shape(plan: StagePlan) -> list[str]:
    """One line per stage: what a checkpoint's state is laid out by. A pipeline whose shape
    differs cannot resume from the checkpoint (its state would land in the wrong places)."""
    lines = []
    for stage in plan.stages:
        head = stage.head
        parts = [f"stage {stage.id} {stage.name!r}"]
        if head is not None:
            parts.append(f"{type(head).__name__}({head.label})")
            parts.extend(kind_of(head).shape(head))
        parts.extend(f"{type(op).__name__}({op.label})" for op in stage.body)
        parts.append(f"inputs={list(stage.inputs)} outputs={list(stage.outputs)}")
        lines.append("; ".join(parts))
    return lines


def write_atomically(path: str, data: bytes) -> None:
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def _json_bytes(content: Any) -> bytes:
    return json.dumps(content, indent=1, sort_keys=True).encode("utf-8")


def _numbered(directory: str, suffix: str) -> list[int]:
    numbers = []
    for name in os.listdir(directory):
        stem = name[: -len(suffix)] if suffix and name.endswith(suffix) else (name if not suffix else None)
        if stem is not None and stem.isdigit():
            numbers.append(int(stem))
    return sorted(numbers)


class CheckpointStore:
    """Reads and writes one pipeline's checkpoint directory (see the module docs)."""

    def __init__(self, root: str, shape: list[str], *, keep: int = 2) -> None:
        self.root = os.path.abspath(root)
        self.shape = shape
        self.keep = keep
        self.journal_dir = os.path.join(self.root, "journal")
        self.checkpoints_dir = os.path.join(self.root, "checkpoints")

    # -- identity --------------------------------------------------------------------------
    def claim(self) -> None:
        """Make the directory this pipeline's, or check that it is; refuse anything else."""
        identity_path = os.path.join(self.root, IDENTITY)
        if os.path.isfile(identity_path):
            with open(identity_path, encoding="utf-8") as handle:
                identity = json.load(handle)
            if identity.get("format") != FORMAT:
                msg = f"--checkpoint_dir={self.root}: written by an incompatible version ({identity.get('format')!r}, expected {FORMAT!r})"
                raise CheckpointError(msg)
            if identity.get("shape") != self.shape:
                raise CheckpointError(self._shape_message(identity.get("shape") or []))
        else:
            if os.path.isdir(self.root) and os.listdir(self.root):
                found = ", ".join(sorted(os.listdir(self.root))[:5])
                msg = (
                    f"--checkpoint_dir={self.root} is not a sparkbeam checkpoint directory (it holds {found} "
                    f"and no {IDENTITY}); give an empty or new directory"
                )
                raise CheckpointError(msg)
            os.makedirs(self.root, exist_ok=True)
            write_atomically(identity_path, _json_bytes({"format": FORMAT, "shape": self.shape}))
        os.makedirs(self.journal_dir, exist_ok=True)
        os.makedirs(self.checkpoints_dir, exist_ok=True)

    def _shape_message(self, theirs: list[str]) -> str:
        first = next(
            (i for i, (a, b) in enumerate(zip(theirs, self.shape)) if a != b),
            min(len(theirs), len(self.shape)),
        )
        was = theirs[first] if first < len(theirs) else "(no such stage)"
        now = self.shape[first] if first < len(self.shape) else "(no such stage)"
        return (
            f"--checkpoint_dir={self.root} belongs to a pipeline of another shape, so its state cannot "
            f"be restored into this one.\n  checkpoint: {was}\n  this run:   {now}\n"
            "Give this pipeline a new checkpoint directory (or run the pipeline that wrote it)"
        )

    def source_dir(self, stage_id: int) -> str:
        return os.path.join(self.root, "sources", str(stage_id))

    # -- the step journal ----------------------------------------------------------------
    def write_journal(self, entry: dict[str, Any]) -> None:
        write_atomically(os.path.join(self.journal_dir, f"{entry['step']:010d}.json"), _json_bytes(entry))

    def journal_from(self, step: int) -> dict[int, dict[str, Any]]:
        """The journal's entries for steps >= ``step`` (steps to replay after a restore)."""
        entries = {}
        for number in _numbered(self.journal_dir, ".json"):
            if number >= step:
                with open(os.path.join(self.journal_dir, f"{number:010d}.json"), encoding="utf-8") as handle:
                    entries[number] = json.load(handle)
        return entries

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint_path(self, step: int) -> str:
        return os.path.join(self.checkpoints_dir, f"{step:010d}")

    def begin(self, step: int) -> str:
        """A fresh directory for the checkpoint that resumes at ``step``."""
        path = self.checkpoint_path(step)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def commit(self, step: int, manifest: dict[str, Any]) -> None:
        """Write the manifest: from now on the checkpoint exists. Then drop the old ones."""
        manifest = {**manifest, "step": step, "format": FORMAT}
        write_atomically(self.checkpoint_path(step) + ".json", _json_bytes(manifest))

    def manifests(self) -> list[dict[str, Any]]:
        """Complete checkpoints, newest first."""
        found = []
        for number in reversed(_numbered(self.checkpoints_dir, ".json")):
            try:
                with open(self.checkpoint_path(number) + ".json", encoding="utf-8") as handle:
                    manifest = json.load(handle)
            except (OSError, ValueError):
                continue
            files = [os.path.join(self.checkpoint_path(number), name) for name in manifest.get("files", [])]
            if all(os.path.exists(path) for path in files):
                found.append(manifest)
        return found

    def newest(self) -> dict[str, Any] | None:
        manifests = self.manifests()
        return manifests[0] if manifests else None

    def prune(self) -> dict[str, Any] | None:
        """Keep the newest ``keep`` checkpoints; returns the oldest kept manifest."""
        manifests = self.manifests()
        kept = manifests[: self.keep]
        if not kept:
            return None
        oldest = kept[-1]["step"]
        for number in _numbered(self.checkpoints_dir, ".json"):
            if number < oldest:
                os.remove(self.checkpoint_path(number) + ".json")
        for name in os.listdir(self.checkpoints_dir):
            stem = name.split(".")[0]
            if stem.isdigit() and int(stem) < oldest and os.path.isdir(os.path.join(self.checkpoints_dir, name)):
                shutil.rmtree(os.path.join(self.checkpoints_dir, name), ignore_errors=True)
        for number in _numbered(self.journal_dir, ".json"):
            if number < oldest:
                os.remove(os.path.join(self.journal_dir, f"{number:010d}.json"))
        return kept[-1]
