"""A stream's file outputs belong to its checkpoint: no other run overwrites or deletes them.

A stream writes each step's output to ``prefix-step-NNNNNNNN/`` (``sinks.py``) and a step
replayed after a restart replaces its folder, which is how output stays exactly-once. A new
run (a new ``--checkpoint_dir``, or none) counts steps from 0 again, so without a check it
would replace an earlier run's committed folders, and its empty steps would delete them.

So each file sink's prefix is marked with the identity of the checkpoint that writes it,
in a hidden file beside the folders::

    /out/.scores.sparkbeam-owner.json   {"checkpoint_id": ..., "checkpoint_dir": ..., "prefix": ...}

and a run that finds step folders under a prefix it does not own refuses, naming them and
the two ways on: a new prefix, or ``--overwrite_output``, which deletes them first (and
says so). The check runs before Spark starts where it can, and again under the
checkpoint's lease before the first step, when the marks are written. A prefix with a
mark of another checkpoint but no step folders has nothing to lose and is taken over.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import Op
from sparkbeam.runners.core.plan.plan import StagePlan
from sparkbeam.runners.spark import sinks

__all__ = ["check_outputs", "claim_outputs", "owner_mark"]

_LOG = logging.getLogger(__name__)


def owner_mark(prefix: str) -> str:
    """The hidden file that names the checkpoint owning ``prefix``'s step folders."""
    directory, base = os.path.split(prefix)
    # Not named .sparkbeam-...: those are leftovers of interrupted writes (commits.py)
    return os.path.join(directory, f".{base}.sparkbeam-owner.json")


def _step_folders(prefix: str) -> list[str]:
    directory, base = os.path.split(prefix)
    pattern = re.compile(rf"{re.escape(base)}-step-\d{{8,}}")
    return sorted(name for name in commits.list_names(directory) if pattern.fullmatch(name))


def _mark(prefix: str) -> dict[str, Any] | None:
    """The prefix's mark; None if there is none. One that is not a mark sparkbeam wrote
    counts as another run's (an empty dict)."""
    path = owner_mark(prefix)
    try:
        found = json.loads(commits.read_bytes(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _sink_prefixes(plan: StagePlan) -> list[tuple[Op, str]]:
    return [(op, sinks.step_prefix(op)) for stage in plan.stages for op in stage.sinks if sinks.writes_files(op)]


def _foreign(
    prefix: str, checkpoint_id: str | None, checkpoint_dir: str | None, identity_pending: bool
) -> tuple[list[str], dict[str, Any] | None]:
    """The step folders under ``prefix`` this checkpoint did not write (all of them unless
    the prefix's mark is this checkpoint's), and the mark. ``identity_pending``: the
    checkpoint's identity cannot be read yet (it is on a cluster file system and Spark is
    not up), so a mark naming ``checkpoint_dir`` counts as ours until the run checks it."""
    folders = _step_folders(prefix)
    mark = _mark(prefix)
    if not folders or mark is None:
        return folders, mark
    if checkpoint_id is not None and mark.get("checkpoint_id") == checkpoint_id:
        return [], mark
    if identity_pending and checkpoint_dir is not None and mark.get("checkpoint_dir") == checkpoint_dir:
        return [], mark
    return folders, mark


def _refusal(op: Op, prefix: str, folders: list[str], mark: dict[str, Any] | None, checkpoint_dir: str | None) -> TransformError:
    shown = ", ".join(folders[:3]) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
    if mark and isinstance(mark.get("checkpoint_dir"), str):
        whose = f"written by the stream of --checkpoint_dir={mark['checkpoint_dir']}"
    elif mark and "checkpoint_id" in mark:
        whose = "written by an earlier run without --checkpoint_dir"
    else:
        whose = "not written by this stream"
    this = f"--checkpoint_dir={checkpoint_dir}" if checkpoint_dir is not None else "a new temporary checkpoint"
    msg = (
        f"'{op.label}' (applied at {op.location}): {os.path.dirname(prefix) or '.'} already holds step folders "
        f"{shown} ({whose}); this run ({this}) counts its steps from its own checkpoint and would overwrite or "
        "delete them. Write to a new output prefix, or pass --overwrite_output to delete them first"
    )
    return TransformError(msg)


def check_outputs(
    plan: StagePlan,
    checkpoint_id: str | None,
    checkpoint_dir: str | None,
    *,
    overwrite: bool,
    identity_pending: bool = False,
    local_only: bool = False,
) -> None:
    """Refuse step folders the checkpoint ``checkpoint_id`` (None: a new one) in
    ``checkpoint_dir`` (None: a temporary one) did not write, unless ``overwrite``.
    ``local_only``: before Spark starts, prefixes on cluster file systems are left for the
    check under the lease (``claim_outputs``)."""
    if overwrite:
        return
    for op, prefix in _sink_prefixes(plan):
        if local_only and commits.local_path(prefix) is None:
            continue  # on a cluster file system: checked under the lease once Spark is up
        folders, mark = _foreign(prefix, checkpoint_id, checkpoint_dir, identity_pending)
        if folders:
            raise _refusal(op, prefix, folders, mark, checkpoint_dir)


def claim_outputs(plan: StagePlan, checkpoint_id: str, checkpoint_dir: str | None, *, overwrite: bool) -> None:
    """Mark every file sink's prefix as this checkpoint's, before its first step; with
    ``overwrite``, first delete the step folders (and their leftovers) it did not write.
    ``checkpoint_dir`` None: a run's temporary checkpoint, which no later run resumes."""
    check_outputs(plan, checkpoint_id, checkpoint_dir, overwrite=overwrite)
    for op, prefix in _sink_prefixes(plan):
        folders, mark = _foreign(prefix, checkpoint_id, checkpoint_dir, False)
        if folders:
            for name in folders:
                commits.remove(os.path.join(os.path.dirname(prefix), name))
            removed = sinks.remove_leftovers(op)
            _LOG.warning(
                "%s: --overwrite_output deleted %d step folder(s) of another run under %s (and %d temporary folder(s))",
                op.label, len(folders), prefix, len(removed),
            )
        if mark is None or mark.get("checkpoint_id") != checkpoint_id:
            commits.makedirs(os.path.dirname(prefix) or ".")
            content = {"checkpoint_id": checkpoint_id, "checkpoint_dir": checkpoint_dir, "prefix": prefix}
            commits.write_bytes(owner_mark(prefix), json.dumps(content, indent=1).encode())
