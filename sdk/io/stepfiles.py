"""File output of streaming runs: one committed directory of shards per step, exactly once.

In a streaming run the file sinks (``WriteToText``, ``WriteToJson``, ``WriteToCsv``,
``WriteToParquet``) write each step's (micro-batch's) elements to a directory of its own::

    {prefix}-step-{step:08d}/{basename(prefix)}{shard template}{suffix}

for example ``/out/scores-step-00000042/scores-00000-of-00002.txt``. Shards are written
into a hidden temporary directory beside it (``.sparkbeam-temp-…``) and the driver renames
the whole directory into place in one rename, so a reader globbing
``/out/scores-step-*/*`` sees all of a step's shards or none. A step that is run again
(recovery replays the steps after its last checkpoint) replaces its directory: the old one
is renamed aside to a hidden name, the new one renamed in, the old one deleted, so the two
are never visible together. A step with no elements writes nothing. Batch runs keep
Beam's flat layout (``prefix-00000-of-00002``) unchanged.

>>> StepFiles(FileSink(), "/out/scores", "-SSSSS-of-NNNNN", ".txt", num_shards=0).shard_path(42, 0, 2)
'/out/scores-step-00000042/scores-00000-of-00002.txt'
"""

from __future__ import annotations

import os

import attrs

from sparkbeam import pvalue
from sparkbeam.io._file_sinks import FileSink, shard_file_name
from sparkbeam.ptransform import PTransform

__all__ = ["StepFiles", "WriteFilesPerStep", "step_directory"]


def step_directory(prefix: str, step: int) -> str:
    """The directory a step's shards are committed to.

    >>> step_directory("/out/scores", 7)
    '/out/scores-step-00000007'
    """
    return f"{prefix}-step-{step:08d}"


@attrs.frozen
class StepFiles:
    """What a streaming file sink writes each step, and where.

    ``sink`` opens one shard file; ``prefix`` is an absolute local path or a URL of a
    cluster file system; ``num_shards=0`` writes one shard per partition with elements.
    ``flat``: bounded input written once in Beam's flat layout (``prefix-00000-of-00002``),
    with at least ``min_shards`` shards, as ``WriteShardedFiles`` writes it: how bounded
    input reaches a URL the executors' Python cannot open (the runner writes it).
    """

    sink: FileSink
    prefix: str
    template: str
    suffix: str
    num_shards: int
    flat: bool = False
    min_shards: int = 0

    def directory(self, step: int) -> str:
        return step_directory(self.prefix, step)

    def flat_path(self, shard: int, num_shards: int) -> str:
        return shard_file_name(self.prefix, self.template, self.suffix, shard, num_shards)

    def shard_path(self, step: int, shard: int, num_shards: int) -> str:
        name = shard_file_name(os.path.basename(self.prefix), self.template, self.suffix, shard, num_shards)
        return os.path.join(self.directory(step), name)


class WriteFilesPerStep(PTransform):
    """The primitive behind streaming file writes: each step's elements to its own directory.

    ``WriteShardedFiles`` applies it to unbounded input. Its output PCollection stays empty
    (the committed directories are the output); a pipeline that reads it is refused.
    """

    is_primitive = True

    def __init__(self, files: StepFiles) -> None:
        super().__init__()
        self.files = files

    def default_label(self) -> str:
        return "WriteFilesPerStep"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        # bounded as its input: a flat write of bounded input keeps a batch run a batch
        return pvalue.PCollection(pcoll.pipeline, is_bounded=pcoll.is_bounded and self.files.flat)
