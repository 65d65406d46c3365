"""A partition's ordered index of its state buckets' timers and holds (#27 item 3).

Each ``StateBucket`` header holds its keys' earliest hold and next timers
(``keyed_buckets.py``), so a step never unpickles a bucket with nothing due. Without an
index it still read every header, every step the stage ran: the per-bucket skip rule
and the fold of the partition's summary, a few microseconds a bucket in Python (about
16,000 buckets at a million keys in a partition). The ``StateIndex`` record carried beside
the buckets keeps those headers in order:

- the next event-time and processing-time timers, each with its bucket's node, sorted, so
  the buckets whose timer is due are a prefix (``due``: ``step_values.nothing_due`` per
  bucket, found by bisection);
- the earliest holds, sorted the same way, so the partition's earliest hold (and the key
  and window the timeline shows) is the first entry's bucket's;
- each bucket's node in list order, and the sums of the headers' keys and windows.

A step (``updated``) removes the entries of the buckets it ran and adds those of the
buckets it wrote: by bisection, one entry at a time, when they are few against the
index (a move of the array's tail in C each), else by sorting the lists again; a step that
runs no bucket leaves the index as it came. Ties between equal holds go to the smaller
node. The lists are ``array('q')``: Spark pickles the record in every step that runs the
stage, and an array pickles as its bytes (16,384 buckets: 0.05 ms, against 41 ms for the
same index as lists of pairs).

The index is derived state: it is never checkpointed (``state_checkpoints`` writes only
buckets, so the checkpoint format is unchanged), and a partition that comes without one
(restored, read back after a checkpoint, re-placed after a hash change), or whose index
does not describe its buckets (``count``, or a bucket found at another position than the
index says), has it rebuilt from the headers (``build``), once.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from sparkbeam.runners.core.grouping.records import StateBucket, StateIndex
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams

__all__ = ["build", "due", "fold", "node", "position_of", "positions", "sibling", "updated"]

#: an update moves entries one at a time while they are fewer than this fraction of the
#: list (each move shifts the array's tail in C), else it sorts the list again
_FEW = 1 / 32


def node(bucket: StateBucket) -> int:
    """The bucket's name in the index: its range as one int, ``(1 << depth) | prefix``."""
    return (1 << bucket.depth) | bucket.prefix


def sibling(name: int) -> int | None:
    """The node of the bucket that shares a parent with ``name``'s (None for the root)."""
    depth = name.bit_length() - 1
    return None if depth == 0 else name ^ (1 << (depth - 1))


def positions(index: StateIndex) -> dict[int, int]:
    """node -> position in the partition's list (built in C, for a step that opens buckets)."""
    return dict(zip(index.nodes, range(len(index.nodes))))


def position_of(index: StateIndex, name: int) -> int:
    return index.nodes.index(name)


def _sorted_pairs(pairs: list[tuple[int, int]]) -> tuple[array, array]:
    pairs.sort()
    return array("q", [time for time, _ in pairs]), array("q", [name for _, name in pairs])


def _entries(bucket: StateBucket, name: int, untimed: set[int], empties: set[int]) -> tuple[int | None, int | None, int | None]:
    """The bucket's (event timer, processing timer, hold), its node put in ``untimed`` or
    ``empties`` as it is one."""
    if bucket.next_event_timer is None and bucket.state_keys:
        untimed.add(name)
    if bucket.state_keys == 0 and not bucket.payload:
        empties.add(name)
    return bucket.next_event_timer, bucket.next_processing_timer, bucket.earliest_hold


def build(buckets: list[StateBucket]) -> StateIndex:
    """The index of ``buckets`` from their headers (one pass over them)."""
    lists: tuple[list[tuple[int, int]], ...] = ([], [], [])
    untimed: set[int] = set()
    empties: set[int] = set()
    keys = windows = 0
    names = array("q")
    for bucket in buckets:
        name = node(bucket)
        names.append(name)
        for found, time in zip(lists, _entries(bucket, name, untimed, empties)):
            if time is not None:
                found.append((time, name))
        keys += bucket.state_keys
        windows += bucket.state_windows
    depths = tuple(sorted({bucket.depth for bucket in buckets}))
    return StateIndex(names, *_sorted_pairs(lists[0]), *_sorted_pairs(lists[1]), *_sorted_pairs(lists[2]), frozenset(untimed), frozenset(empties), depths, keys, windows)


def due(index: StateIndex, params: StepParams) -> set[int]:
    """The nodes of the buckets whose header says a timer is due this step: what
    ``step_values.nothing_due`` decides for each bucket (no side inputs, state kept)."""
    found: set[int] = set()
    times = index.processing_times
    if times and times[0] <= params.now:
        found.update(index.processing_nodes[: bisect_right(times, params.now)])
    watermark = params.new_input_watermark
    if watermark != params.old_input_watermark:
        times = index.event_times
        if times and times[0] <= watermark:
            found.update(index.event_nodes[: bisect_right(times, watermark)])
        found.update(index.untimed)
    return found


def _moved(
    times: array, names: array, gone: list[tuple[int, int]], added: list[tuple[int, int]]
) -> tuple[array, array]:
    """The sorted pairs ``times``/``names`` with the pairs ``gone`` taken out and ``added``
    put in (new arrays: the index that came is left as it was)."""
    if not gone and not added:
        return times, names
    if len(gone) + len(added) > _FEW * len(times):
        out = set(gone)
        pairs = [pair for pair in zip(times, names) if pair not in out]
        pairs.extend(added)
        return _sorted_pairs(pairs)
    times, names = array("q", times), array("q", names)
    for time, name in gone:
        # Among the entries of equal time (often all: one window's end), sorted by node.
        at = bisect_left(names, name, bisect_left(times, time), bisect_right(times, time))
        if at == len(names) or names[at] != name or times[at] != time:
            msg = f"a partition's state index has no entry ({time}, {name}) for a bucket it holds; this is a sparkbeam bug"
            raise RuntimeError(msg)
        del times[at], names[at]
    for time, name in added:
        at = bisect_left(names, name, bisect_left(times, time), bisect_right(times, time))
        times.insert(at, time)
        names.insert(at, name)
    return times, names


def updated(index: StateIndex, gone: Iterable[StateBucket], placed: list[tuple[int, StateBucket]]) -> StateIndex:
    """``index`` with the buckets ``gone`` (those a step ran, each replaced) taken out and
    the buckets ``placed`` (``(position, bucket)``, those it wrote, at their positions in the
    partition's list: their parents' or the end) put in. ``index`` is left as it was."""
    gone = list(gone)
    names = {node(bucket) for bucket in gone}
    untimed = set(index.untimed - names)
    empties = set(index.empties - names)
    removed: tuple[list[tuple[int, int]], ...] = ([], [], [])
    for bucket in gone:
        for pairs, time in zip(removed, (bucket.next_event_timer, bucket.next_processing_timer, bucket.earliest_hold)):
            if time is not None:
                pairs.append((time, node(bucket)))
    added: tuple[list[tuple[int, int]], ...] = ([], [], [])
    nodes = array("q", index.nodes)
    keys = index.state_keys - sum(bucket.state_keys for bucket in gone)
    windows = index.state_windows - sum(bucket.state_windows for bucket in gone)
    for position, bucket in placed:
        name = node(bucket)
        if position == len(nodes):
            nodes.append(name)
        else:
            nodes[position] = name
        for pairs, time in zip(added, _entries(bucket, name, untimed, empties)):
            if time is not None:
                pairs.append((time, name))
        keys += bucket.state_keys
        windows += bucket.state_windows
    if len(placed) == len(gone) and all(node(old) == node(new) for old, (_, new) in zip(gone, placed)):
        depths = index.depths  # every bucket rewritten in place: the same ranges
    else:
        depths = tuple(sorted({name.bit_length() - 1 for name in nodes}))
    return StateIndex(
        nodes,
        *_moved(index.event_times, index.event_nodes, removed[0], added[0]),
        *_moved(index.processing_times, index.processing_nodes, removed[1], added[1]),
        *_moved(index.hold_times, index.hold_nodes, removed[2], added[2]),
        frozenset(untimed),
        frozenset(empties),
        depths,
        keys,
        windows,
    )


def fold(index: StateIndex, buckets: list[StateBucket], report: StageSummary) -> None:
    """Put the partition's earliest hold (with its key and window), next timers and state
    size into ``report``: what folding every header gives, read off the index's heads."""
    if index.hold_times:
        bucket = buckets[position_of(index, index.hold_nodes[0])]
        report.earliest_hold, report.hold_key, report.hold_window = index.hold_times[0], bucket.hold_key, bucket.hold_window
    else:
        report.earliest_hold = report.hold_key = report.hold_window = None
    report.next_event_timer = index.event_times[0] if index.event_times else None
    report.next_processing_timer = index.processing_times[0] if index.processing_times else None
    report.state_keys = index.state_keys
    report.state_windows = index.state_windows
