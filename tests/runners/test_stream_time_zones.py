"""Naive times in real streams are read in Spark's session time zone, whatever zone the
driver or the executors' Python processes run in.

The shared session is switched to Asia/Kolkata (UTC+05:30) for these tests and back after;
the executors' Python workers are started with TZ=Etc/GMT-14 (UTC+14), a zone no value
may be read in.
"""

from __future__ import annotations

import datetime
import json
import os
import time

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.spark.stream_rows import event_micros, session_time_zone
from sparkbeam.utils.timestamp import Timestamp

SESSION_ZONE = "Asia/Kolkata"
EXECUTOR_ZONE = "Etc/GMT-14"  # POSIX sign: UTC+14
#: 2024-01-01T10:00:00Z, written three ways below
INSTANT = Timestamp.from_rfc3339("2024-01-01T10:00:00Z")
KOLKATA_WALL_CLOCK = datetime.datetime(2024, 1, 1, 15, 30)


# -- pure ---------------------------------------------------------------------------------


def test_session_time_zone_names_and_offsets():
    assert session_time_zone("UTC") is datetime.timezone.utc
    assert session_time_zone("+05:30").utcoffset(None) == datetime.timedelta(hours=5, minutes=30)
    assert session_time_zone("GMT-8").utcoffset(None) == -datetime.timedelta(hours=8)
    assert session_time_zone("-03").utcoffset(None) == -datetime.timedelta(hours=3)
    assert session_time_zone(SESSION_ZONE).utcoffset(KOLKATA_WALL_CLOCK) == datetime.timedelta(hours=5, minutes=30)


def test_unknown_session_time_zone_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match=r"spark.sql.session.timeZone is 'Mars/Olympus'"):
        session_time_zone("Mars/Olympus")


def test_naive_values_are_wall_clock_in_the_given_zone_and_aware_ones_keep_their_instant():
    zone = session_time_zone(SESSION_ZONE)
    assert event_micros(KOLKATA_WALL_CLOCK, zone) == INSTANT.micros
    assert event_micros("2024-01-01 15:30:00", zone) == INSTANT.micros
    assert event_micros("2024-01-01T10:00:00Z", zone) == INSTANT.micros
    assert event_micros(datetime.datetime(2024, 1, 1, 10, tzinfo=datetime.timezone.utc), zone) == INSTANT.micros
    # without a zone given, naive values are UTC (what the runner passes for a UTC session)
    assert event_micros(datetime.datetime(2024, 1, 1, 10)) == INSTANT.micros


# -- on Spark -----------------------------------------------------------------------------


@pytest.fixture
def kolkata_session(spark):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", SESSION_ZONE)
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


@pytest.fixture
def executors_in_another_zone(spark):
    """Python workers started with TZ=Etc/GMT-14 (sc.environment goes to every Python worker)."""
    environment = spark.sparkContext.environment
    before = environment.get("TZ")
    environment["TZ"] = EXECUTOR_ZONE
    try:
        offsets = spark.sparkContext.parallelize([0], 1).map(lambda _: time.localtime().tm_gmtoff).collect()
        assert offsets == [14 * 3600], "the executors' Python did not take the zone: the test would prove nothing"
        yield
    finally:
        if before is None:
            environment.pop("TZ", None)
        else:
            environment["TZ"] = before


def _write(path, records):
    temp = os.path.join(os.path.dirname(path), "." + os.path.basename(path))
    with open(temp, "w") as handle:
        handle.write("\n".join(json.dumps(r) for r in records) + "\n")
    os.replace(temp, path)


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_stream_reads_naive_times_in_the_session_zone(kolkata_session, executors_in_another_zone, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    _write(
        str(directory / "f.json"),
        [
            # an instant with its offset, and a wall-clock time Spark reads in the session zone
            {"id": 1, "ts": "2024-01-01T10:00:00Z", "local": "2024-01-01 15:30:00", "nested": {"at": "2024-01-01T10:00:00Z"}},
            {"id": 2, "ts": "2024-01-01T15:30:00", "local": "2024-01-01T15:30:00", "nested": {"at": "2024-01-01T15:30:00"}},
        ],
    )
    schema = "id INT, ts TIMESTAMP, local STRING, nested STRUCT<at: TIMESTAMP>"
    p = beam.Pipeline(options=PipelineOptions(available_now=True, checkpoint_dir=str(tmp_path / "ck"), step_interval=0.2))
    reads = {
        "field": beam.io.ReadFromJsonStream(str(directory), schema=schema, timestamp="ts"),
        "function": beam.io.ReadFromJsonStream(str(directory), schema=schema, timestamp=lambda r: r.ts),
        "nested": beam.io.ReadFromJsonStream(str(directory), schema=schema, timestamp=lambda r: r.nested.at),
        "text": beam.io.ReadFromJsonStream(str(directory), schema=schema, timestamp=lambda r: r.local),
    }
    captured = {name: beam.capture(p | name >> read) for name, read in reads.items()}
    result = p.run()
    for name, pcoll in captured.items():
        emissions = result.emissions(pcoll)
        assert sorted(e.value.id for e in emissions) == [1, 2], name
        assert {e.timestamp for e in emissions} == {INSTANT}, name
        # the element carries the session's wall-clock time, as Spark shows it
        assert {e.value.ts for e in emissions} == {KOLKATA_WALL_CLOCK}, name
        assert {e.value.nested.at for e in emissions} == {KOLKATA_WALL_CLOCK}, name


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_timestamp_ntz_field_is_read_in_the_session_zone(kolkata_session, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    _write(str(directory / "f.json"), [{"id": 1, "ts": "2024-01-01T15:30:00"}])
    p = beam.Pipeline(options=PipelineOptions(available_now=True, checkpoint_dir=str(tmp_path / "ck"), step_interval=0.2))
    rows = beam.capture(p | beam.io.ReadFromJsonStream(str(directory), schema="id INT, ts TIMESTAMP_NTZ", timestamp="ts"))
    result = p.run()
    assert [(e.value.ts, e.timestamp) for e in result.emissions(rows)] == [(KOLKATA_WALL_CLOCK, INSTANT)]


@pytest.mark.spark
def test_batch_parquet_read_keeps_the_files_zones(spark, tmp_path):
    """Batch reads do not go through Spark's TIMESTAMP conversion: Parquet is read with
    pyarrow, which gives UTC-adjusted columns as aware datetimes (and local-time columns as
    the naive values the file holds, as Beam does), so the session zone plays no part."""
    import pyarrow as pa  # a declared test dependency
    import pyarrow.parquet as pq

    path = str(tmp_path / "t.parquet")
    instant = datetime.datetime(2024, 1, 1, 10, tzinfo=datetime.timezone.utc)
    pq.write_table(pa.table({"at": pa.array([instant], pa.timestamp("us", tz="UTC"))}), path)
    p = beam.Pipeline()
    stamped = beam.capture(
        p | beam.io.ReadFromParquet(path) | beam.Map(lambda r: beam.window.TimestampedValue(r["at"], r["at"]))
    )
    result = p.run()
    assert [(e.value, e.timestamp) for e in result.emissions(stamped)] == [(instant, INSTANT)]


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_conf_sets_the_zone_of_a_run_on_a_running_session(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    _write(str(directory / "f.json"), [{"id": 1, "ts": "2024-01-01T10:00:00Z"}])
    zone_before = spark.conf.get("spark.sql.session.timeZone")
    assert zone_before != SESSION_ZONE
    options = PipelineOptions(
        available_now=True,
        checkpoint_dir=str(tmp_path / "ck"),
        step_interval=0.2,
        spark_conf=[f"spark.sql.session.timeZone={SESSION_ZONE}"],
    )
    p = beam.Pipeline(options=options)
    rows = beam.capture(p | beam.io.ReadFromJsonStream(str(directory), schema="id INT, ts TIMESTAMP", timestamp=lambda r: r.ts))
    result = p.run()
    assert [(e.value.ts, e.timestamp) for e in result.emissions(rows)] == [(KOLKATA_WALL_CLOCK, INSTANT)]
    assert spark.conf.get("spark.sql.session.timeZone") == zone_before
