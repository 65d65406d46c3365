"""What ``nexmark_queries.py --cache`` keeps between runs: the events file, and Beam's runner's
output and times per (query, events, seed).

At 1,000,000 events Beam's local runners take from minutes to hours per query, and writing the
file takes a minute; a rerun of sparkbeam's side (after a fix, or in a quieter hour) need not
pay for either again. Both are kept in a per-user folder closed to others
(``$SPARKBEAM_NEXMARK_CACHE``, else ``~/.cache/sparkbeam/nexmark``, ``tools/private_cache``).
Beam's rows are stored as JSON holding each row's ``repr`` and read back with
``ast.literal_eval``, which builds literals only: nothing there is unpickled or run. A row that
does not survive that round trip leaves the query uncached (said so) rather than wrong.

An entry is found by the query, the event count, the seed, Beam's runner, apache-beam's version
and a digest of the code that decides the rows (the generator, how a query is driven, how rows
are made comparable): a change to any of them makes new entries.
"""

from __future__ import annotations

import ast
import collections
import datetime
import hashlib
import json
import os
import pathlib
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The code whose change changes the file or the recorded rows.
FINGERPRINTED = ("sdk/testing/nexmark_generator.py", "tests/beam_frontend/nexmark.py", "tests/oracle.py")


def cache_folder() -> pathlib.Path:
    from tools.private_cache import cache_root, private_folder

    return private_folder(cache_root("SPARKBEAM_NEXMARK_CACHE", "nexmark"), "the Nexmark benchmark's cache", "SPARKBEAM_NEXMARK_CACHE")


def fingerprint() -> str:
    import apache_beam

    digest = hashlib.sha256(apache_beam.__version__.encode())
    for name in FINGERPRINTED:
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()[:16]


def events_file(events: int, seed: int) -> tuple[pathlib.Path, bool]:
    """The cached events file for ``events`` and ``seed``, written first if missing; and
    whether it was already there."""
    from sparkbeam.testing.nexmark_generator import NexmarkConfig, write_events

    folder = cache_folder()
    path = folder / f"events-{events}-{seed}-{fingerprint()}.json"
    if path.exists():
        return path, True
    # Written aside and renamed, so that an interrupted run leaves no partial file behind the name.
    handle, partial = tempfile.mkstemp(dir=folder, prefix=".events-", suffix=".json")
    os.close(handle)
    try:
        write_events(partial, NexmarkConfig(events=events, seed=seed))
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path, False


def _entry(query: int, events: int, seed: int, runner: str) -> pathlib.Path:
    return cache_folder() / f"beam-q{query}-{events}-{seed}-{runner}-{fingerprint()}.json"


def load_beam(query: int, events: int, seed: int, runner: str) -> tuple[collections.Counter, list[float], dict[str, Any]] | None:
    """Beam's rows, its run times and when and at what load it ran, if cached."""
    path = _entry(query, events, seed, runner)
    if not path.exists():
        return None
    stored = json.loads(path.read_text(encoding="utf-8"))
    rows = collections.Counter({ast.literal_eval(text): count for text, count in stored["rows"]})
    return rows, stored["seconds"], {"at": stored["at"], "load": stored["load"]}


def store_beam(query: int, events: int, seed: int, runner: str, rows: collections.Counter, seconds: list[float], load: float) -> str | None:
    """Keep Beam's rows and times; None, or why they were not kept."""
    texts = []
    for row, count in rows.items():
        text = repr(row)
        try:
            same = ast.literal_eval(text) == row
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            same = False
        if not same:
            return f"not cached: a row is not a literal ({text[:80]})"
        texts.append([text, count])
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    path = _entry(query, events, seed, runner)
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=".beam-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump({"seconds": seconds, "load": load, "at": at, "rows": texts}, out)
    os.replace(partial, path)
    return None
