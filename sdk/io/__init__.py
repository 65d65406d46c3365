"""Sources and sinks with Beam's names (``sparkbeam.io.ReadFromText``, ``ReadFromParquet``, ...).

Beam's IO modules: ``iobase`` (``BoundedSource``, ``Read``, ``Sink``, ``Write``),
``range_trackers``, ``filesystem`` and ``filesystems`` (``FileSystems``, a registry of file
systems by URL scheme), ``fileio`` (``MatchFiles``, ``ReadMatches``, ``WriteToFiles``).

Text files run natively on Spark; CSV, JSON and Parquet are composites of the primitives
that read and write through Python on the executors (see ``sparkbeam.io.filebased``).
Parquet needs pyarrow (``pip install 'sparkbeam[parquet]'``), imported only when used.
"""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.io.csvio import ReadFromCsv, WriteToCsv
from sparkbeam.io.filebased import BadRecord, BadRecordError
from sparkbeam.io.filesystem import CompressionTypes
from sparkbeam.io.iobase import Read, Sink, Write, Writer
from sparkbeam.io.jsonio import ReadFromJson, WriteToJson
from sparkbeam.io.kafka import WriteToKafka
from sparkbeam.io.parquetio import (
    ReadAllFromParquet,
    ReadAllFromParquetBatched,
    ReadFromParquet,
    ReadFromParquetBatched,
    WriteToParquet,
    WriteToParquetBatched,
)
from sparkbeam.io.range_trackers import (
    LexicographicKeyRangeTracker,
    OffsetRangeTracker,
    OrderedPositionRangeTracker,
    UnsplittableRangeTracker,
)
from sparkbeam.io.streaming import (
    ReadFromCsvStream,
    ReadFromJsonStream,
    ReadFromKafka,
    ReadFromParquetStream,
    ReadFromRate,
    ReadFromSocket,
    ReadFromTextStream,
)
from sparkbeam.io.textio import ReadAllFromText, ReadFromText, ReadFromTextWithFilename, WriteToText
from sparkbeam.io.watermarks import (
    BoundedOutOfOrdernessWatermarkEstimator,
    MonotonicWatermarkEstimator,
    WalltimeWatermarkEstimator,
    WatermarkEstimator,
)

__all__ = [
    "BadRecord",
    "BadRecordError",
    "BoundedOutOfOrdernessWatermarkEstimator",
    "CompressionTypes",
    "LexicographicKeyRangeTracker",
    "MonotonicWatermarkEstimator",
    "OffsetRangeTracker",
    "OrderedPositionRangeTracker",
    "Read",
    "ReadAllFromParquet",
    "ReadAllFromParquetBatched",
    "ReadAllFromText",
    "ReadFromCsv",
    "ReadFromCsvStream",
    "ReadFromJson",
    "ReadFromJsonStream",
    "ReadFromKafka",
    "ReadFromParquet",
    "ReadFromParquetBatched",
    "ReadFromParquetStream",
    "ReadFromRate",
    "ReadFromSocket",
    "ReadFromText",
    "ReadFromTextStream",
    "ReadFromTextWithFilename",
    "Sink",
    "UnsplittableRangeTracker",
    "WalltimeWatermarkEstimator",
    "WatermarkEstimator",
    "Write",
    "WriteToCsv",
    "WriteToJson",
    "WriteToKafka",
    "WriteToParquet",
    "WriteToParquetBatched",
    "WriteToText",
    "Writer",
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io")
