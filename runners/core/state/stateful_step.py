"""One step of a stateful DoFn's stage over one partition of keys: the same code in memory and on Spark.

A stateful ParDo heads a keyed stage as a grouping does (DESIGN §3b). Per step, for the keys
of a partition, in DESIGN §4's order:

1. each new element is processed once per window, against its key's state for that
   window, at the stage's input watermark *as it was*; an element whose window is already
   expired (its GC time, ``max_timestamp + allowed_lateness``, behind that watermark) is
   dropped and counted as late (``drops.py``);
2. the event-time timers the new input watermark has reached (``fire <= watermark``, as
   Beam's direct runner) and the processing-time timers the step's clock has reached fire
   one at a time, earliest first; a callback may set timers that are due too (a looping
   timer), and they fire in the same step;
3. windows whose GC time the new input watermark has passed lose their state and timers;
4. each key's pending timers hold the stage's output watermark (``holds.timer_hold``); the
   earliest hold, with its key and window, goes into the step's summary.

Records are those of ``records.py``: in, ``(key, KeyedState)`` carried from the previous
step and ``(key, element)`` for this step's elements (the element keeps its whole
``(key, value)`` value, which ``process`` receives); out, ``(key, KeyedState)`` for the
state kept, ``(pcoll, element)`` for each output of the DoFn (by output tag) and last
``(None, Summary)``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sparkbeam.dofn import DoFn, StateParamMarker, TimerParamMarker
from sparkbeam.metrics.execution import MetricsEnvironment
from sparkbeam.runners.core.elements.dofn_invoker import DoFnRunner
from sparkbeam.runners.core.grouping.drops import DROP_COUNTERS, DropReason, GroupingStats
from sparkbeam.runners.core.grouping.grouping_step import grouping_key_of
from sparkbeam.runners.core.grouping.holds import HoldPolicy, timer_hold
from sparkbeam.runners.core.grouping.keys import user_key
from sparkbeam.runners.core.grouping.records import KeyedState, Summary
from sparkbeam.runners.core.lowering.errors import TransformError, UnsupportedError, UserCodeError
from sparkbeam.runners.core.lowering.ops import StatefulParDoOp
from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.runners.core.state.user_state import (
    KeyStore,
    PendingTimer,
    RuntimeTimer,
    WindowCells,
    is_event_time,
    runtime_state,
)
from sparkbeam.userstate import TimerSpec, get_dofn_specs, timer_callback
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue

__all__ = [
    "StatefulDoFnRunner",
    "StatefulRun",
    "checked_timer_hold",
    "expire_windows",
    "key_for_state",
    "register_stateful_runner",
    "stateful_partition",
    "take_due_timer",
]


def key_for_state(op: StatefulParDoOp, wv: WindowedValue) -> tuple[Any, WindowedValue]:
    """(key, element) for an element entering a stateful DoFn, or a clear error."""
    value = wv.value
    if type(value) is tuple and len(value) == 2:
        key = value[0]
        kind = type(key)
        if kind is str or kind is int or kind is bytes:  # keys.grouping_key's own, inlined
            return key, wv
        return grouping_key_of(op, key), wv
    try:
        key, _ = value
    except (TypeError, ValueError):
        msg = (
            f"'{op.label}' (applied at {op.location}) is a stateful DoFn, whose input must be "
            f"(key, value) pairs, but got {_short(value)}; key the elements first, e.g. with "
            "beam.Map(lambda x: (key_of(x), x))"
        )
        raise TransformError(msg) from None
    return grouping_key_of(op, key), wv


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


# What a parameter of a process or timer method asks for, read once per bundle.
_KEY, _STATE, _TIMER, _TIMESTAMP, _WINDOW, _PANE, _TAG = range(7)


def _stateful_params(method: Callable) -> list[tuple[str, int, Any]]:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return []
    found = []
    for parameter in parameters:
        default = parameter.default
        if isinstance(default, StateParamMarker):
            found.append((parameter.name, _STATE, default.state_spec))
        elif isinstance(default, TimerParamMarker):
            found.append((parameter.name, _TIMER, default.timer_spec))
        elif default == DoFn.KeyParam:
            found.append((parameter.name, _KEY, None))
        elif default == DoFn.DynamicTimerTagParam:
            found.append((parameter.name, _TAG, None))
    return found


def _callback_params(method: Callable) -> list[tuple[str, int, Any]]:
    """A timer callback's parameters: the stateful ones and the timer's time, window, pane."""
    found = _stateful_params(method)
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return found
    for parameter in parameters:
        default = parameter.default
        if default == DoFn.TimestampParam:
            found.append((parameter.name, _TIMESTAMP, None))
        elif default == DoFn.WindowParam:
            found.append((parameter.name, _WINDOW, None))
        elif default == DoFn.PaneInfoParam:
            found.append((parameter.name, _PANE, None))
    return found


class StatefulDoFnRunner(DoFnRunner):
    """Runs a stateful DoFn over a bundle: ``process`` per (element, window) and the timer
    callbacks, each handed the state and timers of the current key and window."""

    def __init__(self, op: StatefulParDoOp, emitters: dict[str | None, Callable[[WindowedValue], None]]) -> None:
        super().__init__(op, emitters, None)
        self.explode_windows = True  # state is per window
        self.holds = HoldPolicy(op.windowing)
        self.process_params = _stateful_params(self.fn)
        _, timer_specs = get_dofn_specs(op.dofn)
        self.callbacks: dict[str, tuple[TimerSpec, Callable, list[tuple[str, int, Any]]]] = {}
        for spec in timer_specs:
            method = timer_callback(op.dofn, spec)
            self.callbacks[spec.name] = (spec, method, _callback_params(method))
        # The (key, window) being processed, and the timestamp a processing-time timer set now holds at.
        self._key: Any = None
        self._window: Any = None
        self._cells: WindowCells = WindowCells()
        self._setter_micros = 0

    # -- the context of one call ------------------------------------------------------
    def _enter(self, key: Any, window: Any, cells: WindowCells, setter_micros: int) -> None:
        self._key, self._window, self._cells, self._setter_micros = key, window, cells, setter_micros

    def _hold_for(self, domain: str, fire_micros: int) -> int:
        return checked_timer_hold(self.holds, self._window, domain, fire_micros, self._setter_micros)

    def _stateful_values(self, params: list[tuple[str, int, Any]], kwargs: dict[str, Any], tag: str = "") -> None:
        for name, kind, spec in params:
            if kind == _STATE:
                kwargs[name] = runtime_state(spec, self._cells)
            elif kind == _TIMER:
                kwargs[name] = RuntimeTimer(spec, self._cells, self._hold_for)
            elif kind == _KEY:
                kwargs[name] = user_key(self._key)
            elif kind == _TAG:
                kwargs[name] = tag

    def _arguments(self, wv: WindowedValue) -> tuple[tuple, dict]:
        args, kwargs = super()._arguments(wv)
        if self.process_params:
            kwargs = dict(kwargs)
            self._stateful_values(self.process_params, kwargs)
        return args, kwargs

    # -- elements ---------------------------------------------------------------------
    def process_key(
        self, store: KeyStore, key: Any, elements: Iterable[WindowedValue], input_watermark: int, stats: GroupingStats
    ) -> None:
        """Process a key's new elements, once per window; those of expired windows are dropped."""
        gc_time = self.holds.gc_time
        for wv in elements:
            for window in wv.windows:
                if gc_time(window) < input_watermark:
                    stats.discard(DropReason.LATE, 1)
                    continue
                self._enter(key, window, store.cells_for(window), wv.timestamp_micros)
                self._process_one(WindowedValue(wv.value, wv.timestamp_micros, (window,), wv.pane_info))

    # -- timers -----------------------------------------------------------------------
    def fire_due(self, store: KeyStore, key: Any, input_watermark: int, now: int) -> int:
        """Fire the key's due timers one by one, earliest first (event time before processing
        time at equal times), including those the callbacks set; how many fired."""
        fired = 0
        while (due := take_due_timer(store, input_watermark, now)) is not None:
            window, (timer_name, tag), timer = due
            self._fire(key, window, store.windows[window], timer_name, tag, timer.fire_micros)
            fired += 1
        return fired

    def _fire(self, key: Any, window: Any, cells: WindowCells, timer_name: str, tag: str, fire_micros: int) -> None:
        spec, method, params = self.callbacks[timer_name]
        self._enter(key, window, cells, fire_micros)
        kwargs: dict[str, Any] = {}
        self._stateful_values(params, kwargs, tag)
        for name, kind, _ in params:
            if kind == _TIMESTAMP:
                kwargs[name] = Timestamp.from_micros(fire_micros)
            elif kind == _WINDOW:
                kwargs[name] = window
            elif kind == _PANE:
                kwargs[name] = PANE_INFO_UNKNOWN
        # As Beam: what a callback outputs is at the timer's time, in its window.
        origin = WindowedValue(None, fire_micros, (window,), PANE_INFO_UNKNOWN)
        where = f"timer {spec.name[len(TimerSpec.prefix):]!r} of key {_short(key)}"
        try:
            result = method(**kwargs)
        except UserCodeError:
            raise
        except Exception as error:
            raise UserCodeError(self.label, self.location, error, where) from error
        if result is not None:
            for item in self._guard_iter(result, where):
                self._output(item, origin)

    def collect_garbage(self, store: KeyStore, input_watermark: int) -> None:
        """Delete the state and timers of windows the watermark has expired, and empty windows."""
        expire_windows(store, self.holds, input_watermark)


def checked_timer_hold(holds: HoldPolicy, window: Any, domain: str, fire_micros: int, setter_micros: int) -> int:
    """The hold of a timer set in ``window`` (``holds.timer_hold``), or a ValueError for an
    event-time timer that would fire after the window's state is gone."""
    event_time = is_event_time(domain)
    if event_time:
        gc_time = holds.gc_time(window)
        # The window's state goes once the watermark passes its GC time, i.e. reaches
        # gc_time + 1, which is also when a timer there fires (timers fire first): so a
        # timer up to that instant (``window.end`` with no lateness) fires, a later one
        # could never.
        if fire_micros > gc_time + 1:
            msg = (
                f"an event-time timer set for {Timestamp.from_micros(fire_micros)!r} in window "
                f"{window!r} would fire after the window expires at {Timestamp.from_micros(gc_time)!r} "
                "(its last instant plus the allowed lateness), when its state is gone"
            )
            raise ValueError(msg)
    return timer_hold(event_time, fire_micros, setter_micros)


def take_due_timer(store: KeyStore, input_watermark: int, now: int) -> tuple[Any, tuple[str, str], PendingTimer] | None:
    """The key's earliest due timer (event time before processing time at equal times),
    removed from the store, or None: an event-time timer is due once the input watermark
    reaches it, a processing-time timer once the step's clock does."""
    due = None
    for window, name, timer in store.pending_timers():
        reached = input_watermark if is_event_time(timer.domain) else now
        if timer.fire_micros > reached:
            continue
        order = (timer.fire_micros, not is_event_time(timer.domain))
        if due is None or order < due[0]:
            due = (order, window, name, timer)
    if due is None:
        return None
    _, window, name, timer = due
    del store.windows[window].timers[name]
    return window, name, timer


def expire_windows(store: KeyStore, holds: HoldPolicy, input_watermark: int) -> None:
    """Delete the state and timers of the windows whose GC time the watermark has passed,
    and the windows left empty."""
    gc_time = holds.gc_time
    for window in [w for w in store.windows if gc_time(w) < input_watermark]:
        del store.windows[window]
    store.forget_empty()


def _no_runner(op: Any, known: list[str]) -> UnsupportedError:
    msg = (
        f"'{op.label}' (applied at {op.location}): nothing runs the stateful DoFns of "
        f"{type(op).__name__} (runners are registered for {', '.join(known)}); register one "
        "with register_stateful_runner"
    )
    return UnsupportedError(msg)


#: A stateful ParDo op type -> what runs its DoFn: ``StatefulDoFnRunner`` for sparkbeam's
#: own, a front end's runner for its own op type (a Beam DoFn runs on Beam's machinery).
_RUNNERS: Registry[Callable[..., Any]] = Registry("stateful DoFn runners", refuse=_no_runner)


def register_stateful_runner(op_type: type, runner: Callable[..., Any]) -> None:
    """Run the DoFns of ``op_type`` (a ``StatefulParDoOp`` subclass) with ``runner(op, emitters)``,
    an object with ``StatefulDoFnRunner``'s bundle methods."""
    _RUNNERS.add(op_type, runner)


register_stateful_runner(StatefulParDoOp, StatefulDoFnRunner)


def stateful_partition(
    op: StatefulParDoOp, records: Iterable[tuple[Any, KeyedState | WindowedValue]], params: StepParams
) -> Iterator[tuple[Any, Any]]:
    """Run one step for the keys of one partition (see the module docs)."""
    stores: dict[Any, KeyStore] = {}
    new: dict[Any, list[WindowedValue]] = {}
    for key, record in records:
        if type(record) is KeyedState:
            stores[key] = record.state
        else:
            new.setdefault(key, []).append(record)
    run = StatefulRun(op, params)
    report = StageSummary()
    with run.bundle():
        kept = list(run.run_keys(stores, new, report))
    yield from kept
    yield from run.finish(report)


class StatefulRun:
    """One step of a stateful DoFn over one partition, one bundle, run on a group of its
    keys at a time (all of them, or the buckets of them a step touches:
    ``keyed_buckets.py``); the partition's outputs and counts gather across the groups."""

    def __init__(self, op: StatefulParDoOp, params: StepParams) -> None:
        self.op = op
        self.params = params
        self.outputs: list[tuple[int, WindowedValue]] = []
        emitters = {tag: _collector(self.outputs, pcoll) for tag, pcoll in zip(op.output_tags, op.outputs)}
        self.runner = _RUNNERS.lookup(op)(op, emitters)
        self.gc_time = HoldPolicy(op.windowing).gc_time
        self.stats = GroupingStats()
        self.counts = StageSummary()  # elements in

    @contextlib.contextmanager
    def bundle(self) -> Iterator[None]:
        """The bundle the DoFn's calls run in (``start`` before, ``finish`` and ``teardown``
        after), under the DoFn's label, so that its metric updates land there."""
        runner = self.runner
        with MetricsEnvironment.step_scope(self.op.label):
            runner.start()
            try:
                yield
                runner.finish()
            finally:
                runner.teardown()

    def run_keys(
        self,
        stores: dict[Any, KeyStore],
        new: dict[Any, list[WindowedValue]],
        report: StageSummary,
        reports: dict[Any, tuple] | None = None,
    ) -> Iterator[tuple[Any, KeyedState]]:
        """Process ``new`` (key -> elements) against ``stores`` (updated in place), fire the
        due timers, expire windows; yields the state kept per key and adds each kept key's
        holds, next timers and size to ``report`` (and, given ``reports``, puts each kept
        key's own there: hold, its window, next event and processing timers, windows).
        Runs inside ``bundle()``."""
        runner, params, stats = self.runner, self.params, self.stats
        for key, elements in new.items():
            store = stores.get(key)
            if store is None:
                store = stores[key] = KeyStore()
            self.counts.elements_in += len(elements)
            runner.process_key(store, key, elements, params.old_input_watermark, stats)
        for key, store in stores.items():
            runner.fire_due(store, key, params.new_input_watermark, params.now)
            runner.collect_garbage(store, params.new_input_watermark)
            if store.is_empty():
                continue
            if reports is not None:
                own = StageSummary()
                _report(own, key, store, self.gc_time)
                reports[key] = (own.earliest_hold, own.hold_window, own.next_event_timer, own.next_processing_timer, own.state_windows)
            else:
                _report(report, key, store, self.gc_time)
            yield key, KeyedState(store)

    def finish(self, report: StageSummary) -> Iterator[tuple[Any, Any]]:
        """The partition's outputs, then its summary (the counts, with ``report``'s holds,
        timers and size); the bundle is finalised once they are handed on."""
        summary = self.counts.merge(report)
        summary.elements_out = len(self.outputs)
        for counter in DROP_COUNTERS.values():
            setattr(summary, counter, getattr(self.stats, counter))
        yield from self.outputs
        yield None, Summary(summary)
        with MetricsEnvironment.step_scope(self.op.label):
            self.runner.finalize_bundle()  # the bundle's output has been handed on


def _collector(outputs: list[tuple[int, WindowedValue]], pcoll: int) -> Callable[[WindowedValue], None]:
    append = outputs.append
    return lambda wv: append((pcoll, wv))


def _report(summary: StageSummary, key: Any, store: KeyStore, gc_time: Callable[[Any], int]) -> None:
    """Add a kept key's holds, next timers and size to the step's summary."""
    summary.state_keys += 1
    summary.state_windows += len(store.windows)
    for window in store.windows:
        # The window's state goes once the watermark passes its GC time: an event-time
        # timer of the stage's, so that a step whose watermark reaches none may skip it.
        expiry = gc_time(window) + 1
        if summary.next_event_timer is None or expiry < summary.next_event_timer:
            summary.next_event_timer = expiry
    for window, _, timer in store.pending_timers():
        if summary.earliest_hold is None or timer.hold_micros < summary.earliest_hold:
            summary.earliest_hold = timer.hold_micros
            summary.hold_key = _short(key)
            summary.hold_window = str(window)
        if is_event_time(timer.domain):
            if summary.next_event_timer is None or timer.fire_micros < summary.next_event_timer:
                summary.next_event_timer = timer.fire_micros
        elif summary.next_processing_timer is None or timer.fire_micros < summary.next_processing_timer:
            summary.next_processing_timer = timer.fire_micros
