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
and manifests are fsynced first (on local disks; HDFS syncs them on close). Every file
operation goes through ``sparkbeam.io.commits``, hence ``FileSystems``: the directory may
be a local path, a ``file://`` URL or any URL a registered file system serves (``hdfs://``,
``s3a://``, ``gs://``... through Hadoop's API, ``runners/spark/hadoop_filesystem.py``).
"""

from __future__ import annotations

import json
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.core.execution import kind_of
from sparkbeam.runners.core.plan import StagePlan

__all__ = ["CheckpointError", "CheckpointStore", "pipeline_shape"]

IDENTITY = "sparkbeam-checkpoint.json"
# 3: keyed state as records.StateChunk records (runners/spark/state_chunks.py);
# 2: as (key, records.KeyedState) pairs, which this version still reads; 1 had one-letter tags
FORMAT = "sparkbeam-checkpoint/3"
READABLE = frozenset({"sparkbeam-checkpoint/2", FORMAT})


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


def _json_bytes(content: Any) -> bytes:
    return json.dumps(content, indent=1, sort_keys=True).encode("utf-8")


def _numbered(directory: str, suffix: str) -> list[int]:
    numbers = []
    for name in commits.list_names(directory):
        stem = name[: -len(suffix)] if suffix and name.endswith(suffix) else (name if not suffix else None)
        if stem is not None and stem.isdigit():
            numbers.append(int(stem))
    return sorted(numbers)


class CheckpointStore:
    """Reads and writes one pipeline's checkpoint directory (see the module docs)."""

    def __init__(self, root: str, shape: list[str], *, keep: int = 2) -> None:
        self.root = commits.absolute(root)
        self.shape = shape
        self.keep = keep
        self.journal_dir = commits.join(self.root, "journal")
        self.checkpoints_dir = commits.join(self.root, "checkpoints")

    # -- identity --------------------------------------------------------------------------
    def claim(self) -> None:
        """Make the directory this pipeline's, or check that it is; refuse anything else."""
        identity_path = commits.join(self.root, IDENTITY)
        if commits.exists(identity_path):
            identity = json.loads(commits.read_bytes(identity_path))
            if identity.get("format") not in READABLE:
                msg = f"--checkpoint_dir={self.root}: written by an incompatible version ({identity.get('format')!r}, expected {FORMAT!r})"
                raise CheckpointError(msg)
            if identity.get("shape") != self.shape:
                raise CheckpointError(self._shape_message(identity.get("shape") or []))
        else:
            present = commits.list_names(self.root)
            if present:
                found = ", ".join(sorted(present)[:5])
                msg = (
                    f"--checkpoint_dir={self.root} is not a sparkbeam checkpoint directory (it holds {found} "
                    f"and no {IDENTITY}); give an empty or new directory"
                )
                raise CheckpointError(msg)
            commits.makedirs(self.root)
            commits.write_bytes(identity_path, _json_bytes({"format": FORMAT, "shape": self.shape}))
        commits.makedirs(self.journal_dir)
        commits.makedirs(self.checkpoints_dir)

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
        return commits.join(self.root, "sources", str(stage_id))

    # -- the step journal ----------------------------------------------------------------
    def write_journal(self, entry: dict[str, Any]) -> None:
        commits.write_bytes(commits.join(self.journal_dir, f"{entry['step']:010d}.json"), _json_bytes(entry))

    def journal_from(self, step: int) -> dict[int, dict[str, Any]]:
        """The journal's entries for steps >= ``step`` (steps to replay after a restore)."""
        entries = {}
        for number in _numbered(self.journal_dir, ".json"):
            if number >= step:
                entries[number] = json.loads(commits.read_bytes(commits.join(self.journal_dir, f"{number:010d}.json")))
        return entries

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint_path(self, step: int) -> str:
        return commits.join(self.checkpoints_dir, f"{step:010d}")

    def begin(self, step: int) -> str:
        """A fresh directory for the checkpoint that resumes at ``step``."""
        path = self.checkpoint_path(step)
        commits.remove(path, missing_ok=True)  # there only if an earlier attempt was cut short
        commits.makedirs(path)
        return path

    def commit(self, step: int, manifest: dict[str, Any]) -> None:
        """Write the manifest: from now on the checkpoint exists. Then drop the old ones."""
        manifest = {**manifest, "step": step, "format": FORMAT}
        commits.write_bytes(self.checkpoint_path(step) + ".json", _json_bytes(manifest))

    def manifests(self) -> list[dict[str, Any]]:
        """Complete checkpoints, newest first."""
        found = []
        for number in reversed(_numbered(self.checkpoints_dir, ".json")):
            try:
                manifest = json.loads(commits.read_bytes(self.checkpoint_path(number) + ".json"))
            except (OSError, ValueError):
                continue
            files = [commits.join(self.checkpoint_path(number), name) for name in manifest.get("files", [])]
            if all(commits.exists(path) for path in files):
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
                commits.remove(self.checkpoint_path(number) + ".json", missing_ok=True)
        for name in commits.list_names(self.checkpoints_dir):
            stem = name.split(".")[0]
            if stem.isdigit() and int(stem) < oldest and commits.is_directory(commits.join(self.checkpoints_dir, name)):
                commits.remove(commits.join(self.checkpoints_dir, name), missing_ok=True)
        for number in _numbered(self.journal_dir, ".json"):
            if number < oldest:
                commits.remove(commits.join(self.journal_dir, f"{number:010d}.json"), missing_ok=True)
        return kept[-1]
