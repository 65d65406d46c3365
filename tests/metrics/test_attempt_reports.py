"""The driver's listener for failed task attempts' metrics, driven with raw sockets: a peer
without the run's key has a header read and nothing more; slow and idle connections are
cut; at most so many are served at once; replays, tampered and badly typed reports are
refused and logged, never merged; TLS with a pinned certificate when Spark encrypts."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import socket
import threading
import time

import pytest

from sparkbeam.metrics.cells import DistributionData, GaugeData
from sparkbeam.metrics.execution import MetricKey, MetricUpdates
from sparkbeam.metrics.metricbase import MetricName
from sparkbeam.runners.spark import attempt_reports
from sparkbeam.runners.spark.attempt_reports import (
    AttemptReports,
    BadReport,
    ReportChannel,
    report_from_json,
)
from sparkbeam.runners.spark.metrics import MetricsChannel

COUNTER = MetricKey("Parse", MetricName("ns", "seen"))


def seen(n: int) -> MetricUpdates:
    return MetricUpdates(counters={COUNTER: n})


@pytest.fixture
def reports():
    listener = AttemptReports("127.0.0.1")
    yield listener
    listener.close()


def send_raw(address: tuple[str, int], data: bytes) -> bytes:
    """Send ``data`` on a new connection; the listener's answer: its ack, or b"" when it
    closed the connection without one."""
    with socket.create_connection(address, timeout=10) as connection:
        try:
            connection.sendall(data)
            return connection.recv(1)
        except ConnectionError:  # closed while data was still arriving
            return b""


def header(key: bytes, length: int, nonce: bytes = b"n" * 16, body_mac: bytes = b"m" * 32) -> bytes:
    head = attempt_reports._HEAD.pack(b"SBMR", 1, length, nonce, body_mac)
    return head + hmac.new(key, attempt_reports._HEADER_CONTEXT + head, hashlib.sha256).digest()


def eventually(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_report_with_the_runs_key_is_merged_and_acknowledged(reports):
    every_kind = MetricUpdates(
        counters={COUNTER: 3},
        distributions={MetricKey("Parse", MetricName("ns", "size")): DistributionData(10, 2, 4, 6)},
        gauges={MetricKey("Parse", MetricName("ns", "level")): GaugeData(7, 1700000000.5)},
        string_sets={MetricKey("Parse", MetricName("ns", "kinds")): frozenset({"a", "b"})},
    )
    reports.channel().send(every_kind)
    assert reports.take() == every_kind  # merged before the sender got its answer
    frame = attempt_reports._framed(reports.key, attempt_reports.updates_to_json(seen(2)))
    assert send_raw(reports.address, frame) == b"\x01"
    assert reports.take() == seen(2)


def test_a_peer_without_the_key_has_only_the_header_read(reports, monkeypatch):
    reads = []
    read = attempt_reports._read_exactly
    monkeypatch.setattr(attempt_reports, "_read_exactly", lambda c, size, deadline: (reads.append(size), read(c, size, deadline))[1])
    # What the old listener read whole before looking at the token: one endless line.
    assert send_raw(reports.address, b"x" * (8 << 20)) == b""
    # A header signed with another key, announcing a body.
    assert send_raw(reports.address, header(secrets.token_bytes(32), 1000) + b"[]" * 500) == b""
    assert eventually(lambda: len(reads) == 2)
    assert reads == [attempt_reports._HEADER_BYTES] * 2  # 89 bytes each, no body
    assert not reports.take()


def test_a_body_past_the_limit_is_refused_before_it_is_read(reports, monkeypatch, caplog):
    reads = []
    read = attempt_reports._read_exactly
    monkeypatch.setattr(attempt_reports, "_read_exactly", lambda c, size, deadline: (reads.append(size), read(c, size, deadline))[1])
    with caplog.at_level(logging.WARNING, logger=attempt_reports.__name__):
        assert send_raw(reports.address, header(reports.key, attempt_reports.MAX_REPORT_BYTES + 1)) == b""
    assert reads == [attempt_reports._HEADER_BYTES]
    assert "past the 16777216 bytes at most that are read" in caplog.text


def test_a_header_that_is_not_ascii_is_refused_without_an_exception(reports, monkeypatch, caplog):
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    with caplog.at_level(logging.WARNING, logger=attempt_reports.__name__):
        assert send_raw(reports.address, "é".encode() * 60 + b"\xff" * 89 + b"\n") == b""
        reports.channel().send(seen(1))
    assert reports.take() == seen(1)  # the listener goes on serving
    assert raised == []
    assert "not signed with the run's key" in caplog.text


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "tls"])
def test_an_idle_or_dribbling_connection_is_cut_at_its_deadline(monkeypatch, encrypted):
    monkeypatch.setattr(attempt_reports, "CONNECTION_SECONDS", 0.5)
    listener = AttemptReports("127.0.0.1", encrypted=encrypted)
    try:
        for dribble in (False, True):
            with socket.create_connection(listener.address, timeout=10) as connection:
                stop = threading.Event()

                def drip(connection=connection, stop=stop):
                    while not stop.wait(0.1):
                        try:
                            connection.sendall(b"\x16")  # a byte of a TLS record, or of a header
                        except OSError:
                            return

                if dribble:
                    threading.Thread(target=drip, daemon=True).start()
                started = time.monotonic()
                try:
                    answer = connection.recv(1)
                except ConnectionError:
                    answer = b""
                stop.set()
                assert answer == b""
                assert time.monotonic() - started < 3
    finally:
        listener.close()


def test_connections_past_the_cap_are_closed_unread(monkeypatch):
    monkeypatch.setattr(attempt_reports, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(attempt_reports, "CONNECTION_SECONDS", 3.0)
    listener = AttemptReports("127.0.0.1")
    idle = [socket.create_connection(listener.address, timeout=10) for _ in range(3)]
    try:
        serving = lambda: sum(t.name == "sparkbeam-attempt-report" for t in threading.enumerate())  # noqa: E731
        assert eventually(lambda: serving() == 3)
        started = time.monotonic()
        assert send_raw(listener.address, attempt_reports._framed(listener.key, b"[]")) == b""
        assert time.monotonic() - started < 1  # closed at once, not queued behind the idle ones
        assert serving() == 3
    finally:
        for connection in idle:
            connection.close()
    try:
        assert eventually(lambda: serving() == 0)
        listener.channel().send(seen(1))  # the slots are free again
        assert listener.take() == seen(1)
    finally:
        listener.close()


def test_a_captured_report_sent_again_is_not_merged_twice(reports):
    frame = attempt_reports._framed(reports.key, attempt_reports.updates_to_json(seen(5)))
    assert send_raw(reports.address, frame) == b"\x01"
    assert send_raw(reports.address, frame) == b""
    assert reports.take() == seen(5)


def test_a_tampered_body_is_refused(reports):
    frame = bytearray(attempt_reports._framed(reports.key, attempt_reports.updates_to_json(seen(5))))
    frame[-3] ^= 0x01  # a digit of the count
    assert send_raw(reports.address, bytes(frame)) == b""
    assert not reports.take()


BAD_BODIES = {
    "a string counter": b'[["counters", "S", "ns", "n", "3"]]',
    "a boolean counter": b'[["counters", "S", "ns", "n", true]]',
    "NaN": b'[["counters", "S", "ns", "n", NaN]]',
    "Infinity": b'[["counters", "S", "ns", "n", -Infinity]]',
    "a float that overflows": b'[["counters", "S", "ns", "n", 1e999]]',
    "an int past int64": b'[["counters", "S", "ns", "n", 36893488147419103232]]',
    "an int of 5000 digits": b'[["counters", "S", "ns", "n", ' + b"9" * 5000 + b"]]",
    "a float in a distribution": b'[["distributions", "S", "ns", "d", [1.5, 1, 1, 1]]]',
    "a distribution of three": b'[["distributions", "S", "ns", "d", [1, 1, 1]]]',
    "a negative count": b'[["distributions", "S", "ns", "d", [1, -1, 1, 1]]]',
    "a gauge before the epoch": b'[["gauges", "S", "ns", "g", [1, -5]]]',
    "a number in a string set": b'[["string_sets", "S", "ns", "s", ["a", 1]]]',
    "an unknown kind": b'[["histograms", "S", "ns", "h", 1]]',
    "a step that is not a string": b'[["counters", 3, "ns", "n", 1]]',
    "a row of four": b'[["counters", "S", "ns", 1]]',
    "a key twice": b'[["counters", "S", "ns", "n", 1], ["counters", "S", "ns", "n", 2]]',
    "an object": b'{"counters": {}}',
    "not UTF-8": b'[["counters", "S\xff", "ns", "n", 1]]',
    "not JSON": b"[[",
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_badly_typed_report_is_refused_whole(body):
    with pytest.raises(BadReport):
        report_from_json(body)


def test_a_bad_report_is_logged_and_never_merged(reports, caplog):
    with caplog.at_level(logging.WARNING, logger=attempt_reports.__name__):
        for body in (BAD_BODIES["a string counter"], b'[["counters", "Parse", "ns", "seen", 1], ' + BAD_BODIES["NaN"][1:]):
            assert send_raw(reports.address, attempt_reports._framed(reports.key, body)) == b""
        reports.channel().send(seen(1))
    assert reports.take() == seen(1)  # the next merge is not broken by them
    assert caplog.text.count("ignored a failed task attempt's metrics report") == 2


def test_every_kind_survives_the_wire():
    updates = MetricUpdates(
        counters={COUNTER: 2**63 - 1, MetricKey("S", MetricName("ns", "f")): 0.25},
        distributions={COUNTER: DistributionData(2**64, 3, -(2**63), 2**63 - 1)},
        gauges={COUNTER: GaugeData(-4, 0.0)},
        string_sets={COUNTER: frozenset({"é", ""})},
    )
    assert report_from_json(attempt_reports.updates_to_json(updates)) == updates


def test_when_spark_encrypts_the_channel_is_tls_with_the_runs_own_certificate(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(attempt_reports.tempfile, "tempdir", str(tmp_path))
    listener = AttemptReports("127.0.0.1", encrypted=True)
    other = AttemptReports("127.0.0.1", encrypted=True)
    try:
        assert os.listdir(tmp_path) == []  # the key's folder is gone once the key is loaded
        channel = listener.channel()
        assert channel.certificate is not None and channel.certificate != other.channel().certificate
        channel.send(seen(3))
        assert listener.take() == seen(3)
        # A report in clear, signed with the run's key: not read (no TLS handshake; the
        # answer, if any, is a TLS alert).
        assert send_raw(listener.address, attempt_reports._framed(listener.key, attempt_reports.updates_to_json(seen(1)))) != b"\x01"
        # An executor pinning another certificate than the one presented sends nothing.
        with caplog.at_level(logging.WARNING, logger=attempt_reports.__name__):
            ReportChannel(listener.address, listener.key, other.channel().certificate).send(seen(1))
        assert "could not report a failed task attempt's metrics" in caplog.text
        assert not listener.take()
    finally:
        listener.close()
        other.close()


@pytest.mark.parametrize(("openssl", "reason"), [(None, "no 'openssl' command"), ("/bin/false", "could not make a certificate")])
def test_without_a_way_to_make_a_certificate_the_channel_is_switched_off_with_one_warning(monkeypatch, caplog, openssl, reason):
    monkeypatch.setattr(attempt_reports.shutil, "which", lambda name: openssl)
    with caplog.at_level(logging.WARNING, logger=attempt_reports.__name__):
        listener = AttemptReports("127.0.0.1", encrypted=True)
        listener.close()
    assert listener.channel() is None
    (warning,) = caplog.records
    assert reason in warning.getMessage()
    assert "switched off" in warning.getMessage() and "attempted metrics equal committed" in warning.getMessage()
    MetricsChannel(None, None, b"k").report_failure(seen(1))  # a task then reports nowhere


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"spark.network.crypto.enabled": "true"}, True),
        ({"spark.ssl.enabled": "TRUE"}, True),
        ({"spark.ssl.rpc.enabled": "true"}, True),
        ({"spark.network.crypto.enabled": "false", "spark.ssl.enabled": "false"}, False),
        ({}, False),
    ],
)
def test_the_channel_is_encrypted_when_spark_s_traffic_is(conf, expected):
    assert attempt_reports.encrypted_channel_wanted(conf) is expected


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"spark.master": "local[2]", "spark.driver.host": "10.0.0.5", "spark.driver.bindAddress": "0.0.0.0"}, ("127.0.0.1", "127.0.0.1")),
        ({"spark.master": "local-cluster[2,1,1024]", "spark.driver.host": "10.0.0.5"}, ("127.0.0.1", "127.0.0.1")),
        ({"spark.master": "spark://m:7077", "spark.driver.host": "203.0.113.7", "spark.driver.bindAddress": "0.0.0.0"}, ("0.0.0.0", "203.0.113.7")),
        ({"spark.master": "yarn", "spark.driver.host": "10.0.0.5"}, ("10.0.0.5", "10.0.0.5")),
    ],
)
def test_the_listener_binds_as_spark_s_driver_binds_and_advertises_the_driver_host(conf, expected):
    assert attempt_reports.listen_addresses(conf) == expected


def test_behind_nat_it_binds_the_bind_address_and_advertises_the_public_host():
    # 203.0.113.7 (TEST-NET-3) is no address of this machine: binding it fails with
    # EADDRNOTAVAIL, as binding spark.driver.host did under NAT.
    listener = AttemptReports("0.0.0.0", "203.0.113.7")
    try:
        host, port = listener.address
        assert host == "203.0.113.7"
        ReportChannel(("127.0.0.1", port), listener.key, None).send(seen(1))
        assert listener.take() == seen(1)
    finally:
        listener.close()
