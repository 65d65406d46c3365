"""Writing files from the SDK's primitives (Beam's WriteFiles pattern)::

    ParDo(write one temporary shard per bundle, or per key after GroupByKey for num_shards)
      | GroupByKey onto one key | ParDo(rename every temporary shard to its final name)

Files are written by Python on the executors, so paths must be local or on a file system
that every executor mounts at the same path; a URL of another file system (``s3a://``,
``hdfs://``) is handed to the runner as a ``WriteFilesPerStep`` in Beam's flat layout,
which sparkbeam's Spark runner writes through its driver. Writes are atomic: shards go to a hidden
``.sparkbeam-temp-*`` directory beside the output and are renamed to their final names only
once every shard is written, so a failed run leaves nothing under the final names (the
hidden directory may remain after a failure, as Beam's temp directories do). Unbounded
input is written once per step instead, a committed directory per step
(``sparkbeam.io.stepfiles``); bounded input is written as above, in any run. Reading is in
``filebased.py``.
"""

from __future__ import annotations

import contextlib
import os
import random
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.core import DoFn, FlatMap, Flatten, GroupByKey, Impulse, Map, ParDo, WindowInto
from sparkbeam.io import commits
from sparkbeam.io._file_sinks import (
    DEFAULT_SHARD_NAME_TEMPLATE,
    FileSink,
    check_shard_name_template,
    shard_file_name,
)
from sparkbeam.io.filesystem import output_prefix
from sparkbeam.io.stepfiles import StepFiles, WriteFilesPerStep
from sparkbeam.ptransform import PTransform
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import GlobalWindow, GlobalWindows

__all__ = ["DEFAULT_SHARD_NAME_TEMPLATE", "FileSink", "WriteShardedFiles", "check_shard_name_template", "shard_file_name"]

@attrs.frozen
class _Written:
    """A finished temporary shard: its path, its shard number (fixed sharding) and size."""

    temp_path: str
    shard: int | None
    records: int


_GATHER_KEY = "sparkbeam-written-files"
_WRITE_STARTED = "sparkbeam-write-started"


class _WriteBundles(DoFn):
    """Writes each bundle's elements to a new temporary file; reports it at bundle end."""

    def __init__(self, sink: FileSink, temp_dir: str) -> None:
        self.sink = sink
        self.temp_dir = temp_dir

    def default_label(self) -> str:
        return "WriteBundles"

    def start_bundle(self) -> None:
        self.writer: Any = None
        self.path = ""
        self.records = 0

    def process(self, element: Any) -> None:
        if self.writer is None:
            os.makedirs(self.temp_dir, exist_ok=True)
            self.path = os.path.join(self.temp_dir, uuid.uuid4().hex)
            self.writer = self.sink.open(self.path)
        self.writer.write(element)
        self.records += 1

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self.writer is None:
            return
        self.writer.close()
        self.writer = None
        window = GlobalWindow()
        written = _Written(self.path, None, self.records)
        yield WindowedValue(written, window.max_timestamp().micros, (window,))

    def teardown(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:  # a failed bundle: release the handle, keep nothing
            # The bundle already failed: its own error is the one to report.
            with contextlib.suppress(Exception):
                writer.close()


class _RoundRobinShards(DoFn):
    """Keys elements by shard number, round-robin from a random start (as Beam does)."""

    def __init__(self, num_shards: int) -> None:
        self.num_shards = num_shards

    def start_bundle(self) -> None:
        self.next_shard = random.randrange(self.num_shards)

    def process(self, element: Any) -> Iterator[tuple[int, Any]]:
        yield self.next_shard, element
        self.next_shard = (self.next_shard + 1) % self.num_shards


class _WriteKeyedShards(DoFn):
    """Writes one grouped shard ``(shard, elements)`` to a temporary file."""

    def __init__(self, sink: FileSink, temp_dir: str) -> None:
        self.sink = sink
        self.temp_dir = temp_dir

    def default_label(self) -> str:
        return "WriteShards"

    def process(self, keyed: tuple[int, Iterable[Any]]) -> Iterator[_Written]:
        shard, elements = keyed
        os.makedirs(self.temp_dir, exist_ok=True)
        path = os.path.join(self.temp_dir, uuid.uuid4().hex)
        writer = self.sink.open(path)
        records = 0
        try:
            for element in elements:
                writer.write(element)
                records += 1
        finally:
            writer.close()
        yield _Written(path, shard, records)


def _constant(unused: Any, value: Any) -> Any:
    return value


def _under_one_key(value: Any) -> tuple[str, Any]:
    return _GATHER_KEY, value


class _Finalize:
    """Renames every temporary shard to its final name, then removes the temporary directory.

    Idempotent: a retried finalize skips shards already renamed.
    """

    def __init__(self, sink: FileSink, prefix: str, template: str, suffix: str, num_shards: int, min_shards: int, temp_dir: str) -> None:
        self.sink = sink
        self.prefix = prefix
        self.template = template
        self.suffix = suffix
        self.num_shards = num_shards
        self.min_shards = min_shards
        self.temp_dir = temp_dir

    def __call__(self, keyed: tuple[str, Iterable[Any]]) -> list[str]:
        written = [item for item in keyed[1] if isinstance(item, _Written)]
        if self.num_shards:
            by_shard = {item.shard: item for item in written if item.shard is not None}
            total = self.num_shards
            wanted = range(total) if self.min_shards else sorted(by_shard)
            shards: list[tuple[int, _Written | None]] = [(shard, by_shard.get(shard)) for shard in wanted]
        else:
            total = max(len(written), self.min_shards)
            ordered = sorted(written, key=lambda item: item.temp_path)
            shards = [(shard, ordered[shard] if shard < len(ordered) else None) for shard in range(total)]
        finals = []
        for shard, item in shards:
            final = shard_file_name(self.prefix, self.template, self.suffix, shard, total)
            if item is None:  # pad with empty shards, as Beam's file sinks do
                os.makedirs(self.temp_dir, exist_ok=True)
                temp_path = os.path.join(self.temp_dir, uuid.uuid4().hex)
                self.sink.open(temp_path).close()
            else:
                temp_path = item.temp_path
            if os.path.exists(temp_path):
                os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
                commits.commit(temp_path, final)
            elif not os.path.exists(final):
                msg = f"the temporary shard {temp_path} for {final} has disappeared; was the temporary directory removed while the pipeline ran?"
                raise FileNotFoundError(msg)
            finals.append(final)
        commits.remove(self.temp_dir, missing_ok=True)  # made only where a bundle or a padding shard was written
        return finals


class WriteShardedFiles(PTransform):
    """Writes a PCollection to shards ``prefix + template + suffix``, atomically.

    ``num_shards=0`` writes one shard per bundle (the runner's partitions); a positive
    number spreads elements round-robin over that many shards through a GroupByKey. An
    empty template ('') writes exactly one file named ``prefix + suffix``. ``min_shards``
    shards are written even for empty input (Beam's file sinks write one empty shard; its
    ``fileio`` writes none). The output is the PCollection of the final file names.

    Unbounded input (a streaming run) is written step by step instead, each step with
    elements to a directory of its own, committed atomically and replaced if the step is
    run again: ``prefix-step-00000042/basename(prefix)-00000-of-00002 suffix`` (see
    ``sparkbeam.io.stepfiles``). Steps with no elements write nothing (``min_shards`` does
    not apply) and the output PCollection stays empty. Bounded input is written as above.
    """

    def __init__(
        self,
        sink: FileSink,
        *,
        owner: str,
        file_path_prefix: str,
        file_name_suffix: str = "",
        num_shards: int = 0,
        shard_name_template: str | None = None,
        min_shards: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(file_path_prefix, str) or not file_path_prefix:
            msg = f"{owner}: the output path must be a non-empty string, got {file_path_prefix!r}"
            raise ValueError(msg)
        if not isinstance(num_shards, int) or isinstance(num_shards, bool) or num_shards < 0:
            msg = f"{owner}: num_shards must be a non-negative integer (0 lets the runner choose), got {num_shards!r}"
            raise ValueError(msg)
        self.template = check_shard_name_template(owner, shard_name_template)
        self.sink = sink
        self.owner = owner
        self.prefix = output_prefix(owner, file_path_prefix)
        self.suffix = file_name_suffix or ""
        self.num_shards = 1 if self.template == "" else num_shards
        self.min_shards = min_shards

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        if not isinstance(pcoll, pvalue.PCollection):
            msg = f"{self.owner} writes a PCollection, not {pcoll!r}"
            raise TypeError(msg)
        if not pcoll.is_bounded or "://" in self.prefix:
            if pcoll.is_bounded:
                # A URL (s3a://, hdfs://...) the executors' Python cannot open: the runner
                # writes the shards through its driver, in this layout.
                files = StepFiles(self.sink, self.prefix, self.template, self.suffix, self.num_shards, flat=True, min_shards=self.min_shards)
                return pcoll | "WriteThroughDriver" >> WriteFilesPerStep(files)
            files = StepFiles(self.sink, self.prefix, self.template, self.suffix, self.num_shards)
            return pcoll | "WriteEachStep" >> WriteFilesPerStep(files)
        temp_dir = commits.temporary_beside(self.prefix)
        in_global = pcoll | "InGlobalWindow" >> WindowInto(GlobalWindows())
        if self.num_shards:
            written = (
                in_global
                | "AssignShards" >> ParDo(_RoundRobinShards(self.num_shards))
                | "GroupShards" >> GroupByKey()
                | "WriteShards" >> ParDo(_WriteKeyedShards(self.sink, temp_dir))
            )
        else:
            written = in_global | "WriteBundles" >> ParDo(_WriteBundles(self.sink, temp_dir))
        # One element even for empty input, so the finalize step always runs.
        started = pcoll.pipeline | "Started" >> Impulse() | "MarkStarted" >> Map(_constant, _WRITE_STARTED)
        finalize = _Finalize(
            self.sink, self.prefix, self.template, self.suffix, self.num_shards, self.min_shards, temp_dir
        )
        return (
            (written, started)
            | "Gather" >> Flatten()
            | "OneKey" >> Map(_under_one_key)
            | "GatherWritten" >> GroupByKey()
            | "Finalize" >> FlatMap(finalize)
        )
