"""Sources and sinks with Beam's names (``sparkbeam.io.ReadFromText``, ``ReadFromParquet``, ...).

Text files run natively on Spark; CSV, JSON and Parquet are composites of the primitives
that read and write through Python on the executors (see ``sparkbeam.io.filebased``).
Parquet needs pyarrow (``pip install 'sparkbeam[parquet]'``), imported only when used.
"""

from sparkbeam.io.csvio import ReadFromCsv, WriteToCsv
from sparkbeam.io.filebased import BadRecord, BadRecordError
from sparkbeam.io.filesystem import CompressionTypes
from sparkbeam.io.jsonio import ReadFromJson, WriteToJson
from sparkbeam.io.parquetio import (
    ReadAllFromParquet,
    ReadAllFromParquetBatched,
    ReadFromParquet,
    ReadFromParquetBatched,
    WriteToParquet,
    WriteToParquetBatched,
)
from sparkbeam.io.textio import ReadFromText, WriteToText

__all__ = [
    "BadRecord",
    "BadRecordError",
    "CompressionTypes",
    "ReadAllFromParquet",
    "ReadAllFromParquetBatched",
    "ReadFromCsv",
    "ReadFromJson",
    "ReadFromParquet",
    "ReadFromParquetBatched",
    "ReadFromText",
    "WriteToCsv",
    "WriteToJson",
    "WriteToParquet",
    "WriteToParquetBatched",
    "WriteToText",
]
