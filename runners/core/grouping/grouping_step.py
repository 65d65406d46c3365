"""One step of a grouping stage over one partition of keys: the same code in memory and on Spark.

The input is a partition's records (``records.py``): ``(key, KeyedState)`` carried from the
previous step and ``(key, element)`` for this step's elements, their keys taken off (or
``(key, Partial)`` per window when the combine was lifted before the shuffle). The
output is ``(key, KeyedState)`` for the state kept, ``(None, Pane)`` for each fired pane
and last ``(None, Summary)``: the earliest hold and which key and window set it, counts,
drops.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.grouping.drops import DROP_COUNTERS, GroupingStats
from sparkbeam.runners.core.grouping.keys import UngroupableKeyError, grouping_key
from sparkbeam.runners.core.grouping.records import KeyedState, Pane, Partial, Summary
from sparkbeam.runners.core.lowering.errors import TransformError
from sparkbeam.runners.core.lowering.ops import GroupOp, Op
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["GroupingRun", "group_partition", "grouping_key_of", "key_element", "ungroupable"]


def key_element(op: GroupOp, wv: WindowedValue) -> tuple[Any, WindowedValue]:
    """(key, element with the value alone) for a (key, value) element, or a clear error."""
    value = wv.value
    if type(value) is not tuple or len(value) != 2:
        try:
            key, inner = value
        except (TypeError, ValueError):
            msg = (
                f"'{op.label}' (applied at {op.location}) groups (key, value) pairs, but got "
                f"{_short(value)}; key the elements first, e.g. with beam.Map(lambda x: (key_of(x), x))"
            )
            raise TransformError(msg) from None
    else:
        key, inner = value
    kind = type(key)
    if kind is not str and kind is not int and kind is not bytes:  # keys.grouping_key's own, inlined
        key = grouping_key_of(op, key)
    return key, WindowedValue(inner, wv.timestamp_micros, wv.windows, wv.pane_info)


def grouping_key_of(op: Op, key: Any) -> Any:
    """What ``op`` groups ``key`` by (``keys.grouping_key``: the key itself, or a
    ``GroupingKey`` for a key whose ``==`` differs from Beam's encoding), or a clear error."""
    try:
        return grouping_key(key)
    except UngroupableKeyError as error:
        raise ungroupable(op, key, error) from None


def ungroupable(op: Op, key: Any, error: UngroupableKeyError) -> TransformError:
    """The error for a key ``op`` cannot group, naming the grouping and the key's type."""
    msg = f"'{op.label}' (applied at {op.location}) cannot group by the key {_short(key)} of type {type(key).__qualname__}: {error}"
    return TransformError(msg)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def group_partition(
    engine: Any, records: Iterable[tuple[Any, KeyedState | WindowedValue]], params: StepParams
) -> Iterator[tuple[Any, KeyedState | Pane | Summary]]:
    """Run one step for the keys of one partition (see the module docs)."""
    states: dict[Any, Any] = {}
    new: dict[Any, list[Any]] = {}  # a key's elements, or its lifted partials
    for key, record in records:
        if type(record) is KeyedState:
            states[key] = record.state
        else:
            new.setdefault(key, []).append(record)
    run = GroupingRun(engine, params)
    report = StageSummary()
    yield from run.run_keys(states, new, report)
    yield from run.finish(report)


class GroupingRun:
    """One step of a grouping over one partition, run on a group of its keys at a time
    (all of them, or the buckets of them a step touches: ``keyed_buckets.py``); the
    partition's panes and counts gather across the groups."""

    def __init__(self, engine: Any, params: StepParams) -> None:
        self.engine = engine
        self.params = params
        self.stats = GroupingStats()
        self.counts = StageSummary()  # elements in, records shuffled
        self.panes: list[WindowedValue] = []

    def run_keys(
        self,
        states: dict[Any, Any],
        new: dict[Any, list[Any]],
        report: StageSummary,
        reports: dict[Any, tuple] | None = None,
    ) -> Iterator[tuple[Any, KeyedState]]:
        """Add ``new`` (key -> elements or partials) to ``states`` (key -> state, updated in
        place), fire what is due; yields the state kept per key and adds each kept key's
        holds, next timers and size to ``report`` (and, given ``reports``, puts each kept
        key's own there: hold, its window, next event and processing timers, windows)."""
        engine, params, stats, counts, panes = self.engine, self.params, self.stats, self.counts, self.panes
        for key, arrived in new.items():
            state = states.get(key)
            if state is None:
                state = states[key] = engine.new_key_state()
            counts.records_shuffled += len(arrived)
            if type(arrived[0]) is Partial:  # a combine lifted before the shuffle (lifting.py)
                counts.elements_in += sum(partial.count for partial in arrived)
                add = engine.add_partials
            else:
                counts.elements_in += len(arrived)
                add = engine.add_elements
            panes.extend(
                add(
                    state,
                    key,
                    arrived,
                    input_watermark=params.old_input_watermark,
                    output_watermark=params.output_watermark,
                    now=params.now,
                    stats=stats,
                )
            )
        for key, state in states.items():
            panes.extend(
                engine.fire_timers(
                    state,
                    key,
                    input_watermark=params.new_input_watermark,
                    now=params.now,
                    stats=stats,
                    output_watermark=params.output_watermark,
                )
            )
            if engine.is_empty(state):
                continue
            hold = engine.earliest_hold(state)
            event_timer, processing_timer = engine.next_timers(state)
            windows = _window_count(state)
            if reports is not None:
                if hold is None:
                    reports[key] = (None, None, event_timer, processing_timer, windows)
                else:
                    reports[key] = (hold[0], hold[1], event_timer, processing_timer, windows)
                yield key, KeyedState(state)
                continue
            if hold is not None and (report.earliest_hold is None or hold[0] < report.earliest_hold):
                report.earliest_hold = hold[0]
                report.hold_key = _short(key)
                report.hold_window = str(hold[1])
            report.next_event_timer = _min(report.next_event_timer, event_timer)
            report.next_processing_timer = _min(report.next_processing_timer, processing_timer)
            report.state_keys += 1
            report.state_windows += windows
            yield key, KeyedState(state)

    def finish(self, report: StageSummary) -> Iterator[tuple[None, Pane | Summary]]:
        """The partition's panes, then its summary: the counts of every group of keys run,
        with ``report``'s holds, timers and size (those of all the state kept)."""
        summary = self.counts.merge(report)
        summary.elements_out = len(self.panes)
        for counter in DROP_COUNTERS.values():
            setattr(summary, counter, getattr(self.stats, counter))
        for pane in self.panes:
            yield None, Pane(pane)
        yield None, Summary(summary)


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _window_count(state: Any) -> int:
    windows = getattr(state, "windows", None)
    return len(windows) if windows is not None else 1
