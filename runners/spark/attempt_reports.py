"""The channel from a failing task attempt to the driver: its metric updates, authenticated.

A task attempt that fails sends the metric updates it made (``metrics.py``) to a listener on
the driver (``AttemptReports``), one report per connection. The listener is reachable by
anyone who can reach the driver, so nothing is read before it is authenticated beyond a
fixed-size header, and nothing secret is sent:

    header  magic b"SBMR", version 1, body length (4 bytes), nonce (16), body MAC (32)
    MAC     HMAC-SHA256 over the header above, under the run's report key
    body    the updates as JSON rows (never unpickled), at most ``MAX_REPORT_BYTES``

The driver checks the header's MAC before it reads the body (a peer without the key costs
it 89 bytes), refuses a nonce it has seen (a captured report cannot be replayed), then
checks the body's MAC and every value's kind, type and finiteness; a bad report is logged
and ignored, never merged. Each connection has a deadline and at most
``MAX_CONNECTIONS`` are served at once. The driver answers one byte once the updates are
merged, so a failing task's report is in before Spark hears of the failure.

When Spark's own traffic is encrypted (``spark.network.crypto.enabled``, ``spark.ssl``),
so is this channel: TLS with a certificate made for the run (``openssl``), which the
executors pin: they get it with the channel and accept exactly that certificate. Where no
certificate can be made, the channel is switched off with one warning (attempted metrics
then equal committed).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import math
import os
import secrets
import shutil
import socket
import socketserver
import ssl
import struct
import subprocess
import tempfile
import threading
import time
from typing import Any

from sparkbeam.metrics.cells import BoundedTrieData, DistributionData, GaugeData
from sparkbeam.metrics.execution import MetricKey, MetricUpdates
from sparkbeam.metrics.metricbase import MetricName

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_REPORT_BYTES",
    "AttemptReports",
    "BadReport",
    "ReportChannel",
    "encrypted_channel_wanted",
    "listen_addresses",
    "report_from_json",
    "updates_to_json",
]

_LOG = logging.getLogger(__name__)

_MAGIC = b"SBMR"
_VERSION = 1
#: magic, version, body length, nonce, body MAC; then the header's own MAC
_HEAD = struct.Struct(">4sBI16s32s")
_HEADER_BYTES = _HEAD.size + 32
_HEADER_CONTEXT = b"sparkbeam-attempt-report-header\0"
_BODY_CONTEXT = b"sparkbeam-attempt-report-body\0"
_ACK = b"\x01"

#: the largest report body read (an authenticated executor's; a failed attempt's updates
#: are a few rows per metric it touched)
MAX_REPORT_BYTES = 16 * 1024 * 1024
#: reports served at once; a connection past it is closed unread
MAX_CONNECTIONS = 16
#: the time a connection has, from being accepted to the report read (TLS handshake too)
CONNECTION_SECONDS = 10.0
#: how long an executor waits to connect, and then for the driver's answer
SEND_TIMEOUT_SECONDS = 5.0
#: How often the listener's thread looks whether it is to stop. ``close`` waits for that
#: look, which ends every run: socketserver's default (0.5 s) added up to half a second to
#: every run's wall-clock time; an idle look costs a few microseconds.
SHUTDOWN_POLL_SECONDS = 0.02

_INT64 = (-(2**63), 2**63 - 1)
#: a distribution's sum may pass int64 (Python's ints do not overflow)
_SUM = (-(2**127), 2**127 - 1)


class BadReport(ValueError):
    """A report the driver refuses; the message says why."""


# -- the body ---------------------------------------------------------------------------


def updates_to_json(updates: MetricUpdates) -> bytes:
    rows: list[list[Any]] = []
    for kind in MetricUpdates.KINDS:
        for key, value in getattr(updates, kind).items():
            if kind == "distributions":
                data: Any = [value.sum, value.count, value.min, value.max]
            elif kind == "gauges":
                data = [value.value, value.timestamp]
            elif kind == "string_sets":
                data = sorted(value)
            elif kind == "bounded_tries":
                data = [value.bound, sorted([list(path) for path in value.paths], key=repr)]
            else:
                data = value
            rows.append([kind, key.step, key.metric.namespace, key.metric.name, data])
    return json.dumps(rows).encode("utf-8")


def _no_constant(name: str) -> Any:
    msg = f"{name} is not a metric value"
    raise BadReport(msg)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf
        msg = f"{text} is not a finite number"
        raise BadReport(msg)
    return value


def _int(value: Any, bounds: tuple[int, int] = _INT64) -> int:
    if type(value) is not int or not bounds[0] <= value <= bounds[1]:  # bool is not a count
        msg = f"{value!r} is not an integer in [{bounds[0]}, {bounds[1]}]"
        raise BadReport(msg)
    return value


def _number(value: Any) -> int | float:
    if type(value) is float:  # finite: _finite_float parsed it
        return value
    return _int(value)


def _list_of(data: Any, size: int) -> list:
    if type(data) is not list or len(data) != size:
        msg = f"{data!r} is not a list of {size}"
        raise BadReport(msg)
    return data


def _value(kind: str, data: Any) -> Any:
    if kind == "counters":
        return _number(data)
    if kind == "distributions":
        total, count, low, high = _list_of(data, 4)
        distribution = DistributionData(_int(total, _SUM), _int(count), _int(low), _int(high))
        if count < 0 or (count > 0 and low > high):
            msg = f"{data!r} is not a distribution's sum, count, min and max"
            raise BadReport(msg)
        return distribution
    if kind == "gauges":
        value, timestamp = _list_of(data, 2)
        stamp = _number(timestamp)
        if stamp < 0:
            msg = f"{timestamp!r} is not a time"
            raise BadReport(msg)
        return GaugeData(_int(value), float(stamp))
    if kind == "bounded_tries":
        return _bounded_trie(data)
    if type(data) is not list or not all(type(item) is str for item in data):
        msg = f"{data!r} is not a list of strings"
        raise BadReport(msg)
    return frozenset(data)


def _bounded_trie(data: Any) -> BoundedTrieData:
    """A bounded trie's ``[bound, paths]``, each path its segments (strings) and whether it
    was truncated (a bool last), as ``BoundedTrieData`` keeps them."""
    bound, paths = _list_of(data, 2)
    if type(paths) is not list:
        msg = f"{paths!r:.200} is not a bounded trie's list of paths"
        raise BadReport(msg)
    kept = set()
    for path in paths:
        if (
            type(path) is not list
            or not path
            or type(path[-1]) is not bool
            or not all(type(segment) is str for segment in path[:-1])
        ):
            msg = f"{path!r:.200} is not a bounded trie's path: strings, then whether it was truncated"
            raise BadReport(msg)
        kept.add(tuple(path))
    return BoundedTrieData(frozenset(kept), _int(bound, (1, _INT64[1])))


def report_from_json(body: bytes) -> MetricUpdates:
    """The updates of a report's body, every row checked; ``BadReport`` names the first
    thing wrong (nothing of a bad report is kept)."""
    try:
        rows = json.loads(body.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite_float)
    except BadReport:
        raise
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, an int of 5,000 digits
        msg = f"not JSON in UTF-8: {error}"
        raise BadReport(msg) from None
    if type(rows) is not list:
        msg = "not a list of rows"
        raise BadReport(msg)
    kinds: dict[str, dict[MetricKey, Any]] = {kind: {} for kind in MetricUpdates.KINDS}
    for row in rows:
        if type(row) is not list or len(row) != 5:
            msg = f"a row is not [kind, step, namespace, name, value]: {row!r:.200}"
            raise BadReport(msg)
        kind, step, namespace, name, data = row
        if kind not in kinds or not all(type(part) is str for part in (step, namespace, name)):
            msg = f"a row's kind or names are not a metric's: {row!r:.200}"
            raise BadReport(msg)
        key = MetricKey(step, MetricName(namespace, name))
        if key in kinds[kind]:
            msg = f"{kind} {key} appears twice"
            raise BadReport(msg)
        kinds[kind][key] = _value(kind, data)
    return MetricUpdates(**kinds)


# -- the executors' side ------------------------------------------------------------------


def _framed(key: bytes, body: bytes) -> bytes:
    nonce = secrets.token_bytes(16)
    body_mac = hmac.new(key, _BODY_CONTEXT + nonce + body, hashlib.sha256).digest()
    head = _HEAD.pack(_MAGIC, _VERSION, len(body), nonce, body_mac)
    return head + hmac.new(key, _HEADER_CONTEXT + head, hashlib.sha256).digest() + body


class ReportChannel:
    """Where and how a task attempt reports (shipped with the stage's functions): the
    driver's advertised address, the run's report key, and the certificate to pin when
    the channel is TLS."""

    def __init__(self, address: tuple[str, int], key: bytes, certificate: str | None) -> None:
        self.address = address
        self.key = key
        self.certificate = certificate

    def send(self, updates: MetricUpdates) -> None:
        body = updates_to_json(updates)
        if len(body) > MAX_REPORT_BYTES:
            _LOG.warning(
                "a failed task attempt's metrics (%d bytes) are past the %d bytes the driver reads: not reported",
                len(body),
                MAX_REPORT_BYTES,
            )
            return
        try:
            with socket.create_connection(self.address, timeout=SEND_TIMEOUT_SECONDS) as raw:
                connection = self._secured(raw)
                connection.sendall(_framed(self.key, body))
                answered = connection.recv(1)
        except (OSError, ssl.SSLError) as error:
            _LOG.warning("could not report a failed task attempt's metrics to the driver at %s: %s", self.address, error)
            return
        if answered != _ACK:
            _LOG.warning("the driver at %s did not take a failed task attempt's metrics", self.address)

    def _secured(self, raw: socket.socket) -> Any:
        if self.certificate is None:
            return raw
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # Trust exactly the run's certificate: no system CA, no host name (the advertised
        # host may be an address the certificate does not name); checked byte for byte.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=self.certificate)
        connection = context.wrap_socket(raw)
        presented = connection.getpeercert(binary_form=True)
        if presented is None or presented != ssl.PEM_cert_to_DER_cert(self.certificate):
            msg = "the driver's metrics listener presented another certificate than the run's"
            raise ssl.SSLError(msg)
        return connection


# -- the driver's side --------------------------------------------------------------------


def encrypted_channel_wanted(conf: Any) -> bool:
    """Whether Spark's own traffic is encrypted in this session's conf (``conf.get``)."""
    names = ("spark.network.crypto.enabled", "spark.ssl.enabled", "spark.ssl.rpc.enabled")
    return any((conf.get(name) or "").strip().lower() == "true" for name in names)


def listen_addresses(conf: Any) -> tuple[str, str]:
    """(address to bind, host to advertise to executors), as Spark's driver binds: to
    ``spark.driver.bindAddress`` when set (a NAT or container, where ``spark.driver.host``
    is an address this machine does not have), else to the host it advertises,
    ``spark.driver.host``. A local master's executors are this machine: loopback for both,
    reachable from nowhere else."""
    if (conf.get("spark.master") or "").startswith("local"):
        return "127.0.0.1", "127.0.0.1"
    advertised = conf.get("spark.driver.host") or socket.gethostname()
    return conf.get("spark.driver.bindAddress") or advertised, advertised


class _NoCertificate(Exception):
    pass


def _certificate_for_run() -> tuple[ssl.SSLContext, str]:
    """A server context with a self-signed certificate made for this run, and the
    certificate (PEM) to pin; ``_NoCertificate`` says why there is none. The key is
    written to a private folder only for ``load_cert_chain``, which reads files."""
    openssl = shutil.which("openssl")
    if openssl is None:
        msg = "no 'openssl' command on the driver's PATH"
        raise _NoCertificate(msg)
    folder = tempfile.mkdtemp(prefix="sparkbeam-metrics-tls-")  # 0700, this user's
    try:
        key_path, cert_path = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
        made = subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key_path, "-out", cert_path, "-days", "30", "-subj", "/CN=sparkbeam-attempt-metrics"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if made.returncode != 0:
            msg = f"{openssl} could not make a certificate: {made.stderr.decode(errors='replace').strip()[-300:]}"
            raise _NoCertificate(msg)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_path, key_path)
        with open(cert_path) as handle:
            return context, handle.read()
    except (OSError, subprocess.SubprocessError, ssl.SSLError) as error:
        msg = f"making a certificate with {openssl} failed: {error}"
        raise _NoCertificate(msg) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Refused(Exception):
    pass


def _cut(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        connection.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it


def _read_exactly(connection: Any, size: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            msg = f"no whole report within {CONNECTION_SECONDS:g} s"
            raise _Refused(msg)
        connection.settimeout(remaining)
        chunk = connection.recv(min(size - len(data), 1 << 16))
        if not chunk:
            msg = "the connection closed before the report's end"
            raise _Refused(msg)
        data += chunk
    return bytes(data)


class _Server(socketserver.TCPServer):
    allow_reuse_address = False
    request_queue_size = 64

    def __init__(self, reports: AttemptReports, bind_host: str) -> None:
        # An IPv6 bind address takes an IPv6 socket (socketserver's default is IPv4).
        family, _, _, _, sockaddr = socket.getaddrinfo(bind_host, 0, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
        self.address_family = family
        self.reports = reports
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(sockaddr, socketserver.BaseRequestHandler)  # type: ignore[arg-type]  # an IP address

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.reports.refused("too many connections at once")
            self.shutdown_request(request)
            return
        threading.Thread(target=self._serve, args=(request,), name="sparkbeam-attempt-report", daemon=True).start()

    def _serve(self, request: socket.socket) -> None:
        try:
            self.reports.serve(request)
        finally:
            self.shutdown_request(request)
            self.slots.release()


class AttemptReports:
    """The driver's listener for failed task attempts' metric updates: bound to
    ``bind_host``, advertised to executors as ``advertised_host`` (``listen_addresses``),
    over TLS when ``encrypted``."""

    def __init__(self, bind_host: str, advertised_host: str | None = None, *, encrypted: bool = False) -> None:
        self.key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._pending = MetricUpdates()
        self._nonces: set[bytes] = set()
        self._refusals = 0
        self._tls: ssl.SSLContext | None = None
        self.certificate: str | None = None
        #: whether executors can report at all (off when TLS is due and cannot be had)
        self.enabled = True
        if encrypted:
            try:
                self._tls, self.certificate = _certificate_for_run()
            except _NoCertificate as missing:
                self.enabled = False
                _LOG.warning(
                    "Spark's traffic is encrypted, but no certificate could be made for the TLS listener of failed "
                    "task attempts' metrics (%s): the listener is switched off, and attempted metrics equal "
                    "committed ones for this run",
                    missing,
                )
                return
        self._server = _Server(self, bind_host)
        self.address = (advertised_host or bind_host, self._server.server_address[1])
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            name="sparkbeam-attempt-metrics",
            daemon=True,
        ).start()

    def channel(self) -> ReportChannel | None:
        """What executors need to report here; None when the listener is switched off."""
        if not self.enabled:
            return None
        return ReportChannel(self.address, self.key, self.certificate)

    def serve(self, raw: socket.socket) -> None:
        """Read one report from a connection, merge it if it is good, answer."""
        deadline = time.monotonic() + CONNECTION_SECONDS
        # A socket timeout bounds each read, not their sum: a peer sending a byte now and
        # then would hold the connection (and a TLS handshake) for ever. Cut it at the deadline.
        cut = threading.Timer(CONNECTION_SECONDS, _cut, (raw,))
        cut.daemon = True
        cut.start()
        try:
            raw.settimeout(CONNECTION_SECONDS)
            connection: Any = raw if self._tls is None else self._tls.wrap_socket(raw, server_side=True)
            self.add(self._read_report(connection, deadline))
            connection.sendall(_ACK)
        except _Refused as refusal:
            self.refused(str(refusal))
        except BadReport as bad:
            _LOG.warning("ignored a failed task attempt's metrics report: %s", bad)
        except (OSError, ssl.SSLError) as error:
            self.refused(f"{type(error).__name__}: {error}")
        finally:
            cut.cancel()

    def _read_report(self, connection: Any, deadline: float) -> MetricUpdates:
        header = _read_exactly(connection, _HEADER_BYTES, deadline)
        head, header_mac = header[: _HEAD.size], header[_HEAD.size :]
        if not hmac.compare_digest(hmac.new(self.key, _HEADER_CONTEXT + head, hashlib.sha256).digest(), header_mac):
            msg = "its header is not signed with the run's key"
            raise _Refused(msg)
        magic, version, length, nonce, body_mac = _HEAD.unpack(head)
        if magic != _MAGIC or version != _VERSION:
            msg = f"a report of version {version!r}, where version {_VERSION} is read (executors of another sparkbeam?)"
            raise BadReport(msg)
        if length > MAX_REPORT_BYTES:
            msg = f"a report of {length} bytes, past the {MAX_REPORT_BYTES} bytes at most that are read"
            raise BadReport(msg)
        with self._lock:
            if nonce in self._nonces:
                msg = "a report sent before, sent again"
                raise _Refused(msg)
            self._nonces.add(nonce)
        body = _read_exactly(connection, length, deadline)
        if not hmac.compare_digest(hmac.new(self.key, _BODY_CONTEXT + nonce + body, hashlib.sha256).digest(), body_mac):
            msg = "its body is not the one its header signs"
            raise _Refused(msg)
        return report_from_json(body)

    def refused(self, reason: str) -> None:
        """A connection that brought no report: the first is logged, the others counted
        (a peer that is not the run's executors could fill the log)."""
        with self._lock:
            self._refusals += 1
            first = self._refusals == 1
        if first:
            _LOG.warning("refused a connection to the listener of failed task attempts' metrics: %s", reason)

    def add(self, updates: MetricUpdates) -> None:
        with self._lock:
            self._pending = self._pending.combine(updates)

    def take(self) -> MetricUpdates:
        """The reports received since the last ``take``."""
        with self._lock:
            taken, self._pending = self._pending, MetricUpdates()
        return taken

    def close(self) -> None:
        if not self.enabled:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._refusals > 1:
            _LOG.warning("the listener of failed task attempts' metrics refused %d connections in all", self._refusals)
