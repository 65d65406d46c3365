"""Incremental checkpoints of keyed state: a base, then deltas of the buckets written since.

A keyed stage's state is a list of ``StateBucket`` records per partition, each marked with
the step that wrote it (``StateBucket.version``, ``keyed_buckets.py``). A checkpoint writes,
for each stage, one directory of part files (one per partition, sealed as ``sealed_files``
seals them), either

- a **base**: every record of every partition, or
- a **delta**: per partition, only the buckets written since the stage's previous
  checkpoint (``version >= since``, the step that checkpoint resumed at).

Each part file starts with a marker record, ``("sparkbeam-state-part", (kind, partition))``,
naming its kind (``full`` or ``delta``) and the partition it was written from. The stage's **chain** (in the manifest: ``[[step, name], ...]``, the base first)
says which files make the state: a partition's state is its base's records with each
delta applied in order, a delta's bucket replacing every bucket whose hash range overlaps
it. That is exact because a step that drops a bucket (a split, a merge of empty siblings)
writes the new buckets covering its range, and those are newer than any checkpoint.

A partition whose state holds anything other than buckets (per-key state restored from an
older format, elements waiting for side inputs), or nothing at all, is written ``full`` even
in a delta: it replaces the partition's state whole.

**Compaction** (``needs_base``): a stage's next checkpoint is a base when the deltas since
its base hold more than ``DELTA_FRACTION`` of the base's bytes, or after ``MAX_DELTAS``
deltas. The fraction bounds what restoring (and cutting the lineage) reads, ``1 +
DELTA_FRACTION`` times the base's bytes, and makes a busy stage write, amortised, at most
``1 + 1 / DELTA_FRACTION`` bytes per byte of delta; the count bounds the files (and tasks)
a read-back runs per partition, at the price of a base every ``MAX_DELTAS`` checkpoints
for a large state whose steps touch little. A checkpoint written again at the step of the
chain's last file (a run marked finished) is a base too, since it replaces that file's
directory.

Bytes are counted on the executors (an accumulator: a retried task counts twice, which only
brings a compaction forward).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.core.grouping.records import StateBucket, StateIndex, Summary
from sparkbeam.runners.spark import sealed_files
from sparkbeam.runners.spark.sealing import Sealer, UnauthenticatedFileError

__all__ = [
    "DELTA_FRACTION",
    "MAX_DELTAS",
    "PORTABLE_HASH",
    "Chain",
    "StateFileError",
    "checked_part",
    "merge_partition",
    "merge_pieces",
    "needs_base",
    "opened_part",
    "part_paths",
    "part_records",
    "read_chain",
    "write_state",
]

#: compact once the deltas since the base outweigh this fraction of it
DELTA_FRACTION = 0.5
#: ... or once this many deltas follow it
MAX_DELTAS = 16

#: how a chain's partitions were placed when no chain says: partition ``portable_hash(key) %
#: n``, a classic session's (a Spark Connect run's differ: ``Chain.placement``)
PORTABLE_HASH = "portable_hash"

_MARK = "sparkbeam-state-part"
FULL = "full"
DELTA = "delta"


class StateFileError(OSError):
    """A file of a keyed stage's checkpointed state is missing or not what was written."""


class Chain:
    """What makes one stage's checkpointed state: ``files``, ``(step, name)`` of its base
    and deltas in order, the partitions they were written with, and the bytes of the base
    and of the deltas since (for compaction). ``placement`` names which keys a partition
    holds (``PORTABLE_HASH``, or a Spark Connect run's own): a run that places keys
    otherwise reads the state back key by key."""

    def __init__(
        self, files: list[tuple[int, str]], partitions: int, base_bytes: int, delta_bytes: int, placement: str = PORTABLE_HASH
    ) -> None:
        self.files = files
        self.partitions = partitions
        self.base_bytes = base_bytes
        self.delta_bytes = delta_bytes
        self.placement = placement

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [[step, name] for step, name in self.files],
            "partitions": self.partitions,
            "base_bytes": self.base_bytes,
            "delta_bytes": self.delta_bytes,
            "placement": self.placement,
        }

    @classmethod
    def from_json(cls, content: Any, where: str) -> Chain:
        """A chain from a manifest (data, checked: refused naming ``where``)."""
        try:
            files = [(int(step), str(name)) for step, name in content["files"]]
            placement = str(content.get("placement", PORTABLE_HASH))
            chain = cls(files, int(content["partitions"]), int(content["base_bytes"]), int(content["delta_bytes"]), placement)
        except (AttributeError, KeyError, TypeError, ValueError):
            chain = None
        if chain is None or not chain.files or chain.partitions < 1 or any("/" in name or name.startswith(".") for _, name in files):
            msg = f"{where}: a keyed stage's chain of state files is not one sparkbeam wrote; restore the manifest from a copy, or start a new --checkpoint_dir"
            raise StateFileError(msg)
        return chain


def needs_base(chain: Chain | None, step: int, partitions: int) -> bool:
    """Whether the stage's checkpoint at ``step`` writes a base (see the module docs)."""
    if chain is None or chain.partitions != partitions or chain.files[-1][0] >= step:
        return True
    return len(chain.files) > MAX_DELTAS or chain.delta_bytes > DELTA_FRACTION * max(chain.base_bytes, 1)


def _record_bytes(record: Any) -> int:
    kind = type(record)
    if kind is StateBucket:
        return len(record.payload) + 64  # the header's few fields
    return 64  # per-key state or a parked element: a rough count is enough for compaction


def part_records(since: int | None, counter: Any, index: int, records: Iterable[tuple[Any, Any]]) -> Iterator[Any]:
    """One partition's part file: its marker, then every record (a base, or a partition
    holding anything but buckets) or the buckets of versions ``>= since``; the bytes
    written go to ``counter.add`` (an accumulator, or a Spark Connect task's tally)."""
    # A partition's StateIndex is derived from its buckets' headers when they are restored
    # (``timer_index.py``): never written, so the format does not change with it.
    # The step's summary comes along when the state is the step's records as they are
    # (``keyed_stages.state_of``): not state either.
    held = [pair for pair in records if type(pair[1]) is not StateIndex and type(pair[1]) is not Summary]
    # A partition of buckets always holds one at least (``BucketedPartition.run``): one
    # with none holds other state, which may have emptied since (parked elements released).
    full = since is None or not held or any(type(record) is not StateBucket for _, record in held)
    yield _MARK, (FULL if full else DELTA, index)
    written = 0
    for pair in held:
        if full or pair[1].version >= since:
            written += _record_bytes(pair[1])
            yield pair
    counter.add(written)


def write_state(sc: Any, state: Any, path: str, sealer: Sealer, since: int | None) -> int:
    """Write a stage's state under ``path``: a base (``since`` None) or the delta of the
    buckets written at steps ``>= since``; about how many bytes of state it holds."""
    counter = sc.accumulator(0)
    sealed_files.save_records(state.mapPartitionsWithIndex(functools.partial(part_records, since, counter)), path, sealer, "state")
    return int(counter.value)


def part_paths(directory: str, partitions: int, stage_id: int) -> list[str]:
    """The part files of one file of a chain, one per partition; a missing one refused
    naming the stage, the partition and the file."""
    present = set(commits.list_names(directory)) if commits.is_directory(directory) else set()
    paths = []
    for index in range(partitions):
        name = f"part-{index:05d}"
        path = commits.join(directory, name)
        if name not in present:
            msg = (
                f"{path}: the checkpointed state of stage {stage_id}, partition {index}, is missing; the state cannot "
                "be restored without it (and is never replaced by empty state). Restore the file from a copy, or "
                "start a new --checkpoint_dir"
            )
            raise StateFileError(msg)
        paths.append(path)
    return paths


def opened_part(sealer: Sealer, path: str, stage_id: int, index: int, position: int, lines: Iterable[bytes]) -> Iterator[tuple[int, tuple[int, Any]]]:
    """A part file's records, checked before they are unpickled, tagged with the partition
    and the chain position they belong to; a piece that fails names the stage and partition."""
    try:
        for record in sealed_files.opened(sealer, "state", path, lines):
            yield index, (position, record)
    except UnauthenticatedFileError as error:
        raise UnauthenticatedFileError(_refused(error, stage_id, index)) from None


def read_chain(sc: Any, stage_id: int, directories: list[str], sealer: Sealer, partition_fn: Any, partitions: int) -> Any:
    """The state a chain of directories (base first) makes: an RDD partitioned by
    ``partition_fn`` as the state was, each partition's files applied in order
    (``merge_partition``). Only what each partition wrote is read into it.

    One Python pass reads the files: each task checks the pieces of its part of a file and
    keys them, still pickled, for the shuffle that takes them to the partition they were
    written from (``checked_part``, and PySpark's ``partitionBy`` in the same worker); the
    merge unpickles them (``merge_pieces``). Read file by file and united before the
    shuffle, the records went through a Python worker of their own only to be keyed: every
    record unpickled and pickled twice more than here."""
    paths: list[list[str]] = []
    files = []
    place: list[tuple[int, int]] = []  # (position, partition) of each task's part of a file
    for position, directory in enumerate(directories):
        parts = part_paths(directory, partitions, stage_id)
        paths.append(parts)
        for index, path in enumerate(parts):
            # One task per part file up to a block's size (the default of two would split even
            # a small file, doubling the tasks of the step that reads the state back).
            lines = sc.textFile(path, minPartitions=1, use_unicode=False)
            files.append(lines)
            place.extend([(position, index)] * lines.getNumPartitions())
    # A union's partitions are its parents', in order: which file each task reads.
    united = files[0] if len(files) == 1 else sc.union(files)
    if united.getNumPartitions() != len(place):
        msg = f"stage {stage_id}: Spark split the checkpointed state's files into other tasks than it said; this is a sparkbeam bug"
        raise RuntimeError(msg)
    pieces = united.mapPartitionsWithIndex(functools.partial(checked_part, sealer, stage_id, paths, place))
    # Keyed by the partition it came from: portable_hash(i) % n is i for i < n, and the
    # same partition function makes the next step's union partition by partition.
    placed = pieces.partitionBy(partitions, partition_fn)
    return placed.mapPartitionsWithIndex(functools.partial(merge_pieces, stage_id, paths), preservesPartitioning=True)


def checked_part(
    sealer: Sealer, stage_id: int, paths: list[list[str]], place: list[tuple[int, int]], task: int, lines: Iterable[bytes]
) -> Iterator[tuple[int, tuple[int, bytes]]]:
    """A task's part of a part file (``place[task]``: its chain position and partition):
    its pieces checked, not unpickled, tagged with the partition and the position; a piece
    that fails names the stage, the partition and the file.

    A task may hold what it read until PySpark's shuffle writes a batch (its first holds
    ten pieces per partition): at most its part of one partition's file, less than the
    merge of that partition holds."""
    position, index = place[task]
    path = paths[position][index]
    try:
        for payload in sealed_files.checked_pieces(sealer, "state", path, lines):
            yield index, (position, bytes(payload))
    except UnauthenticatedFileError as error:
        raise UnauthenticatedFileError(_refused(error, stage_id, index)) from None


def merge_pieces(stage_id: int, paths: list[list[str]], index: int, pieces: Iterable[tuple[int, tuple[int, bytes]]]) -> Iterator[Any]:
    """``merge_partition`` of the checked pieces ``checked_part`` tagged, unpickled here."""
    records = ((written_to, (position, record)) for written_to, (position, payload) in pieces for record in sealed_files.unpickled(payload))
    return merge_partition(stage_id, paths, index, records)


def _refused(error: UnauthenticatedFileError, stage_id: int, index: int) -> str:
    return f"{error} (the checkpointed state of stage {stage_id}, partition {index}: never restored as empty state)"


def merge_partition(stage_id: int, paths: list[list[str]], index: int, records: Iterable[tuple[int, tuple[int, Any]]]) -> Iterator[Any]:
    """A partition's state from its files' records ``(partition, (position, record))``: the
    base's records, then each delta's buckets replacing those they overlap."""
    layers: dict[int, list[Any]] = {}
    kinds: dict[int, str] = {}
    for _, (position, record) in records:
        if record[0] == _MARK and type(record[1]) is tuple:  # no state record holds a plain tuple
            kind, written_from = record[1]
            if written_from != index:
                msg = f"{paths[position][index]}: holds the state of partition {written_from} of stage {stage_id} where partition {index} was expected; the checkpoint directory was changed"
                raise StateFileError(msg)
            kinds[position] = kind
            continue
        layers.setdefault(position, []).append(record)
    for position in range(len(paths)):
        if position not in kinds:
            msg = (
                f"{paths[position][index]}: the checkpointed state of stage {stage_id}, partition {index}, is cut short "
                "(no header); the state cannot be restored without it. Restore the file from a copy, or start a new --checkpoint_dir"
            )
            raise StateFileError(msg)
    state: dict[tuple[int, int], Any] = {}
    others: list[Any] = []
    for position in range(len(paths)):
        found = layers.get(position, [])
        if kinds[position] == FULL or position == 0:
            state = {}
            others = []
            for record in found:
                if type(record[1]) is StateBucket:
                    state[(record[1].depth, record[1].prefix)] = record
                else:
                    others.append(record)
            continue
        newer = [record[1] for record in found]
        if not newer:
            continue
        # A delta's buckets are prefix-free; each replaces the buckets its range overlaps:
        # those it splits (their ranges are its ancestors') and those merged into it
        # (its range is one of theirs' ancestors).
        ranges = {(bucket.depth, bucket.prefix) for bucket in newer}
        split = {(depth, bucket.prefix & ((1 << depth) - 1)) for bucket in newer for depth in range(bucket.depth)}
        for where in list(state):
            depth, prefix = where
            if where in ranges or where in split or any((d, prefix & ((1 << d) - 1)) in ranges for d in range(depth)):
                del state[where]
        for record in found:
            state[(record[1].depth, record[1].prefix)] = record
    yield from others
    yield from state.values()
