"""The checkpoint directory of a streaming run: its identity, step journal, checkpoints and sources.

Layout under ``--checkpoint_dir``::

    sparkbeam-checkpoint.json        which pipeline owns the directory (its stage shape), the
                                     checkpoint's identity and the name of the key it is sealed with
    sources/<stage>/spark/           Spark's own checkpoint of the source's query (offsets)
    sources/<stage>/wal/<batch>[.json]  the source's write-ahead log (see ``intake``)
    journal/<step>.json              what each step took: its time and each source's batches
    checkpoints/<step>/              the state to resume at <step>: the loop's (watermarks,
                                     sources, trigger summaries..., ``loop.sealed``) and each
                                     grouping's keyed state (trigger and timer state live in it):
                                     ``state-<stage>`` a base, ``delta-<stage>`` the buckets
                                     changed since the stage's last checkpoint; the manifest's
                                     chains name the base and deltas, maybe in earlier
                                     checkpoints' directories, that make it (``state_checkpoints``)
    checkpoints/<step>.json          the manifest, written last and atomically
    lease/                           which run holds the directory now (``lease.py``)

A checkpoint exists only once its manifest does. Recovery loads the newest manifest whose
files are all present (reading again, a few times, one that cannot be read; with none usable
while the journal says there was one, the run stops rather than start from empty state),
then replays the journal's steps after it: each with the input and
time it had, so it computes what it computed before (and file sinks rewrite the same
files). Every file is written to a temporary name and renamed into place; journal entries
and manifests are fsynced first (on local disks; HDFS syncs them on close). Every file
operation goes through ``sparkbeam.io.commits``, hence ``FileSystems``: the directory may
be a local path, a ``file://`` URL or any URL a registered file system serves (``hdfs://``,
``s3a://``, ``gs://``... through Hadoop's API, ``runners/spark/hadoop_filesystem.py``).

**Nothing read back runs code unless it is authenticated.** What is pickled (the loop's
state, keyed state, write-ahead-log batches) is sealed with the checkpoint key, which lives
outside the directory (``checkpoint_key.py``, ``sealing.py``, ``sealed_files.py``), and
checked before it is unpickled; the JSON files are data, parsed with a refusal that names
the file when one is not what sparkbeam wrote. On a local file system the directory is
created 0700 and sparkbeam's files in it 0600.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
import uuid
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.plan.plan import StagePlan
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.state_checkpoints import Chain, StateFileError

__all__ = ["CheckpointError", "CheckpointStore", "pipeline_shape"]

_LOG = logging.getLogger(__name__)

IDENTITY = "sparkbeam-checkpoint.json"
#: the loop's state in a checkpoint (sealed: see the module docs)
LOOP_FILE = "loop.sealed"
#: the lease of the run that holds the directory (``lease.py``)
LEASE_DIR = "lease"
# 6: keyed state as a chain of a base and deltas (state_checkpoints.py), named by each
# manifest's "chains", which version 5 would not read; 5: keyed state as records.StateBucket records (keyed_buckets.py), which version 4 would
# take for elements; 4: pickled files sealed with the checkpoint key, the shape from
# stable descriptions; 3: keyed state as records.StateChunk records; 2: as (key,
# records.KeyedState) pairs
FORMAT = "sparkbeam-checkpoint/6"
#: read as they are (a manifest with no chains names one file of each stage's whole state,
#: placed into buckets by the first step; the next checkpoint writes a base), and marked
#: with FORMAT when claimed, so that the versions that wrote them refuse them from then on
_READABLE_FORMATS = frozenset({FORMAT, "sparkbeam-checkpoint/5", "sparkbeam-checkpoint/4"})
_UNSEALED_FORMATS = frozenset({"sparkbeam-checkpoint/2", "sparkbeam-checkpoint/3"})


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


def read_json(path: str, what: str) -> dict[str, Any]:
    """A JSON object sparkbeam wrote (the identity, a journal entry, a manifest, a log
    batch's statistics), parsed as data; one that is not is refused naming the file."""
    data = commits.read_bytes(path)
    try:
        content = json.loads(data)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        msg = (
            f"{path}: the checkpoint's {what} is not valid JSON ({error}); it was cut short or changed "
            "since sparkbeam wrote it. Restore it from a copy, or start a new --checkpoint_dir"
        )
        raise CheckpointError(msg) from None
    if not isinstance(content, dict):
        msg = f"{path}: the checkpoint's {what} is not a JSON object; restore it from a copy, or start a new --checkpoint_dir"
        raise CheckpointError(msg)
    return content


def _keep_private(root: str) -> None:
    """A local checkpoint directory must be this user's, and is made reachable by this user
    alone (0700): its files hold the stream's records."""
    local = commits.local_path(root)
    if local is None:
        return  # Hadoop's file systems: created 700 where they have permissions (README)
    found = os.stat(local)
    if hasattr(os, "geteuid") and found.st_uid != os.geteuid():
        msg = (
            f"--checkpoint_dir={root} belongs to another user (uid {found.st_uid}): whoever owns it can change "
            "what the stream reads back; use a checkpoint directory of your own"
        )
        raise CheckpointError(msg)
    if stat.S_IMODE(found.st_mode) & 0o077:
        os.chmod(local, 0o700)


def _numbered(directory: str, suffix: str) -> list[int]:
    numbers = []
    for name in commits.list_names(directory):
        stem = name[: -len(suffix)] if suffix and name.endswith(suffix) else (name if not suffix else None)
        if stem is not None and stem.isdigit():
            numbers.append(int(stem))
    return sorted(numbers)


class CheckpointStore:
    """Reads and writes one pipeline's checkpoint directory (see the module docs).

    ``key``: the checkpoint key (``checkpoint_key.load_key``), from ``key_path``; without
    one the store reads manifests and the journal only (what tests and tools inspect)."""

    def __init__(
        self, root: str, shape: list[str], *, keep: int = 2, key: bytes | None = None, key_path: str | None = None
    ) -> None:
        self.root = commits.absolute(root)
        self.shape = shape
        self.keep = keep
        self.key = key
        self.key_path = key_path
        self.journal_dir = commits.join(self.root, "journal")
        self.checkpoints_dir = commits.join(self.root, "checkpoints")
        self.identity_path = commits.join(self.root, IDENTITY)
        #: the checkpoint's identity (its "id" names it), once read or made
        self.identity: dict[str, Any] | None = None
        self._sealer: Sealer | None = None

    @classmethod
    def inspect(cls, root: str, key: bytes | None = None) -> CheckpointStore:
        """A store to look into an existing checkpoint directory, whatever pipeline wrote it
        (with ``key``, its sealed files open too); it writes nothing."""
        store = cls(root, [], key=key)
        identity = read_json(store.identity_path, "identity")
        store.shape = identity.get("shape") or []
        store.identity = store.read_identity()
        return store

    # -- identity --------------------------------------------------------------------------
    def read_identity(self) -> dict[str, Any] | None:
        """The directory's identity, checked against this pipeline and key; None if the
        directory holds none yet (refused if it holds anything else of its own)."""
        if not commits.exists(self.identity_path):
            present = [name for name in commits.list_names(self.root) if name != LEASE_DIR and not commits.is_temporary(name)]
            if present:
                found = ", ".join(sorted(present)[:5])
                msg = (
                    f"--checkpoint_dir={self.root} is not a sparkbeam checkpoint directory (it holds {found} "
                    f"and no {IDENTITY}); give an empty or new directory"
                )
                raise CheckpointError(msg)
            return None
        identity = read_json(self.identity_path, "identity")
        written = identity.get("format")
        if written in _UNSEALED_FORMATS:
            msg = (
                f"--checkpoint_dir={self.root} was written by an earlier sparkbeam whose checkpoints were not "
                f"authenticated ({written!r}): its pickled files cannot be checked before they are loaded. Finish "
                "that stream with the version that wrote it, or start a new checkpoint directory"
            )
            raise CheckpointError(msg)
        if written not in _READABLE_FORMATS or not isinstance(identity.get("id"), str):
            msg = f"--checkpoint_dir={self.root}: written by an incompatible version ({written!r}, expected {FORMAT!r})"
            raise CheckpointError(msg)
        if identity.get("shape") != self.shape:
            theirs = identity.get("shape")
            raise CheckpointError(self._shape_message(theirs if isinstance(theirs, list) else []))
        if self.key is not None and identity.get("key_id") != Sealer(self.key, "").key_id():
            msg = (
                f"--checkpoint_dir={self.root} is sealed with another checkpoint key (key id {identity.get('key_id')}) "
                f"than this run's, {self.key_path} (key id {Sealer(self.key, '').key_id()}): run with "
                "--checkpoint_key_file (or SPARKBEAM_CHECKPOINT_KEY_FILE) naming the key that wrote it, or start a new "
                "checkpoint directory"
            )
            raise CheckpointError(msg)
        return identity

    def claim(self) -> None:
        """Make the directory this pipeline's, or check that it is; refuse anything else.
        The directory and what sparkbeam makes in it are private to the user."""
        identity = self.read_identity()
        commits.makedirs(self.root, private=True)
        _keep_private(self.root)
        if identity is None:
            identity = {"format": FORMAT, "shape": self.shape, "id": uuid.uuid4().hex, "created": time.time()}
            if self.key is not None:
                identity["key_id"] = Sealer(self.key, "").key_id()
            commits.write_bytes(self.identity_path, _json_bytes(identity), private=True)
        elif identity.get("format") != FORMAT:
            identity = {**identity, "format": FORMAT}
            commits.write_bytes(self.identity_path, _json_bytes(identity), private=True)
        self.identity = identity
        commits.makedirs(self.journal_dir, private=True)
        commits.makedirs(self.checkpoints_dir, private=True)

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint's identity (after ``claim``): what its outputs are marked with."""
        if self.identity is None:
            msg = f"--checkpoint_dir={self.root}: its identity is known once a run has claimed it"
            raise CheckpointError(msg)
        return str(self.identity["id"])

    @property
    def sealer(self) -> Sealer:
        """Seals and opens this checkpoint's pickled files (after ``claim``, with a key)."""
        if self._sealer is None:
            if self.key is None or self.identity is None:
                msg = f"--checkpoint_dir={self.root}: its sealed files are read and written only by a run that claimed it with its key"
                raise CheckpointError(msg)
            self._sealer = Sealer(self.key, self.identity["id"])
        return self._sealer

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

    # -- sealed files --------------------------------------------------------------------
    def write_sealed(self, path: str, purpose: str, payload: bytes) -> None:
        commits.write_bytes(path, self.sealer.seal(purpose, payload), private=True)

    def read_sealed(self, path: str, purpose: str) -> memoryview:
        """A sealed file's payload, checked (``UnauthenticatedFileError`` names the file)."""
        return self.sealer.open(purpose, commits.read_bytes(path), where=path)

    # -- the step journal ----------------------------------------------------------------
    def write_journal(self, entry: dict[str, Any]) -> None:
        commits.write_bytes(commits.join(self.journal_dir, f"{entry['step']:010d}.json"), _json_bytes(entry), private=True)

    def journal_from(self, step: int) -> dict[int, dict[str, Any]]:
        """The journal's entries for steps >= ``step`` (steps to replay after a restore);
        they must follow each other from ``step`` (a gap would feed batches twice)."""
        entries: dict[int, dict[str, Any]] = {}
        for number in _numbered(self.journal_dir, ".json"):
            if number >= step:
                if number != step + len(entries):
                    msg = (
                        f"--checkpoint_dir={self.root}: the journal has no entry for step {step + len(entries)} "
                        f"but one for step {number}; the directory is damaged. Restore "
                        f"{commits.join(self.journal_dir, f'{step + len(entries):010d}.json')}, or start a new --checkpoint_dir"
                    )
                    raise CheckpointError(msg)
                entries[number] = read_json(commits.join(self.journal_dir, f"{number:010d}.json"), "journal entry")
        return entries

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint_path(self, step: int) -> str:
        return commits.join(self.checkpoints_dir, f"{step:010d}")

    def state_path(self, step: int, name: str) -> str:
        """A keyed stage's file (a base or a delta) written by the checkpoint of ``step``."""
        return commits.join(self.checkpoint_path(step), name)

    def chains(self, manifest: dict[str, Any]) -> dict[int, Chain]:
        """Each stage's chain of state files in ``manifest`` (none in format 5 and before)."""
        where = self.checkpoint_path(manifest["step"]) + ".json"
        found = manifest.get("chains") or {}
        if not isinstance(found, dict):
            found = {"?": None}  # refused below, naming the manifest
        try:
            stages = [(int(stage_id), content) for stage_id, content in found.items()]
        except ValueError:
            msg = f"{where}: a keyed stage's chain of state files is not one sparkbeam wrote; restore the manifest from a copy, or start a new --checkpoint_dir"
            raise StateFileError(msg) from None
        return {stage_id: Chain.from_json(content, where) for stage_id, content in stages}

    def begin(self, step: int) -> str:
        """A fresh hidden directory to write the checkpoint that resumes at ``step`` in;
        ``place`` puts it where it belongs. Written aside, because the keyed state being
        saved may read the files of a checkpoint of the same step (one rewritten marked
        finished, ``SparkBackend.read_back_state``)."""
        for name in commits.list_names(self.checkpoints_dir):
            if commits.is_temporary(name):  # left by an attempt cut short: one run writes here
                commits.remove(commits.join(self.checkpoints_dir, name), missing_ok=True)
        path = commits.temporary_beside(self.checkpoint_path(step))
        commits.makedirs(path, private=True)
        return path

    def place(self, step: int, written: str) -> str:
        """Put the directory ``begin`` gave, written, at the checkpoint's path (replacing an
        earlier attempt's); the path."""
        final = self.checkpoint_path(step)
        commits.commit_directory(written, final)
        return final

    def commit(self, step: int, manifest: dict[str, Any]) -> None:
        """Write the manifest: from now on the checkpoint exists. Then drop the old ones."""
        manifest = {**manifest, "step": step, "format": FORMAT}
        commits.write_bytes(self.checkpoint_path(step) + ".json", _json_bytes(manifest), private=True)

    def _scan(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Complete checkpoints, newest first, and what is wrong with each manifest that is
        there but cannot be used (unreadable, not JSON, its files missing)."""
        found, skipped = [], []
        for number in reversed(_numbered(self.checkpoints_dir, ".json")):
            path = self.checkpoint_path(number) + ".json"
            try:
                manifest = read_json(path, "manifest")
            except FileNotFoundError:
                continue  # pruned since it was listed
            except (OSError, CheckpointError) as error:
                skipped.append(f"{path}: {error}" if path not in str(error) else str(error))
                continue
            files = manifest.get("files")
            if not isinstance(files, list) or not isinstance(manifest.get("step"), int):
                skipped.append(f"{path}: not a manifest sparkbeam wrote (no step or files)")
                continue
            try:
                chains = self.chains(manifest)
            except StateFileError as error:
                skipped.append(str(error))
                continue
            # Looked up together: one round trip where each costs one (files through a server).
            own = [commits.join(self.checkpoint_path(number), str(name)) for name in files]
            older = [
                (f"{commits.join(self.checkpoint_path(at), name)} (stage {stage_id})", self.state_path(at, name))
                for stage_id, chain in chains.items()
                for at, name in chain.files[:-1]  # the last is this checkpoint's own, in files
            ]
            there = commits.exists_all([*own, *(path for _, path in older)])
            missing = [name for name, found in zip(files, there) if not found]
            missing += [shown for (shown, _), found in zip(older, there[len(own):]) if not found]
            if missing:
                skipped.append(f"{path}: its files {', '.join(map(str, missing))} are missing")
                continue
            found.append(manifest)
        return found, skipped

    def manifests(self) -> list[dict[str, Any]]:
        """Complete checkpoints, newest first."""
        return self._scan()[0]

    def newest(self) -> dict[str, Any] | None:
        manifests = self.manifests()
        return manifests[0] if manifests else None

    def restore_point(self, pauses: tuple[float, ...] = (0.5, 1.0, 2.0)) -> dict[str, Any] | None:
        """The checkpoint a restart resumes from: the newest complete one, its manifest read
        again after each of ``pauses`` (seconds) while one cannot be used (a file system's
        passing error). Never None while the journal says steps ran from a checkpoint: a
        run without one would start from empty state and feed old batches again."""
        found, skipped = self._scan()
        for pause in pauses:
            if not skipped:
                break
            time.sleep(pause)
            found, skipped = self._scan()
        journal = _numbered(self.journal_dir, ".json")
        if skipped and not found:
            msg = (
                f"--checkpoint_dir={self.root}: no checkpoint can be read, so the run stops rather than start "
                f"again from empty state: {'; '.join(skipped)}. Restore the files (or fix the file system) and run "
                "again, or start a new --checkpoint_dir"
            )
            raise CheckpointError(msg)
        if skipped:
            _LOG.warning(
                "--checkpoint_dir=%s: skipped checkpoint(s) that cannot be used (%s); resuming from the one of step %d",
                self.root, "; ".join(skipped), found[0]["step"],
            )
        if not found and journal and journal[0] > 0:
            msg = (
                f"--checkpoint_dir={self.root}: its journal starts at step {journal[0]} but no checkpoint resumes "
                "there (the checkpoints were removed); the run stops rather than start again from empty state. "
                "Restore the checkpoints, or start a new --checkpoint_dir"
            )
            raise CheckpointError(msg)
        return found[0] if found else None

    def prune(self, manifests: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """Keep the newest ``keep`` checkpoints and every state file their chains name (a
        base or delta of an older checkpoint stays while a kept manifest reads it); returns
        the oldest kept manifest. ``manifests``: ``manifests()`` as just read, if it was.
        The removals go in as few round trips as the file system groups them into
        (``commits.batched``: a Spark Connect server's files, one job each otherwise)."""
        with commits.batched(self.checkpoints_dir):
            return self._prune(self.manifests() if manifests is None else manifests)

    def _prune(self, manifests: list[dict[str, Any]]) -> dict[str, Any] | None:
        kept = manifests[: self.keep]
        if not kept:
            return None
        oldest = kept[-1]["step"]
        needed: dict[int, set[str]] = {}
        for manifest in kept:
            for chain in self.chains(manifest).values():
                for at, name in chain.files:
                    needed.setdefault(at, set()).add(name)
        for number in _numbered(self.checkpoints_dir, ".json"):
            if number < oldest:
                commits.remove(self.checkpoint_path(number) + ".json", missing_ok=True)
        for name in commits.list_names(self.checkpoints_dir):
            stem = name.split(".")[0]
            path = commits.join(self.checkpoints_dir, name)
            if not (stem.isdigit() and int(stem) < oldest and commits.is_directory(path)):
                continue
            keep = needed.get(int(stem)) if name == stem else None
            if not keep:
                commits.remove(path, missing_ok=True)
                continue
            for inner in commits.list_names(path):  # its loop file and unread state go
                if inner not in keep:
                    commits.remove(commits.join(path, inner), missing_ok=True)
        for number in _numbered(self.journal_dir, ".json"):
            if number < oldest:
                commits.remove(commits.join(self.journal_dir, f"{number:010d}.json"), missing_ok=True)
        return kept[-1]
