"""One run at a time per checkpoint directory: a lease with its holder and a heartbeat.

A second run started on a live checkpoint directory would remove the first one's
uncommitted write-ahead-log batch and temporary output folders, overwrite its journal and
delete its checkpoint in progress. So a stream holds a lease on its directory while it runs:

    lease/<generation>.json              who holds it: host, pid (and the process's start),
                                         user, start time, a token; written once, never changed
    lease/<generation>.beat-<count>      the holder's heartbeat: a new file every few seconds
                                         (the previous one then removed)
    lease/<generation>.released          the holder ended and let the lease go

The lease is the newest generation. Taking it means creating the next generation's file
with create-if-absent (``commits.create_new``: a hard link on local disks, Hadoop's create
without overwrite elsewhere), so of two runs racing for it exactly one wins; nothing is
ever replaced, so no reader sees a lease missing while it is rewritten. A lease is free
when it was released, when its holder ran on this host and its process is gone, or when
its last heartbeat is older than ``stale_after`` seconds (by this host's clock: hosts must
agree on the time to within that). Otherwise the run is refused naming the holder.

A holder checks, at each heartbeat and before each step, that no newer generation exists;
if one does (it was judged dead after a pause longer than ``stale_after``), it stops.
"""

from __future__ import annotations

import contextlib
import datetime
import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.spark.checkpoints import LEASE_DIR, CheckpointError

__all__ = ["HEARTBEAT_SECONDS", "STALE_SECONDS", "CheckpointLease", "LeaseError", "newest_generation"]

_LOG = logging.getLogger(__name__)

#: how often a holder renews its lease, and how long after the last renewal another run
#: may take it over (a holder on the same host whose process is gone: at once)
HEARTBEAT_SECONDS = 5.0
STALE_SECONDS = 60.0


class LeaseError(CheckpointError):
    """Another run holds the checkpoint directory, or took it from this one."""


def _process_start(pid: int) -> str | None:
    """When the process ``pid`` started (Linux's /proc), to tell it from a later one that
    reuses the number; None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19].decode() if len(fields) > 19 else None  # field 22 of stat: starttime


def _process_gone(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # another user's process: alive
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return True  # killed, not yet reaped
    except (OSError, IndexError):
        return False
    return started is not None and _process_start(pid) not in (None, started)


def _valid_holder(holder: Any) -> dict[str, Any] | None:
    """A holder as ``_holder_bytes`` writes it, or None (a file still being written, or
    not one sparkbeam wrote: it gets no say beyond its age)."""
    if not isinstance(holder, dict):
        return None
    typed = (
        isinstance(holder.get("host"), str)
        and isinstance(holder.get("pid"), int)
        and isinstance(holder.get("started"), (int, float))
        and isinstance(holder.get("user"), str)
    )
    return holder if typed else None


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name for this uid (a container): its number says enough
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def newest_generation(root: str) -> int | None:
    """The newest generation of the lease of the checkpoint directory ``root`` (None: never
    taken). A process that is not the holder (a Spark Connect server's task writing for a
    run) checks with it that its run still holds the lease."""
    found = CheckpointLease(root)._generations()
    return max(found) if found else None


class CheckpointLease:
    """The lease of one checkpoint directory (see the module docs)."""

    def __init__(
        self,
        root: str,
        *,
        heartbeat: float = HEARTBEAT_SECONDS,
        stale_after: float = STALE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.directory = commits.join(root, LEASE_DIR)
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.clock = clock
        self.generation: int | None = None
        self.token = uuid.uuid4().hex
        self.lost: str | None = None  # why this run no longer holds the lease
        #: why the lease was taken from a run that did not let it go (None: it was free)
        self.took_over: str | None = None
        self._beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- looking -----------------------------------------------------------------------------
    def _generations(self) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {}
        for name in commits.list_names(self.directory):
            stem, dot, _ = name.partition(".")
            if stem.isdigit() and dot and not commits.is_temporary(name):
                found.setdefault(int(stem), []).append(name)
        return found

    def _holder(self) -> tuple[int, dict[str, Any] | None, float | None, bool] | None:
        """The newest generation: its number, its holder (None while it is being written),
        its last heartbeat's time and whether it was released."""
        generations = self._generations()
        if not generations:
            return None
        newest = max(generations)
        names = generations[newest]
        released = f"{newest}.released" in names
        path = commits.join(self.directory, f"{newest}.json")
        try:
            holder = _valid_holder(json.loads(commits.read_bytes(path)))
        except FileNotFoundError:
            return self._holder() if self._generations() != generations else (newest, None, None, released)
        except ValueError:
            holder = None  # being written (Hadoop's create shows the file before its bytes)
        beats = sorted((int(name.rsplit("-", 1)[1]), name) for name in names if ".beat-" in name and name.rsplit("-", 1)[1].isdigit())
        last = None
        for _, name in reversed(beats):
            try:
                last = float(json.loads(commits.read_bytes(commits.join(self.directory, name)))["time"])
                break
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                continue  # replaced by a newer beat meanwhile
        return newest, holder, last, released

    def _stale(self, holder: dict[str, Any] | None, last_beat: float | None, released: bool, generation: int) -> str | None:
        """Why the lease of ``holder`` may be taken over, or None if its run may be alive."""
        if released:
            return "its run ended"
        now = self.clock()
        if holder is None:
            try:
                written = commits.modified_time(commits.join(self.directory, f"{generation}.json"))
            except OSError:
                return None
            return f"its lease file was left half-written {now - written:.0f} s ago" if now - written > self.stale_after else None
        if holder["host"] == socket.gethostname() and _process_gone(holder["pid"], holder.get("process_start")):
            return f"its process {holder['pid']} on this host is gone"
        beat = last_beat if last_beat is not None else float(holder.get("started", 0))
        if now - beat > self.stale_after:
            return f"its last heartbeat was {now - beat:.0f} s ago (more than {self.stale_after:.0f} s)"
        return None

    def _describe(self, holder: dict[str, Any] | None, last_beat: float | None) -> str:
        if holder is None:
            return "a run that is taking the lease right now"
        beat = last_beat if last_beat is not None else holder.get("started", 0)
        return (
            f"pid {holder.get('pid')} of user {holder.get('user')} on host {holder.get('host')}, started "
            f"{_when(float(holder.get('started', 0)))}, last heartbeat {max(0.0, self.clock() - float(beat)):.0f} s ago"
        )

    def check_free(self) -> None:
        """Refuse if a live run holds the lease (what ``acquire`` would refuse; it takes nothing)."""
        found = self._holder()
        if found is None:
            return
        generation, holder, last_beat, released = found
        if self._stale(holder, last_beat, released, generation) is None:
            raise self._refusal(holder, last_beat)

    def _refusal(self, holder: dict[str, Any] | None, last_beat: float | None) -> LeaseError:
        msg = (
            f"--checkpoint_dir={self.root} is in use by another run: {self._describe(holder, last_beat)}. "
            "Stop that run first, or give this one another checkpoint directory. If that run is gone, its lease "
            f"expires {self.stale_after:.0f} s after its last heartbeat (at once for a run of this host whose "
            "process has ended)"
        )
        return LeaseError(msg)

    # -- holding -----------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lease (a stale one over), or refuse naming the run that holds it."""
        commits.makedirs(self.directory, private=True)
        for _ in range(20):
            found = self._holder()
            reason = None
            if found is None:
                generation = 0
            else:
                newest, holder, last_beat, released = found
                reason = self._stale(holder, last_beat, released, newest)
                if reason is None:
                    raise self._refusal(holder, last_beat)
                generation = newest + 1
            if commits.create_new(commits.join(self.directory, f"{generation}.json"), self._holder_bytes()):
                self.generation = generation
                if found is not None and reason != "its run ended":
                    self.took_over = reason
                    _LOG.warning("took over the lease of --checkpoint_dir=%s: %s", self.root, reason)
                self._beat()
                self._forget_before(generation)
                self._thread = threading.Thread(target=self._keep, name="sparkbeam-checkpoint-lease", daemon=True)
                self._thread.start()
                return
            time.sleep(0.05)  # another run made that generation first: look again
        msg = f"--checkpoint_dir={self.root}: could not take its lease (other runs kept taking it); try again"
        raise LeaseError(msg)

    def _holder_bytes(self) -> bytes:
        pid = os.getpid()
        holder = {
            "host": socket.gethostname(),
            "pid": pid,
            "process_start": _process_start(pid),
            "user": _user(),
            "started": self.clock(),
            "token": self.token,
        }
        return json.dumps(holder, sort_keys=True).encode()

    def _beat(self) -> None:
        self._beats += 1
        name = f"{self.generation}.beat-{self._beats}"
        with commits.batched(self.directory):  # one round trip where that costs one (Spark Connect's)
            commits.write_bytes(commits.join(self.directory, name), json.dumps({"time": self.clock()}).encode(), private=True)
            previous = f"{self.generation}.beat-{self._beats - 1}"
            commits.remove(commits.join(self.directory, previous), missing_ok=True)  # none before the first beat

    def _forget_before(self, generation: int) -> None:
        for number, names in self._generations().items():
            if number < generation:
                for name in names:
                    commits.remove(commits.join(self.directory, name), missing_ok=True)  # a racing taker's clean-up

    def _still_ours(self) -> bool:
        generations = self._generations()
        return bool(generations) and max(generations) == self.generation

    def _keep(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                if not self._still_ours():
                    self.lost = "another run took its lease over (this run's heartbeat had stopped for too long)"
                    return
                self._beat()
            except Exception as error:  # a file system hiccup: the next beat tries again
                _LOG.warning("could not renew the lease of --checkpoint_dir=%s: %s", self.root, error)

    def check(self) -> None:
        """Raise if this run no longer holds the lease (before each step and checkpoint)."""
        if self.lost is None and self.generation is not None and not self._still_ours():
            self.lost = "another run took its lease over"
        if self.lost is not None:
            msg = f"--checkpoint_dir={self.root}: this run stopped: {self.lost}"
            raise LeaseError(msg)

    def release(self) -> None:
        """Let the lease go (the run has ended): the next run takes it at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.generation is not None and self.lost is None:
            with contextlib.suppress(Exception):
                if self._still_ours():
                    commits.write_bytes(commits.join(self.directory, f"{self.generation}.released"), b"{}", private=True)
        self.generation = None
