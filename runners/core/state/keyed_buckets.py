"""Keyed state in hash buckets: a step reads and writes only the buckets it touches.

A partition's keyed state is a list of ``StateBucket`` records. Each holds the keys whose
hash falls in its range, pickled together as ``(key, state, report)`` entries (the key's
own hold, its window, next event-time and processing-time timer, windows held), and a
header, the fold of those reports: the bucket's range, the earliest
hold among its keys (with the key and window), its earliest event-time and processing-time
timer (window ends, triggers, user timers, garbage collection: what the engine and the
stateful step report) and how many keys and windows it holds. A step:

1. routes each key that receives elements to its bucket by the key's hash (the buckets'
   ranges cover the hash space; the partition's ``StateIndex`` says where each range's
   bucket is held);
2. touches a bucket only if a key of it receives elements, or its header says a timer is
   due (``step_values.nothing_due``, the rule that skips an idle stage, applied per bucket),
   found in the ``StateIndex``'s ordered timers without reading the other headers
   (``timer_index.py``);
3. unpickles the touched buckets and runs the grouping or the stateful DoFn
   (``GroupingRun``, ``StatefulRun``) on those of their keys that receive elements or
   whose own report has a timer due; the others keep their state and report as they
   are; pickles the buckets again with fresh headers;
4. hands every other bucket on as the record it came in: its bytes are not unpickled,
   copied in Python, or pickled again key by key.

Every bucket a step writes (run, split, or made by a merge) carries the step's number as
its ``version``; carried buckets keep theirs, so a checkpoint can write only the buckets
written since the last one (``runners/spark/state_checkpoints.py``). A bucket that is gone
(split or merged) is always replaced by newer ones covering its range.

The partition's summary (holds, next timers, state size) is the fold of the headers, read
off the index's heads, so the driver's watermark holds and skip decisions stay exact
without a scan of every key or every header. The index follows the buckets as a record of
its own (``records()`` yields it last); a partition that comes without it has it derived.

Ranges: a bucket at ``depth`` d with ``prefix`` p holds the keys whose hash has p as its
low d bits; the buckets of a partition are prefix-free and cover every hash, so each key
has exactly one bucket. A touched bucket that would hold more than ``MAX_KEYS`` keys is
split (one more bit, or several) before its keys run, so that each bucket's header is
computed from its own keys; two sibling buckets left empty are merged back (headers only,
nothing unpickled). Buckets stay small so that a step touching k keys reads
about k times ``MAX_KEYS`` / 2 keys, however many the partition holds.

The hash is Python's ``hash`` of the key, mixed; PySpark runs every worker of a run with
the same ``PYTHONHASHSEED`` (its partitioner needs it too). Each bucket records a probe of
the hash (the mixed hash of a fixed string): a partition whose buckets were written by a
process hashing otherwise (another seed) has every key re-routed, never split across two
buckets.

``pack(pairs) -> bytes`` and ``unpack(bytes) -> pairs`` are given by the backend (on Spark,
``state_chunks.py``'s pickler): this module imports no engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.grouping.records import (
    KeyedState,
    StateBucket,
    StateChunk,
    StateIndex,
    Summary,
)
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.runners.core.state import timer_index

__all__ = ["MAX_KEYS", "TARGET_KEYS", "BucketedPartition", "bucket_hash", "hash_probe"]

#: a touched bucket is split when it would hold more than MAX_KEYS keys, into buckets of
#: about TARGET_KEYS (measured: benchmarks/state_at_scale.py; docs/state_store.md)
TARGET_KEYS = 64
MAX_KEYS = 2 * TARGET_KEYS

_SALT = 0x5BD1E995
_MASK = (1 << 62) - 1


def bucket_hash(key: Any) -> int:
    """The hash that places ``key`` in a bucket: mixed so that its low bits do not repeat
    the partitioner's (which takes ``hash(key) % partitions``)."""
    return hash((hash(key), _SALT)) & _MASK


def hash_probe() -> int:
    """What this process's hash makes of a fixed string: equal in every process of a run."""
    return bucket_hash("sparkbeam state bucket")


#: run_keys(states, new, report, reports): runs a group of keys (``GroupingRun.run_keys``),
#: each kept key's report in ``reports``
RunKeys = Callable[[dict[Any, Any], dict[Any, list[Any]], StageSummary, dict[Any, tuple]], Iterable[tuple[Any, KeyedState]]]


class BucketedPartition:
    """One partition's state for one step (see the module docs): read its records, run the
    touched buckets with ``run``, then hand the buckets on."""

    def __init__(
        self, pack: Callable[[list[tuple[Any, Any, tuple]]], bytes], unpack: Callable[[bytes], list[tuple[Any, Any, tuple]]]
    ) -> None:
        self.pack = pack
        self.unpack = unpack
        self.probe = hash_probe()
        #: what the buckets written by this step are marked with (``StateBucket.version``)
        self.version = 0
        self.buckets: list[StateBucket] = []
        #: the buckets' timers and holds in order, as the last step left it (None: derived)
        self.index: StateIndex | None = None
        self.loose: dict[Any, Any] = {}  # key -> state, restored from a checkpoint
        self.new: dict[Any, list[Any]] = {}  # key -> elements (or lifted partials)
        #: what the step did, for the benchmark and the tests
        self.touched = 0
        self.keys_read = 0  # keys unpickled
        self.keys_run = 0  # keys stepped (with new elements or a timer due)
        self.derived = 0  # indexes rebuilt from the headers (none came, or it did not fit)

    def read(self, records: Iterable[tuple[Any, Any]]) -> None:
        """Sort a partition's records: buckets, state per key (restored), new elements (a
        previous step's ``Summary`` skipped)."""
        buckets, loose, new = self.buckets, self.loose, self.new
        unpack = self.unpack
        for key, record in records:
            kind = type(record)
            if kind is StateBucket:
                buckets.append(record)
            elif kind is StateIndex:
                self.index = record
            elif kind is KeyedState:
                loose[key] = record.state
            elif kind is Summary:
                # The previous step's: a backend may hand its step's records on as they are
                # when they hold nothing else (Spark: ``keyed_stages.state_of``).
                continue
            elif kind is StateChunk:
                # Chunks (checkpoint format 4) are unpacked per key when restored.
                msg = "a partition's state holds a StateChunk where buckets were expected; this is a sparkbeam bug"
                raise RuntimeError(msg)
            else:
                arrived = new.get(key)
                if arrived is None:
                    new[key] = [record]
                else:
                    arrived.append(record)
        if any(bucket.probe != self.probe for bucket in buckets):
            # Written by a process that hashes otherwise: every key is placed again.
            for bucket in buckets:
                if bucket.payload:
                    for key, state, _ in unpack(bucket.payload):
                        loose[key] = state
            buckets.clear()
            self.index = None

    def run(self, params: StepParams, run_keys: RunKeys) -> StageSummary:
        """Run the touched buckets' keys with ``run_keys``; the report of all the state kept
        (the fold of every bucket's header, read off the partition's ``StateIndex``)."""
        self.version = params.step
        if not self.buckets:
            self.buckets, self.index = [self._empty(0, 0)], None
        index = self.index
        if index is None or len(index.nodes) != len(self.buckets):
            index = self._rebuild()
        routed = self._route(index, self.buckets, params)
        if routed is None:  # the index does not describe these buckets: derived again
            index = self._rebuild()
            routed = self._route(index, self.buckets, params)
            if routed is None:
                msg = "a partition's state index, rebuilt from its buckets, does not place them; this is a sparkbeam bug"
                raise RuntimeError(msg)
        report = StageSummary()
        buckets = self.buckets  # as _rebuild left them (empty siblings merged)
        if routed:
            written = list(buckets)
            gone: list[StateBucket] = []
            placed: list[tuple[int, StateBucket]] = []
            # In the order the buckets are held, as a scan of them would run them.
            for position in sorted(routed):
                bucket = buckets[position]
                loose, new = routed[position]
                # key -> (state, its report as the bucket holds it; None: to be run)
                states: dict[Any, tuple[Any, tuple | None]] = {key: (state, None) for key, state in loose.items()}
                if bucket.payload:
                    for key, state, key_report in self.unpack(bucket.payload):
                        states[key] = (state, key_report)
                self.touched += 1
                self.keys_read += len(states)
                gone.append(bucket)
                for number, part in enumerate(self._split(bucket, states, new)):
                    made = self._run_bucket(*part, params, run_keys)
                    # A split's first part takes its parent's place, the others go last:
                    # every other bucket keeps its position (the index's stays right).
                    where = position if number == 0 else len(written)
                    if number == 0:
                        written[position] = made
                    else:
                        written.append(made)
                    placed.append((where, made))
            index = timer_index.updated(index, gone, placed)
            if any(_merges(index, bucket) for _, bucket in placed):
                merged = _merge_empty(written, self._empty)
                if len(merged) != len(written):
                    written, index = merged, timer_index.build(merged)
            self.buckets = written
        self.index = index
        timer_index.fold(index, self.buckets, report)
        return report

    def _rebuild(self) -> StateIndex:
        """The index derived from the headers (after a restore or a read-back, which carry
        none), empty siblings merged first as a step would have merged them."""
        self.derived += 1
        self.buckets = _merge_empty(self.buckets, self._empty)
        return timer_index.build(self.buckets)

    def _route(
        self, index: StateIndex, buckets: list[StateBucket], params: StepParams
    ) -> dict[int, tuple[dict[Any, Any], dict[Any, list[Any]]]] | None:
        """The position of each bucket to run, with its keys restored per key and its new
        elements: those a key with elements hashes into, and those with a timer due. None
        if the index names a bucket at a position that holds another."""
        routed: dict[int, tuple[dict[Any, Any], dict[Any, list[Any]]]] = {}
        due = timer_index.due(index, params)
        if not due and not self.loose and not self.new:
            return routed  # nothing to open: no bucket's place looked up
        positions, depths = timer_index.positions(index), index.depths
        for source, is_new in ((self.loose, False), (self.new, True)):
            for key, value in source.items():
                code = bucket_hash(key)
                for depth in depths:
                    position = positions.get((1 << depth) | (code & ((1 << depth) - 1)))
                    if position is not None:
                        break
                else:  # the buckets always cover every hash
                    msg = f"no state bucket covers the hash of key {key!r}; this is a sparkbeam bug"
                    raise RuntimeError(msg)
                group = routed.get(position)
                if group is None:
                    group = routed[position] = ({}, {})
                group[1 if is_new else 0][key] = value
        for name in due:
            position = positions[name]
            if position not in routed:
                routed[position] = ({}, {})
        # Every bucket the step opens is where the index says (so are the carried ones:
        # the index comes from the same task's output as they do).
        nodes = index.nodes
        for position in routed:
            if timer_index.node(buckets[position]) != nodes[position]:
                return None
        return routed

    def records(self) -> Iterator[tuple[None, StateBucket | StateIndex]]:
        """The buckets, then the index of their timers and holds."""
        for bucket in self.buckets:
            yield None, bucket
        if self.index is not None:
            yield None, self.index

    # -- buckets ------------------------------------------------------------------------
    def _empty(self, depth: int, prefix: int) -> StateBucket:
        return StateBucket(depth, prefix, self.probe, None, None, None, None, None, 0, 0, b"", self.version)

    def _split(
        self, bucket: StateBucket, states: dict[Any, tuple[Any, tuple | None]], new: dict[Any, list[Any]]
    ) -> list[tuple[int, int, dict[Any, tuple[Any, tuple | None]], dict[Any, list[Any]]]]:
        """The bucket's range and keys, or, with more than MAX_KEYS keys, its keys dealt
        into 2**extra narrower buckets of about TARGET_KEYS each."""
        count = len(states) + sum(1 for key in new if key not in states)
        if count <= MAX_KEYS:
            return [(bucket.depth, bucket.prefix, states, new)]
        extra = 1
        while count > TARGET_KEYS << extra:
            extra += 1
        depth = bucket.depth + extra
        mask = (1 << depth) - 1
        parts: dict[int, tuple[dict[Any, tuple[Any, tuple | None]], dict[Any, list[Any]]]] = {
            bucket.prefix | (child << bucket.depth): ({}, {}) for child in range(1 << extra)
        }
        for key, state in states.items():
            parts[bucket_hash(key) & mask][0][key] = state
        for key, arrived in new.items():
            parts[bucket_hash(key) & mask][1][key] = arrived
        return [(depth, prefix, part_states, part_new) for prefix, (part_states, part_new) in parts.items()]

    def _run_bucket(
        self,
        depth: int,
        prefix: int,
        states: dict[Any, tuple[Any, tuple | None]],
        new: dict[Any, list[Any]],
        params: StepParams,
        run_keys: RunKeys,
    ) -> StateBucket:
        """Run the bucket's keys that receive elements or whose own report has a timer due
        (the others keep their state and report as they are); the bucket with its header."""
        now, watermark = params.now, params.new_input_watermark
        moved = watermark != params.old_input_watermark
        to_run: dict[Any, Any] = {}
        entries: list[tuple[Any, Any, tuple]] = []
        for key, (state, key_report) in states.items():
            if key_report is None or key in new:
                to_run[key] = state
                continue
            processing, event = key_report[3], key_report[2]
            if (processing is not None and processing <= now) or (moved and (event is None or watermark >= event)):
                to_run[key] = state
            else:
                entries.append((key, state, key_report))
        self.keys_run += len(to_run) + sum(1 for key in new if key not in to_run)
        reports: dict[Any, tuple] = {}
        for key, keyed in run_keys(to_run, new, StageSummary(), reports):
            entries.append((key, keyed.state, reports[key]))
        header = _header(entries)
        payload = self.pack(entries) if entries else b""
        return StateBucket(depth, prefix, self.probe, *header, payload, self.version)


def _header(entries: list[tuple[Any, Any, tuple]]) -> tuple[Any, ...]:
    """A bucket's header from its keys' reports ``(hold, hold window, next event timer,
    next processing timer, windows)``, in ``StateBucket`` order."""
    hold = hold_key = hold_window = event = processing = None
    windows = 0
    for key, _, (key_hold, key_window, key_event, key_processing, key_windows) in entries:
        if key_hold is not None and (hold is None or key_hold < hold):
            hold, hold_key, hold_window = key_hold, key, key_window
        if key_event is not None and (event is None or key_event < event):
            event = key_event
        if key_processing is not None and (processing is None or key_processing < processing):
            processing = key_processing
        windows += key_windows
    if hold is not None:
        hold_key, hold_window = _short(hold_key), str(hold_window)
    return hold, hold_key, hold_window, event, processing, len(entries), windows


def _short(value: Any) -> str:
    # As the engine names a hold's key (grouping_step._short)
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _merge_empty(buckets: list[StateBucket], empty: Callable[[int, int], StateBucket]) -> list[StateBucket]:
    """``buckets`` with every pair of empty siblings made one empty parent (again, up the
    tree), so that state whose windows closed leaves no trail of empty buckets."""
    empties = {(bucket.depth, bucket.prefix) for bucket in buckets if bucket.state_keys == 0 and not bucket.payload}
    if len(empties) < 2:
        return buckets
    merged: set[tuple[int, int]] = set()
    changed = True
    while changed:
        changed = False
        for depth, prefix in sorted(empties, reverse=True):
            if depth == 0 or (depth, prefix) not in empties:
                continue
            sibling = (depth, prefix ^ (1 << (depth - 1)))
            if sibling in empties:
                empties -= {(depth, prefix), sibling}
                parent = (depth - 1, prefix & ((1 << (depth - 1)) - 1))
                empties.add(parent)
                merged.add(parent)
                changed = True
    out = []
    placed: set[tuple[int, int]] = set()
    for bucket in buckets:
        where = (bucket.depth, bucket.prefix)
        if where in empties:
            out.append(bucket)
            continue
        if bucket.state_keys == 0 and not bucket.payload:
            # Merged away: its (empty) parent takes the place of the first of its children.
            parent = next(p for p in merged if p in empties and p[0] < where[0] and where[1] & ((1 << p[0]) - 1) == p[1])
            if parent not in placed:
                placed.add(parent)
                out.append(empty(*parent))
            continue
        out.append(bucket)
    return out


def _merges(index: StateIndex, bucket: StateBucket) -> bool:
    """Whether ``bucket``, just written, is empty beside an empty sibling (to be merged)."""
    if bucket.state_keys or bucket.payload:
        return False
    other = timer_index.sibling(timer_index.node(bucket))
    return other is not None and other in index.empties
