"""A Spark Connect stream's keyed state in its checkpoints: the classic format, written on the server.

A checkpoint of a classic run writes each keyed stage's state as a directory of sealed
part files, one per partition, a base or a delta (``state_checkpoints.py``). Here the same
files are written by the server's tasks from the state rows (``keyed_steps.STATE``), one
``mapInArrow`` task per partition of the stage's last step, with the classic functions
(``state_checkpoints.part_records`` and ``sealed_files.sealed_lines``): the same markers,
deltas and sealing. So the checkpoint directory's manifests, chains, compaction and pruning
are ``CheckpointStore``'s, unchanged.

What differs is which keys a partition holds. A classic run's partition *i* holds the keys
with ``portable_hash(key) % n == i``; a Connect run's holds those whose hash Spark's
``repartition(n, "h")`` sends to *i* (Murmur3 of ``h``), so its chains are marked with
``PLACEMENT``. A classic run resuming from them places every key again (``SparkBackend.restore``);
a Connect run does not read a classic run's chains (refused, naming why).

Restoring reads each partition's files in one task on the server: a row per partition, its
``h`` an *anchor* that Spark's hash sends to that partition (found by asking the server,
``anchors``), shuffled by ``repartition(n, "h")`` like every step's state, so that each
task reads its own partition's files and emits its buckets as state rows there. The files
are local to the server, which is on this machine (``refusals.py``): both the client (the
journal, manifests, lease) and the server's tasks (the state's files) write the directory.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.core.grouping.records import Parked, StateBucket
from sparkbeam.runners.spark import sealed_files, state_checkpoints
from sparkbeam.runners.spark.connect import tasks
from sparkbeam.runners.spark.connect.keyed_steps import STATE
from sparkbeam.runners.spark.connect.session import made_active
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.state_checkpoints import Chain, StateFileError
from sparkbeam.runners.spark.stream_rows import functions_of

__all__ = ["PLACEMENT", "anchors", "load_chain", "load_task", "save_task", "write_stage_state"]

#: how a Connect run's state partitions hold keys (see the module docs)
PLACEMENT = "spark-murmur3(portable_hash)"
#: what a Connect run's state rows hold: a keyed stage's buckets, or the elements a stage
#: reading side inputs keeps waiting (``side_input_steps.py``)
_KEPT_KINDS = (StateBucket, Parked)
#: a restore's row: JSON of the partition whose files its task reads
_LOAD = -9
#: what a save task returns: its partition and the bytes of state it wrote
SAVED = "part int, bytes long"


class _Tally:
    """What ``part_records`` counts the written bytes into (an accumulator on a classic session)."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, amount: int) -> None:
        self.value += amount


def _partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        msg = "a keyed state's checkpoint task runs only in a Spark task"
        raise RuntimeError(msg)
    return context.partitionId()


def save_task(since: int | None, path: str, sealer: Sealer, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """One partition's part file of a base (``since`` None) or a delta, from its state rows,
    written aside and renamed into place (a retried task writes it again whole)."""
    import pyarrow as pa

    def work(container: Any) -> Iterator[Any]:
        index = _partition()
        records = [(None, pickle.loads(chunk)) for pcoll, _, chunk in tasks.rows_of(batches) if pcoll == STATE]
        tally = _Tally()
        lines = sealed_files.sealed_lines(sealer, "state", state_checkpoints.part_records(since, tally, index, records))
        data = b"".join(line + b"\n" for line in lines)
        commits.makedirs(path, private=True)
        commits.write_bytes(commits.join(path, f"part-{index:05d}"), data, private=True)
        yield pa.RecordBatch.from_arrays([pa.array([index], pa.int32()), pa.array([tally.value], pa.int64())], names=["part", "bytes"])

    return tasks.run_task(key, work)


def write_stage_state(backend: Any, stage_id: int, state: Any, path: str, sealer: Sealer, since: int | None) -> int:
    """Write the stage's state rows under ``path`` (see the module docs); about how many
    bytes of state it holds. Every partition writes its file, an empty one too, so that a
    restore finds one per partition."""
    task = functools.partial(save_task, since, path, sealer, backend.error_key)
    with backend.user_errors():
        rows = state.mapInArrow(task, SAVED).collect()
    written = sorted(row[0] for row in rows)
    if written != list(range(backend.num_partitions)):
        msg = (
            f"{path}: the keyed state of stage {stage_id} was written from partitions {written}, not the "
            f"{backend.num_partitions} its steps keep; the checkpoint is not committed"
        )
        raise StateFileError(msg)
    return sum(row[1] for row in rows)


def anchors(session: Any, partitions: int) -> list[int]:
    """Per partition, an ``h`` that ``repartition(partitions, "h")`` sends there: Spark
    partitions by ``pmod(hash(h), n)`` (Murmur3, seed 42, the SQL ``hash``), asked of the
    server rather than computed here."""
    F = functions_of(session)
    found: dict[int, int] = {}
    with made_active(session):
        rows = session.range(0, 64 * partitions).select("id", F.pmod(F.hash("id"), F.lit(partitions)).alias("p")).collect()
    for row in rows:
        found.setdefault(int(row[1]), int(row[0]))
    if len(found) < partitions:
        msg = f"no anchor found for every one of {partitions} state partitions; restore with fewer --state_partitions"
        raise StateFileError(msg)
    return [found[index] for index in range(partitions)]


def _lines(path: str) -> Iterator[bytes]:
    for line in commits.read_bytes(path).split(b"\n"):
        if line:
            yield line


def load_task(stage_id: int, paths: list[list[str]], sealer: Sealer, key: bytes, batches: Iterable[Any]) -> Iterator[Any]:
    """On the server: the partition's files of the chain (base first), each piece checked
    before it is unpickled, merged as a classic run merges them; its buckets as state rows
    at the partition's anchor (or its parked elements, for a stage reading side inputs)."""

    def work(container: Any) -> Iterator[Any]:
        output = tasks.Output()
        here = _partition()
        for _, anchor, chunk in tasks.rows_of(batches):
            index = int(chunk.decode("ascii"))
            if index != here:
                msg = f"stage {stage_id}: the state of partition {index} reached partition {here}; Spark's placement is not the one it was saved with"
                raise StateFileError(msg)
            tagged = (
                item
                for position, files in enumerate(paths)
                for item in state_checkpoints.opened_part(sealer, files[index], stage_id, index, position, _lines(files[index]))
            )
            for record in state_checkpoints.merge_partition(stage_id, paths, index, tagged):
                if type(record[1]) not in _KEPT_KINDS:
                    msg = f"{paths[-1][index]}: holds keyed state of a kind a Spark Connect run does not keep ({type(record[1]).__name__})"
                    raise StateFileError(msg)
                output.add_row((STATE, anchor, pickle.dumps(record[1], protocol=pickle.HIGHEST_PROTOCOL)))
        yield output.close()

    return tasks.run_task(key, work)


def load_chain(backend: Any, stage_id: int, chain: Chain, path_of: Callable[[int, str], str], sealer: Sealer) -> Any:
    """The stage's state rows from its chain (see the module docs), materialised on the
    server; a chain a Connect run cannot read refused naming why."""
    directories = [path_of(at, name) for at, name in chain.files]
    if chain.placement != PLACEMENT or chain.partitions != backend.num_partitions:
        why = (
            "a classic Spark session wrote it (its partitions hold other keys)"
            if chain.placement != PLACEMENT
            else f"it was written with {chain.partitions} state partitions, this run has {backend.num_partitions}"
        )
        msg = (
            f"{directories[-1]}: the keyed state of stage {stage_id} cannot be resumed under Spark Connect: {why}. "
            "Resume this checkpoint on a classic Spark session (without --spark_remote), or "
            f"{'' if chain.placement != PLACEMENT else f'with --state_partitions={chain.partitions}, or '}start a new --checkpoint_dir"
        )
        raise StateFileError(msg)
    paths = [state_checkpoints.part_paths(directory, chain.partitions, stage_id) for directory in directories]
    session = backend.session
    rows = [(_LOAD, anchor, str(index).encode("ascii")) for index, anchor in enumerate(anchors(session, chain.partitions))]
    placed = session.createDataFrame(rows, schema=tasks.ROW_TYPE).repartition(chain.partitions, "h")
    task = functools.partial(load_task, stage_id, paths, sealer, backend.error_key)
    with backend.user_errors(), made_active(session):
        return placed.mapInArrow(task, tasks.ROW_TYPE).localCheckpoint(eager=True)

