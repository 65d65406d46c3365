"""Parquet files through pyarrow, with Beam's names: ``ReadFromParquet``, ``WriteToParquet``...

pyarrow is an optional extra (``pip install 'sparkbeam[parquet]'``); it is imported when a
Parquet transform is built and on the executors that run it.

``ReadFromParquet(pattern)`` emits one dict per record (``columns=`` to read some columns,
``as_rows=True`` for NamedTuple rows); ``ReadFromParquetBatched`` emits one
``pyarrow.Table`` per row group; ``ReadAllFromParquet`` and ``ReadAllFromParquetBatched``
read a PCollection of globs. ``WriteToParquet(prefix, schema)`` writes dicts (or
NamedTuples, Rows) to shards ``prefix-00000-of-0000N<suffix>``; ``WriteToParquetBatched``
writes ``pyarrow.Table`` elements. Writes are atomic and return the final file names::

    records = p | beam.io.ReadFromParquet("in/*.parquet", columns=["name"])   # doctest: +SKIP
    records | beam.io.WriteToParquet(
        "out/people", pyarrow.schema([("name", pyarrow.string())]),
        file_name_suffix=".parquet", num_shards=2)

Each file is read by one task (row group by row group), and files are read and written by
Python on the executors: paths must be local or on a file system every executor mounts.
A file pyarrow cannot read fails the run with an error naming the transform and the file,
or, after ``.with_exception_handling()``, becomes a ``BadRecord`` on a second output.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.io.filebased import (
    BadRecord,
    ExceptionHandling,
    ReadMatchingFiles,
    as_record_dict,
    schema_row_type,
    where,
)
from sparkbeam.io.filesystem import local_path
from sparkbeam.io.filesystems import match_files
from sparkbeam.io.filewrites import FileSink, WriteShardedFiles
from sparkbeam.ptransform import PTransform

__all__ = [
    "ReadAllFromParquet",
    "ReadAllFromParquetBatched",
    "ReadFromParquet",
    "ReadFromParquetBatched",
    "WriteToParquet",
    "WriteToParquetBatched",
]

_HINT = "Use .with_exception_handling() on the read to route unreadable files to a second output."
_CODECS = {"none", "snappy", "gzip", "brotli", "lz4", "zstd"}


def _pyarrow(owner: str) -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, or an ImportError that says how to install them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        msg = f"{owner} needs pyarrow, an optional extra of sparkbeam: pip install 'sparkbeam[parquet]'"
        raise ImportError(msg) from None
    return pyarrow, pyarrow.parquet


# -- reading -------------------------------------------------------------------------


class _ParquetFileReader:
    """Reads one Parquet file, row group by row group, as dicts, rows or tables."""

    def __init__(self, owner: str, columns: list[str] | None, output: str, row_fields: tuple[str, ...] | None, with_filename: bool) -> None:
        self.owner = owner
        self.columns = columns
        self.output = output  # 'dicts', 'rows' or 'tables'
        self.row_fields = row_fields
        self.with_filename = with_filename

    def __call__(self, path: str) -> Iterator[Any]:
        pa, pq = _pyarrow(self.owner)
        row_type = schema_row_type(self.row_fields) if self.output == "rows" else None
        try:
            parquet_file = pq.ParquetFile(path)
        except (pa.ArrowException, ValueError) as error:
            yield BadRecord(path, None, None, f"not a readable Parquet file: {error}")
            return
        for index in range(parquet_file.num_row_groups):
            try:
                table = parquet_file.read_row_group(index, columns=self.columns)
            except (pa.ArrowException, ValueError) as error:
                yield BadRecord(path, None, None, f"cannot read row group {index}: {error}")
                return
            if self.output == "tables":
                yield (path, table) if self.with_filename else table
                continue
            for record in table.to_pylist():
                element = record if row_type is None else row_type(*record.values())
                yield (path, element) if self.with_filename else element


def _check_columns(owner: str, columns: Any) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        msg = f"{owner}: columns must be a list of column names, got {columns!r}"
        raise TypeError(msg)
    return list(columns)


class _ReadParquet(ExceptionHandling, PTransform):
    """What the Parquet reads share: a glob (or an input of globs) and one reader per file."""

    _output = "dicts"
    _name = "ReadFromParquet"

    def __init__(self, file_pattern: str | None, columns: Any, validate: bool, with_filename: bool = False, as_rows: bool = False) -> None:
        super().__init__()
        _pyarrow(self._name)
        if file_pattern is not None:
            if not isinstance(file_pattern, str) or not file_pattern:
                msg = f"{self._name}: file_pattern must be a non-empty path or glob, got {file_pattern!r}"
                raise ValueError(msg)
            file_pattern = local_path(self._name, file_pattern)
        self.file_pattern = file_pattern
        self.columns = _check_columns(self._name, columns)
        self.validate = validate
        self.with_filename = with_filename
        self.as_rows = as_rows

    def default_label(self) -> str:
        return self._name

    def expand(self, pvalueish: Any) -> Any:
        owner = where(pvalueish)
        root = self.file_pattern is not None
        if root != isinstance(pvalueish, pvalue.PBegin):
            msg = (
                f"{owner}: apply {self._name} to the pipeline (p | {self._name}(pattern))"
                if root
                else f"{owner}: apply {self._name} to a PCollection of file patterns"
            )
            raise TypeError(msg)
        files = match_files(self.file_pattern) if root else []
        if root and self.validate and not files:
            msg = f"{owner}: no files match {self.file_pattern!r}"
            raise FileNotFoundError(msg)
        output = self._output
        row_fields = None
        if self.as_rows:
            if not files:
                msg = f"{owner}: as_rows=True takes the row fields from the first file, and no file matches {self.file_pattern!r}"
                raise FileNotFoundError(msg)
            _, pq = _pyarrow(self._name)
            names = pq.read_schema(files[0]).names
            wanted = None if self.columns is None else {c.split(".")[0] for c in self.columns}
            row_fields = tuple(n for n in names if wanted is None or n in wanted)
            output = "rows"
        reader = _ParquetFileReader(owner, self.columns, output, row_fields, self.with_filename)
        return pvalueish | "ReadFiles" >> ReadMatchingFiles(
            self.file_pattern,
            reader,
            owner=owner,
            hint=_HINT,
            dead_letter_tags=self._dead_letter_tags,
            allow_empty=not root,
        )


class ReadFromParquet(_ReadParquet):
    """Each record of the Parquet files matching ``file_pattern``, as a dict.

    >>> records = p | ReadFromParquet("in/*.parquet", columns=["id", "name"])   # doctest: +SKIP

    ``as_rows=True`` emits NamedTuple rows with the first file's columns instead.
    ``min_bundle_size`` is accepted (a file is read by one task).
    """

    def __init__(self, file_pattern: str | None = None, min_bundle_size: int = 0, validate: bool = True, columns: Any = None, as_rows: bool = False) -> None:
        super().__init__(file_pattern, columns, validate, as_rows=as_rows)


class ReadFromParquetBatched(_ReadParquet):
    """Each row group of the Parquet files matching ``file_pattern``, as a ``pyarrow.Table``.

    >>> tables = p | ReadFromParquetBatched("in/*.parquet")    # doctest: +SKIP
    """

    _output = "tables"
    _name = "ReadFromParquetBatched"

    def __init__(self, file_pattern: str | None = None, min_bundle_size: int = 0, validate: bool = True, columns: Any = None) -> None:
        super().__init__(file_pattern, columns, validate)


class ReadAllFromParquet(_ReadParquet):
    """Each record (a dict) of the files matching each glob of the input PCollection.

    >>> records = patterns | ReadAllFromParquet(with_filename=True)   # doctest: +SKIP

    ``with_filename=True`` emits ``(file name, record)``. A glob with a wildcard may match
    nothing; a plain path that matches nothing fails the read.
    """

    _name = "ReadAllFromParquet"

    def __init__(self, with_filename: bool = False, min_bundle_size: int = 0, desired_bundle_size: int = 0, columns: Any = None, label: str | None = None) -> None:
        super().__init__(None, columns, True, with_filename=with_filename)
        if label:
            self.label = label


class ReadAllFromParquetBatched(_ReadParquet):
    """Each row group (a ``pyarrow.Table``) of the files matching each glob of the input."""

    _output = "tables"
    _name = "ReadAllFromParquetBatched"

    def __init__(self, min_bundle_size: int = 0, desired_bundle_size: int = 0, columns: Any = None, with_filename: bool = False, label: str | None = None) -> None:
        super().__init__(None, columns, True, with_filename=with_filename)
        if label:
            self.label = label


# -- writing -------------------------------------------------------------------------


class _ParquetShardWriter:
    """Buffers records into record batches and batches into row groups, as Beam does."""

    def __init__(self, sink: _ParquetSink, path: str) -> None:
        pa, pq = _pyarrow(sink.owner)
        self.pa = pa
        self.sink = sink
        self.schema = sink.schema
        self.writer = pq.ParquetWriter(
            path,
            sink.schema,
            compression=sink.codec,
            use_deprecated_int96_timestamps=sink.use_deprecated_int96_timestamps,
            use_compliant_nested_type=sink.use_compliant_nested_type,
        )
        self.records: list[dict] = []
        self.batches: list[Any] = []
        self.batch_bytes = 0

    def write(self, element: Any) -> None:
        if self.sink.batched:
            if not isinstance(element, self.pa.Table):
                msg = f"{self.sink.owner} writes pyarrow.Table elements, not {type(element).__name__}"
                raise TypeError(msg)
            self.writer.write_table(element)
            return
        self.records.append(as_record_dict(self.sink.owner, element))
        if len(self.records) >= self.sink.record_batch_size:
            self._flush_records()
        if self.batch_bytes >= self.sink.row_group_buffer_size:
            self._flush_batches()

    def _flush_records(self) -> None:
        if not self.records:
            return
        columns = []
        for field in self.schema:
            values = []
            for record in self.records:
                if field.name in record:
                    values.append(record[field.name])
                elif field.nullable:
                    values.append(None)
                else:
                    msg = f"{self.sink.owner}: {record!r} lacks the field {field.name!r}, which the schema does not allow to be null"
                    raise ValueError(msg)
            columns.append(self._array(field, values))
        batch = self.pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self.batches.append(batch)
        self.batch_bytes += sum(b.size for column in columns for b in column.buffers() if b is not None)
        self.records = []

    def _array(self, field: Any, values: list) -> Any:
        pa = self.pa
        try:
            return pa.array(values, type=field.type)
        except (pa.ArrowException, TypeError, ValueError) as error:
            for record, value in zip(self.records, values):
                try:
                    pa.array([value], type=field.type)
                except (pa.ArrowException, TypeError, ValueError) as single:
                    msg = f"{self.sink.owner}: field {field.name!r} of {record!r} does not fit the schema's type {field.type}: {single}"
                    raise TypeError(msg) from single
            msg = f"{self.sink.owner}: the values of field {field.name!r} do not fit the schema's type {field.type}: {error}"
            raise TypeError(msg) from error

    def _flush_batches(self) -> None:
        if self.batches:
            self.writer.write_table(self.pa.Table.from_batches(self.batches, schema=self.schema))
        self.batches = []
        self.batch_bytes = 0

    def close(self) -> None:
        try:
            self._flush_records()
            self._flush_batches()
        finally:
            self.writer.close()


class _ParquetSink(FileSink):
    def __init__(self, owner: str, schema: Any, codec: str, use_deprecated_int96_timestamps: bool, use_compliant_nested_type: bool, row_group_buffer_size: int, record_batch_size: int, batched: bool) -> None:
        self.owner = owner
        self.schema = schema
        self.codec = codec
        self.use_deprecated_int96_timestamps = use_deprecated_int96_timestamps
        self.use_compliant_nested_type = use_compliant_nested_type
        self.row_group_buffer_size = row_group_buffer_size
        self.record_batch_size = record_batch_size
        self.batched = batched

    def open(self, path: str) -> _ParquetShardWriter:
        return _ParquetShardWriter(self, path)


class _WriteParquet(PTransform):
    _name = "WriteToParquet"
    _batched = False

    def __init__(
        self,
        file_path_prefix: str,
        schema: Any,
        row_group_buffer_size: int,
        record_batch_size: int,
        codec: str,
        use_deprecated_int96_timestamps: bool,
        use_compliant_nested_type: bool,
        file_name_suffix: str,
        num_shards: int,
        shard_name_template: str | None,
        triggering_frequency: Any,
    ) -> None:
        super().__init__()
        owner = self._name
        pa, _ = _pyarrow(owner)
        if schema is None:
            msg = f"{owner}: schema= (a pyarrow.Schema) is required; sparkbeam does not infer a schema from element types"
            raise ValueError(msg)
        if not isinstance(schema, pa.Schema):
            msg = f"{owner}: schema must be a pyarrow.Schema such as pyarrow.schema([('name', pyarrow.string())]), not {schema!r}"
            raise TypeError(msg)
        if not isinstance(codec, str) or codec.lower() not in _CODECS:
            msg = f"{owner}: codec must be one of {sorted(_CODECS)}, got {codec!r}"
            raise ValueError(msg)
        if triggering_frequency is not None:
            msg = f"{owner}: triggering_frequency= (windowed writes of unbounded input) is not supported by sparkbeam"
            raise NotImplementedError(msg)
        for name, value in (("row_group_buffer_size", row_group_buffer_size), ("record_batch_size", record_batch_size)):
            if not isinstance(value, int) or value < 1:
                msg = f"{owner}: {name} must be a positive integer, got {value!r}"
                raise ValueError(msg)
        self.sink = _ParquetSink(
            owner, schema, codec.lower(), use_deprecated_int96_timestamps, use_compliant_nested_type,
            row_group_buffer_size, record_batch_size, self._batched,
        )
        self.write = WriteShardedFiles(
            self.sink,
            owner=owner,
            file_path_prefix=file_path_prefix,
            file_name_suffix=file_name_suffix,
            num_shards=num_shards,
            shard_name_template=shard_name_template,
            min_shards=1,
        )

    def default_label(self) -> str:
        return self._name

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        self.sink.owner = self.write.owner = where(pcoll)
        return pcoll | "WriteFiles" >> self.write


class WriteToParquet(_WriteParquet):
    """Writes dicts (or NamedTuples, Rows) as Parquet with a pyarrow ``schema``.

    >>> records | WriteToParquet("out/people", pyarrow.schema([("name", pyarrow.string())]),
    ...                          file_name_suffix=".parquet")     # doctest: +SKIP

    Shards are named ``prefix-SSSSS-of-NNNNN<suffix>``; ``num_shards=0`` writes one per
    bundle. A missing nullable field is written as null. Records are buffered into
    batches of ``record_batch_size`` and batches into row groups of about
    ``row_group_buffer_size`` bytes, as in Beam. Returns the final file names.
    """

    def __init__(
        self,
        file_path_prefix: str,
        schema: Any = None,
        row_group_buffer_size: int = 64 * 1024 * 1024,
        record_batch_size: int = 1000,
        codec: str = "none",
        use_deprecated_int96_timestamps: bool = False,
        use_compliant_nested_type: bool = False,
        file_name_suffix: str = "",
        num_shards: int = 0,
        shard_name_template: str | None = None,
        mime_type: str = "application/x-parquet",
        triggering_frequency: Any = None,
    ) -> None:
        super().__init__(
            file_path_prefix, schema, row_group_buffer_size, record_batch_size, codec,
            use_deprecated_int96_timestamps, use_compliant_nested_type, file_name_suffix,
            num_shards, shard_name_template, triggering_frequency,
        )


class WriteToParquetBatched(_WriteParquet):
    """Writes ``pyarrow.Table`` elements (each as one or more row groups) as Parquet.

    >>> tables | WriteToParquetBatched("out/t", schema, file_name_suffix=".parquet")  # doctest: +SKIP
    """

    _name = "WriteToParquetBatched"
    _batched = True

    def __init__(
        self,
        file_path_prefix: str,
        schema: Any = None,
        codec: str = "none",
        use_deprecated_int96_timestamps: bool = False,
        use_compliant_nested_type: bool = False,
        file_name_suffix: str = "",
        num_shards: int = 0,
        shard_name_template: str | None = None,
        mime_type: str = "application/x-parquet",
        triggering_frequency: Any = None,
    ) -> None:
        super().__init__(
            file_path_prefix, schema, 1, 1, codec, use_deprecated_int96_timestamps,
            use_compliant_nested_type, file_name_suffix, num_shards, shard_name_template,
            triggering_frequency,
        )


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.io.parquetio")
