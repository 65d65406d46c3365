"""Stream reads of text files are strict about UTF-8, as batch reads are.

A line whose bytes are not UTF-8 is a dead letter with its file, line and bytes (the batch
CSV and JSON reads' own dead letter for it), or fails the run naming the read, the file and
the line; the other lines of its file are read as usual. Each test runs a real stream over a
watched folder on the test session's Spark.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

import sparkbeam as beam
from sparkbeam.io import BadRecord, BadRecordError
from sparkbeam.options.pipeline_options import PipelineOptions

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

# valid multi-byte text, a lone continuation byte, a truncated sequence, an encoded surrogate,
# an overlong '/', and a byte-order mark that stays a character (as Beam's reads keep it)
TEXT = (
    "caf\u00e9 \u20ac \U0001f600\r\n".encode()
    + b"not \xff utf-8\n"
    + b"fine\n"
    + b"cut \xe2\x82\n"
    + b"\xed\xa0\x80 surrogate\r\n"
    + b"\xc0\xaf\n"
    + "\ufeffbom\n".encode()
)
GOOD_TEXT = ["caf\u00e9 \u20ac \U0001f600", "fine", "\ufeffbom"]
BAD_TEXT = {2: b"not \xff utf-8", 4: b"cut \xe2\x82", 5: b"\xed\xa0\x80 surrogate", 6: b"\xc0\xaf"}


def options(**settings):
    return PipelineOptions(step_interval=0.2, state_partitions=2, **settings)


def place(path, data: bytes) -> None:
    temp = os.path.join(os.path.dirname(path), "." + os.path.basename(path))
    with open(temp, "wb") as handle:
        handle.write(data)
    os.replace(temp, path)  # the source must never see a half-written file


def letters(result, dead):
    return sorted(
        ((e.value.file, e.value.line, e.value.data, e.value.record, e.value.error) for e in result.emissions(dead)),
        key=lambda letter: (letter[0], letter[1]),
    )


def test_text_stream_sends_lines_that_are_not_utf8_to_its_dead_letters_with_their_bytes(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    path = str(directory / "mixed.txt")
    place(path, TEXT)
    place(str(directory / "clean.txt"), b"one\ntwo\n")
    p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    good, bad = p | "Read" >> beam.io.ReadFromTextStream(str(directory)).with_exception_handling()
    lines, dead = beam.capture(good), beam.capture(bad)
    result = p.run()
    assert sorted(e.value for e in result.emissions(lines)) == sorted([*GOOD_TEXT, "one", "two"])
    expected = [BadRecord.undecodable(path, line, data) for line, data in sorted(BAD_TEXT.items())]
    assert letters(result, dead) == [(b.file, b.line, b.data, b.record, b.error) for b in expected]
    assert letters(result, dead)[0][4] == (
        "cannot decode as utf-8: 'utf-8' codec can't decode byte 0xff in position 4: invalid start byte"
    )
    assert sum(r.dead_letters for r in result.watermarks().for_stage("Read/Read")) == len(BAD_TEXT)


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_csv_and_json_streams_give_the_dead_letters_their_batch_reads_give(spark, tmp_path, kind):
    directory = tmp_path / "in"
    directory.mkdir()
    if kind == "csv":
        rows = [b"user,score", b"ann,3", b"b\xffb,4", "c\u00e9,5".encode(), b"dan,\xe2\x82"]
        read_stream = beam.io.ReadFromCsvStream(str(directory), schema="user STRING, score INT")
        read_batch = beam.io.ReadFromCsv(str(directory / "*.csv"))
    else:
        rows = [b'{"user": "ann", "score": 3}', b'{"user": "b\xffb", "score": 4}', '{"user": "c\u00e9", "score": 5}'.encode()]
        read_stream = beam.io.ReadFromJsonStream(str(directory), schema="user STRING, score INT")
        read_batch = beam.io.ReadFromJson(str(directory / "*.json"))
    place(str(directory / f"f.{kind}"), b"\n".join(rows) + b"\n")

    p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    good, bad = p | "Read" >> read_stream.with_exception_handling()
    records, dead = beam.capture(good), beam.capture(bad)
    streamed = p.run()
    batch = beam.Pipeline()
    batch_good, batch_bad = batch | "Read" >> read_batch.with_exception_handling()
    batch_records, batch_dead = beam.capture(batch_good), beam.capture(batch_bad)
    batched = batch.run()

    assert sorted((e.value.user, e.value.score) for e in streamed.emissions(records)) == [("ann", 3), ("c\u00e9", 5)]
    assert sorted((r.user, r.score) for r in batched.emissions(batch_records).values()) == [("ann", 3), ("c\u00e9", 5)]
    assert letters(streamed, dead) == letters(batched, batch_dead)
    assert [letter[2] for letter in letters(streamed, dead)] == [row for row in rows if not _is_utf8(row)]


def test_csv_stream_reports_a_header_that_is_not_utf8(spark, tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    place(str(directory / "f.csv"), b"us\xe9r,score\nann,3\n")
    p = beam.Pipeline(options=options(available_now=True, checkpoint_dir=str(tmp_path / "ck")))
    good, bad = p | "Read" >> beam.io.ReadFromCsvStream(
        str(directory), schema="user STRING, score INT"
    ).with_exception_handling()
    records, dead = beam.capture(good), beam.capture(bad)
    result = p.run()
    assert [(e.value.user, e.value.score) for e in result.emissions(records)] == [("ann", 3)]
    assert [(e.value.line, e.value.data) for e in result.emissions(dead)] == [(1, b"us\xe9r,score")]


def test_a_stream_without_dead_letters_fails_naming_the_read_the_file_and_the_line(spark, tmp_path):
    """A clean file is read in a first step; a file with a bad line, arriving while the stream
    runs, fails the step that reads it."""
    directory = tmp_path / "in"
    directory.mkdir()
    log = tmp_path / "timeline.jsonl"
    place(str(directory / "a.txt"), b"fine\n")
    p = beam.Pipeline(options=options(max_steps=200, timeline_log=str(log), checkpoint_dir=str(tmp_path / "ck")))
    beam.capture(p | "Lines" >> beam.io.ReadFromTextStream(str(directory)))
    stop = threading.Event()

    def feed_once_the_first_file_is_read():
        while not stop.wait(0.05):
            if log.exists() and any(json.loads(line)["elements_in"] for line in log.read_text().splitlines() if line):
                place(str(directory / "b.txt"), b"fine\nstill fine\nnot \xff utf-8\n")
                return

    feeder = threading.Thread(target=feed_once_the_first_file_is_read, daemon=True)
    feeder.start()
    started = time.monotonic()
    try:
        with pytest.raises(BadRecordError) as failure:
            p.run()
    finally:
        stop.set()
        feeder.join()
    text = str(failure.value)
    assert "ReadFromTextStream 'Lines'" in text
    assert f"line 3 of {directory / 'b.txt'}" in text
    assert "can't decode byte 0xff in position 4" in text and r"b'not \xff utf-8'" in text
    assert time.monotonic() - started < 200 * 0.2 + 60  # it failed; it did not run out its steps


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
