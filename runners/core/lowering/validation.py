"""Mistakes found before Spark starts, naming the transform and its line.

Spark takes seconds to start and a pipeline minutes to run; these mistakes would otherwise
surface only then (a missing input when its stage runs, an unwritable output after every
stage ran):

- a bounded read whose path or glob matches no file (``ReadFromText`` unless
  ``validate=False``, and the CSV, JSON and Parquet reads, as they would fail at run time);
- a file write whose directory cannot be created or written: the runner creates it (and
  writes a probe file in it) now, then removes what it created.

Paths on other file systems (``hdfs://``, ``s3a://``) are left to the run: only Spark can
reach them. The driver checks what it sees, as it does for checkpoints.
"""

from __future__ import annotations

import glob
import os
import uuid
from typing import Any

from sparkbeam.io.filebased import ReadMatchingFiles
from sparkbeam.io.fileio import WriteToFiles
from sparkbeam.io.filesystems import match_files
from sparkbeam.io.filewrites import WriteShardedFiles
from sparkbeam.io.textio import ReadFromText, WriteToText

__all__ = ["check_inputs_and_outputs"]


def check_inputs_and_outputs(pipeline: Any) -> None:
    """Raise for the first bounded read that matches no file, or file write that cannot
    write where it is told to."""
    for node in pipeline.transforms():
        transform = node.transform
        if isinstance(transform, ReadFromText):
            _check_input(node, transform.file_pattern, allow_empty=not transform.validate)
        elif isinstance(transform, ReadMatchingFiles) and transform.pattern is not None:
            allow_empty = transform.allow_empty and glob.has_magic(transform.pattern)
            _check_input(_user_node(node), transform.pattern, allow_empty=allow_empty)
        elif isinstance(transform, WriteToText):
            _check_output(node, transform.file_path_prefix)
        elif isinstance(transform, WriteShardedFiles):
            _check_output(_user_node(node), transform.prefix)
        elif isinstance(transform, WriteToFiles) and _local(transform.path) is None and not node.inputs[0].is_bounded:
            # In a stream its DoFns write and rename with Python on the executors, which
            # reach no Hadoop-served file system (bounded input goes through the driver).
            msg = (
                f"'{node.full_label}' (applied at {node.location}): WriteToFiles in a stream writes {transform.path!r} "
                "with Python on the executors, which cannot reach that file system; write to a local path or a shared "
                "mount, or use WriteToText/WriteToCsv/WriteToJson/WriteToParquet, which write a folder per step on "
                "s3a:// and hdfs:// URLs"
            )
            raise ValueError(msg)


def _user_node(node: Any) -> Any:
    """The transform the user applied (``ReadFromCsv``) for one it expands into."""
    parent = node.parent
    return parent if parent is not None and parent.full_label else node


def _local(path: str) -> str | None:
    """A local path, or None for a path on another file system."""
    if "://" not in path:
        return path
    return path.removeprefix("file://") if path.startswith("file://") else None


def _check_input(node: Any, pattern: str, *, allow_empty: bool) -> None:
    local = _local(pattern)
    if local is None or allow_empty or match_files(local):
        return
    msg = f"'{node.full_label}' (applied at {node.location}): no files match {pattern!r}"
    if not glob.has_magic(local) and os.path.isdir(local):
        msg += f" ({local} is a directory: read its files with {os.path.join(pattern, '*')!r})"
    raise FileNotFoundError(msg)


def _check_output(node: Any, prefix: str) -> None:
    local = _local(prefix)
    if local is None:
        return
    directory = os.path.dirname(os.path.abspath(local))
    created: list[str] = []
    try:
        missing = []
        existing = directory
        while not os.path.exists(existing):
            missing.append(existing)
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            msg = f"{existing} is a file, not a directory"
            raise NotADirectoryError(msg)
        for folder in reversed(missing):
            os.mkdir(folder)
            created.append(folder)
        probe = os.path.join(directory, f".sparkbeam-probe-{uuid.uuid4().hex}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        reason = error.strerror or str(error)
        if error.filename:
            reason += f": {error.filename}"
        msg = (
            f"'{node.full_label}' (applied at {node.location}) cannot write {prefix!r} ({reason}); "
            "choose an output in a directory that this user can create and write"
        )
        raise type(error)(msg) from None
    finally:
        for folder in reversed(created):
            try:
                os.rmdir(folder)
            except OSError:
                break
