"""The file sinks the object-store and HDFS tests write, there and on a local disk, to compare."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator, Mapping

import sparkbeam as beam


def write_everything(p, prefix: str) -> None:
    """Every batch file sink: text in two shards, CSV, JSON, Parquet and one gzip file."""
    rows = p | beam.Create([beam.Row(name=f"n{i}", score=i, ok=i % 2 == 0) for i in range(40)])
    rows | "Text" >> beam.Map(lambda r: f"{r.name} {r.score}") | "WriteText" >> beam.io.WriteToText(f"{prefix}/text", num_shards=2)
    rows | "WriteCsv" >> beam.io.WriteToCsv(f"{prefix}/csv", num_shards=1)
    rows | "WriteJson" >> beam.io.WriteToJson(f"{prefix}/json")
    import pyarrow as pa

    schema = pa.schema([("name", pa.string()), ("score", pa.int64()), ("ok", pa.bool_())])
    rows | "AsDicts" >> beam.Map(lambda r: {"name": r.name, "score": r.score, "ok": r.ok}) | "WriteParquet" >> beam.io.WriteToParquet(f"{prefix}/parquet", schema)
    texts = p | "Texts" >> beam.Create([f"line {i}" for i in range(10)])
    texts | "Gz" >> beam.io.WriteToText(f"{prefix}/gz", file_name_suffix=".gz", shard_name_template="")


def name_without_colons(window, pane, shard_index, total_shards, compression, destination) -> str:
    """HDFS refuses ':' in names, which Beam's default names hold (ISO times)."""
    return f"{destination}-{int(window.start)}-{shard_index:05d}-of-{total_shards:05d}.txt"


def write_files(p, path: str, file_naming=name_without_colons) -> None:
    """WriteToFiles of 60 lines in three destinations and three 100 s windows."""
    from sparkbeam.io import fileio
    from sparkbeam.transforms import window

    (
        p
        | "Lines" >> beam.Create([(f"k{i % 3}", i) for i in range(60)])
        | beam.Map(lambda kv: beam.window.TimestampedValue(f"{kv[0]} {kv[1]}", kv[1] * 5))
        | beam.WindowInto(window.FixedWindows(100))
        | "WriteFiles" >> fileio.WriteToFiles(path, destination=lambda line: line.split()[0], file_naming=file_naming)
    )


def by_window_and_destination(files: dict[str, bytes]) -> dict[str, collections.Counter]:
    """Lines per file name less its shard part (``-00001-of-00002``), each name's shards
    checked to be numbered 0..n-1 of n."""
    groups: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    shards: dict[str, set[tuple[int, int]]] = collections.defaultdict(set)
    for name, data in files.items():
        head, index, _, count = name.removesuffix(".txt").rsplit("-", 3)
        groups[head].update(data.decode().splitlines())
        shards[head].add((int(index), int(count)))
    for head, numbered in shards.items():
        (total,) = {count for _, count in numbered}
        assert sorted(index for index, _ in numbered) == list(range(total)), (head, numbered)
    return groups


def assert_same_sink_files(there: dict[str, bytes], here: dict[str, bytes]) -> None:
    """What ``write_everything`` wrote there (a remote store) against what it wrote here (a
    local disk): the same names (no temporary folder left behind either); text, CSV and the
    gzip file the same bytes; JSON and Parquet shards the same records (how elements fall
    into shards follows the partitions)."""
    import csv
    import gzip
    import io

    import pyarrow.parquet as pq

    assert sorted(there) == sorted(here)
    for name in ("text-00000-of-00002", "text-00001-of-00002"):
        assert there[name] == here[name], name
    assert there["gz.gz"] == here["gz.gz"]  # its header holds no name and no time
    assert gzip.decompress(there["gz.gz"])
    assert sorted(there["csv-00000-of-00001"].decode().splitlines()) == sorted(here["csv-00000-of-00001"].decode().splitlines())
    assert next(iter(csv.reader(io.StringIO(there["csv-00000-of-00001"].decode())))) == ["name", "score", "ok"]

    def json_rows(files: dict[str, bytes]) -> list[str]:
        return sorted(line for name, data in files.items() if name.startswith("json") for line in data.decode().splitlines())

    assert json_rows(there) == json_rows(here) and len(json_rows(there)) == 40

    def parquet_rows(files: dict[str, bytes]) -> list[tuple]:
        rows: list[tuple] = []
        for name, data in files.items():
            if name.startswith("parquet"):
                rows += [tuple(r.values()) for r in pq.read_table(io.BytesIO(data)).to_pylist()]
        return sorted(rows)

    assert parquet_rows(there) == parquet_rows(here) and len(parquet_rows(there)) == 40


@contextlib.contextmanager
def hadoop_settings(spark, settings: Mapping[str, str]) -> Iterator[None]:
    """The session's Hadoop configuration with ``settings`` set, restored as it was afterwards
    (a key that was not set is unset again), so one module's settings never leak into another's."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = {key: conf.get(key) for key in settings}
    for key, value in settings.items():
        conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)
