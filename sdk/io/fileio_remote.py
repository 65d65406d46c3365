"""``WriteToFiles`` of bounded input on a URL the executors' Python cannot open.

A file system served only by the driver's JVM (``hdfs://``, ``s3a://``... through Hadoop on
Spark) is out of reach of the DoFns ``WriteToFiles`` expands into: they write and rename on
the executors. For bounded input on such a URL ``WriteToFiles`` hands the runner this
primitive instead, with itself as the spec (its path, ``file_naming``, ``destination``,
``sink`` and ``max_writers_per_bundle``). The runner writes each partition's records with
the sink into local files, one per (destination, window) while at most
``max_writers_per_bundle`` are open, carries them to its driver, uploads them beside their
final names and renames each into place with the names ``file_naming`` gives
(``window, None, index, count, '', destination``, indices in the order of the temporary
names, as Beam numbers them). Its output stays empty: there is no ``FileResult`` per file
on such a URL, as the other file sinks' batch writes give no file names there.
"""

from __future__ import annotations

from typing import Any

from sparkbeam import pvalue
from sparkbeam.ptransform import PTransform

__all__ = ["WriteFilesThroughDriver"]


class WriteFilesThroughDriver(PTransform):
    """The primitive behind bounded ``WriteToFiles`` on a URL only the runner's driver reaches."""

    is_primitive = True

    def __init__(self, files: Any) -> None:
        super().__init__()
        #: the ``WriteToFiles`` this writes for
        self.files = files

    def default_label(self) -> str:
        return "WriteFilesThroughDriver"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pvalue.PCollection(pcoll.pipeline, is_bounded=True)
