"""Trigger state machines: the logic that runs each trigger spec of ``sparkbeam.trigger``.

``build_trigger_machine(spec)`` turns a frozen spec (``AfterWatermark(early=AfterCount(2))``)
into a tree of machines. Machines hold no per-window data: everything a trigger remembers
for one window (counts, "the on-time pane has fired", timers) lives in a ``TriggerCell``,
two plain dicts that the grouping engine stores with the window and pickles with the key.
A machine reads and writes a cell through a ``TriggerContext`` bound to one window.

State keys and timer keys are path strings (``"early/count"``, ``"e|1/"``), so nested
triggers never collide and merging two windows' cells is a per-key rule that each machine
declares (counts add, "is late" ORs, AfterEach's index takes the max, deadlines take the
earliest).

The protocol follows Beam Python's ``TriggerFn``: ``on_element``, ``on_merge``,
``should_fire``, ``on_fire`` (returns whether the trigger finished) and ``reset``, with two
deliberate differences, both so that processing-time triggers compose:

- ``on_fire`` receives the time domain of the firing, and composites evaluate their
  subtriggers in that domain (Beam Python re-evaluates them in event time, so a
  processing-time subtrigger never finishes inside ``AfterAny``/``AfterAll``/``OrFinally``);
- ``AfterProcessingTime`` keeps its deadline and is satisfied once the clock has reached
  it (Beam Python answers "fire" to any processing-time evaluation, even one caused by a
  sibling's timer), as Beam Java does.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.trigger import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DefaultTrigger,
    Never,
    OrFinally,
    Repeatedly,
    TriggerFn,
    _AfterSynchronizedProcessingTime,
)
from sparkbeam.window import BoundedWindow

__all__ = [
    "EVENT_TIMER_PREFIX",
    "PROCESSING_TIMER_PREFIX",
    "TimeDomain",
    "TriggerCell",
    "TriggerContext",
    "TriggerMachine",
    "build_trigger_machine",
    "merge_trigger_cells",
]

# A timer key is its domain's prefix followed by the path of the machine that owns it.
EVENT_TIMER_PREFIX = "e|"
PROCESSING_TIMER_PREFIX = "p|"


class TimeDomain(enum.Enum):
    """Which clock a timer or a firing belongs to."""

    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


@attrs.define(slots=True)
class TriggerCell:
    """One window's trigger data: state by path, and timers (key -> microseconds).

    Both dicts are created on first write, so a window whose trigger keeps nothing costs
    two ``None`` slots.
    """

    trigger_state: dict[str, Any] | None = None
    timers: dict[str, int] | None = None


class TriggerContext:
    """A machine's view of one window's cell, the window, and the current processing time.

    The engine keeps one context and rebinds it per window, so evaluating a trigger
    allocates nothing.
    """

    __slots__ = ("cell", "now", "window", "window_end")

    def __init__(
        self, cell: TriggerCell | None = None, window: BoundedWindow | None = None, now: int = 0
    ) -> None:
        if cell is not None and window is not None:
            self.bind(cell, window, now)

    def bind(self, cell: TriggerCell, window: BoundedWindow, now: int) -> None:
        self.cell = cell
        self.window = window
        self.window_end = window.end.micros
        self.now = now

    def get(self, key: str, default: Any = None) -> Any:
        state = self.cell.trigger_state
        return default if state is None else state.get(key, default)

    def put(self, key: str, value: Any) -> None:
        state = self.cell.trigger_state
        if state is None:
            self.cell.trigger_state = {key: value}
        else:
            state[key] = value

    def drop(self, key: str) -> None:
        state = self.cell.trigger_state
        if state is not None:
            state.pop(key, None)

    def set_timer(self, key: str, micros: int) -> None:
        timers = self.cell.timers
        if timers is None:
            self.cell.timers = {key: micros}
        else:
            timers[key] = micros

    def clear_timer(self, key: str) -> None:
        timers = self.cell.timers
        if timers is not None:
            timers.pop(key, None)


MergeRule = Callable[[list[Any]], Any]


class TriggerMachine(abc.ABC):
    """The stateless logic of one trigger spec at one position (``path``) in the tree.

    ``merge_rules`` maps every state key this machine or its children may write to the
    function that combines the values of merging windows.
    """

    __slots__ = ("merge_rules", "path", "spec")

    def __init__(self, spec: TriggerFn, path: str) -> None:
        self.spec = spec
        self.path = path
        self.merge_rules: dict[str, MergeRule] = {}

    def _adopt_rules(self, children: Iterable[TriggerMachine]) -> None:
        for child in children:
            self.merge_rules.update(child.merge_rules)

    @property
    def has_ontime_pane(self) -> bool:
        """Whether a window gets a pane when the watermark passes its end, even if empty."""
        return bool(self.spec.has_ontime_pane())

    @abc.abstractmethod
    def on_element(self, ctx: TriggerContext, count: int) -> None:
        """``count`` elements arrived in the window (Beam calls this once per element;
        every trigger here is idempotent in it, so one call per bundle is the same)."""

    @abc.abstractmethod
    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        """The windows ``merged`` became ``ctx.window``; their cells are already combined."""

    @abc.abstractmethod
    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        """Whether the window should emit a pane now."""

    @abc.abstractmethod
    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        """The window fired; update state and return whether this trigger is finished."""

    @abc.abstractmethod
    def reset(self, ctx: TriggerContext) -> None:
        """Forget this trigger's state, as if no element had arrived."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r}, path={self.path!r})"


class DefaultTriggerMachine(TriggerMachine):
    """Fires when the watermark reaches the window's end, then on every late bundle."""

    __slots__ = ("timer",)

    def __init__(self, spec: TriggerFn, path: str) -> None:
        super().__init__(spec, path)
        self.timer = EVENT_TIMER_PREFIX + path

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        ctx.set_timer(self.timer, ctx.window_end)

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        # The merged window's elements set a fresh timer at its own end.
        ctx.clear_timer(self.timer)

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        if watermark >= ctx.window_end:
            # Late elements re-set the timer; clearing it here avoids a second pane.
            ctx.clear_timer(self.timer)
            return True
        return False

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return False

    def reset(self, ctx: TriggerContext) -> None:
        ctx.clear_timer(self.timer)


class AlwaysMachine(TriggerMachine):
    """Fires on every evaluation and never finishes (also the runner-side
    ``_AfterSynchronizedProcessingTime``, which Beam Python fires the same way)."""

    __slots__ = ()

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        pass

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        pass

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return True

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return False

    def reset(self, ctx: TriggerContext) -> None:
        pass


class NeverMachine(TriggerMachine):
    """Never fires; the window is emitted only when it is garbage-collected."""

    __slots__ = ()

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        pass

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        pass

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return False

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return True

    def reset(self, ctx: TriggerContext) -> None:
        pass


class AfterCountMachine(TriggerMachine):
    """Fires once the pane holds at least ``count`` elements; then finished."""

    __slots__ = ("count", "key")

    def __init__(self, spec: AfterCount, path: str) -> None:
        super().__init__(spec, path)
        self.count = spec.count
        self.key = path + "count"
        self.merge_rules[self.key] = sum

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        ctx.put(self.key, ctx.get(self.key, 0) + count)

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        pass  # the counts were added by the merge rule

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return ctx.get(self.key, 0) >= self.count

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return True

    def reset(self, ctx: TriggerContext) -> None:
        ctx.drop(self.key)


class AfterProcessingTimeMachine(TriggerMachine):
    """Fires once the clock reaches the pane's first element's arrival time + ``delay``."""

    __slots__ = ("delay", "key", "timer")

    def __init__(self, spec: AfterProcessingTime, path: str) -> None:
        super().__init__(spec, path)
        self.delay = spec.delay.micros
        self.key = path + "deadline"
        self.timer = PROCESSING_TIMER_PREFIX + path
        # Merged panes fire at the earliest of their deadlines (the timers merge the same way).
        self.merge_rules[self.key] = min

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        if ctx.get(self.key) is None:
            deadline = ctx.now + self.delay
            ctx.put(self.key, deadline)
            ctx.set_timer(self.timer, deadline)

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        pass

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        deadline = ctx.get(self.key)
        return deadline is not None and deadline <= ctx.now

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return True

    def reset(self, ctx: TriggerContext) -> None:
        ctx.drop(self.key)
        ctx.clear_timer(self.timer)


class RepeatedlyMachine(TriggerMachine):
    """Fires whenever its subtrigger does, restarting it when it finishes; never finishes."""

    __slots__ = ("underlying",)

    def __init__(self, spec: Repeatedly, path: str) -> None:
        super().__init__(spec, path)
        # Same path: Repeatedly keeps no state of its own.
        self.underlying = _build(spec.underlying, path)
        self._adopt_rules([self.underlying])

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        self.underlying.on_element(ctx, count)

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        self.underlying.on_merge(ctx, merged)

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        return self.underlying.should_fire(ctx, domain, watermark)

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        if self.underlying.on_fire(ctx, domain, watermark):
            self.underlying.reset(ctx)
        return False

    def reset(self, ctx: TriggerContext) -> None:
        self.underlying.reset(ctx)


class AfterWatermarkMachine(TriggerMachine):
    """The on-time pane at the window's end, ``early`` panes before it, ``late`` after.

    Once the on-time pane has fired, a trigger with a ``late`` part remembers it is late
    ("is_late") and from then on consults only ``late``; without one it is finished.
    """

    __slots__ = ("early", "late", "late_key", "timer")

    def __init__(self, spec: AfterWatermark, path: str) -> None:
        super().__init__(spec, path)
        self.early = _build(spec.early, path + "early/") if spec.early is not None else None
        self.late = _build(spec.late, path + "late/") if spec.late is not None else None
        self.timer = EVENT_TIMER_PREFIX + path
        self.late_key = path + "is_late"
        self.merge_rules[self.late_key] = any
        self._adopt_rules(m for m in (self.early, self.late) if m is not None)

    def _is_late(self, ctx: TriggerContext) -> bool:
        return self.late is not None and bool(ctx.get(self.late_key, False))

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        if self._is_late(ctx):
            self.late.on_element(ctx, count)  # type: ignore[union-attr]
            return
        ctx.set_timer(self.timer, ctx.window_end)
        if self.early is not None:
            self.early.on_element(ctx, count)

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        if self._is_late(ctx):
            self.late.on_merge(ctx, merged)  # type: ignore[union-attr]
            return
        # A timer inherited from a part that ended elsewhere is stale; new elements of
        # the merged window set the right one.
        end = ctx.window_end
        if any(window.end.micros != end for window in merged):
            ctx.clear_timer(self.timer)
        if self.early is not None:
            self.early.on_merge(ctx, merged)

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        if self._is_late(ctx):
            return self.late.should_fire(ctx, domain, watermark)  # type: ignore[union-attr]
        if watermark >= ctx.window_end:
            ctx.clear_timer(self.timer)
            return True
        if self.early is not None:
            return self.early.should_fire(ctx, domain, watermark)
        return False

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        if self._is_late(ctx):
            return self.late.on_fire(ctx, domain, watermark)  # type: ignore[union-attr]
        if watermark >= ctx.window_end:
            if self.late is None:
                return True  # the on-time pane was the last one
            ctx.put(self.late_key, True)
            return False
        if self.early is not None:
            self.early.on_fire(ctx, domain, watermark)
        return False

    def reset(self, ctx: TriggerContext) -> None:
        if self.late is not None:
            ctx.drop(self.late_key)
            self.late.reset(ctx)
        if self.early is not None:
            self.early.reset(ctx)


class _ParallelMachine(TriggerMachine):
    """Runs every subtrigger side by side; ``combine`` (any / all) decides."""

    __slots__ = ("subtriggers",)
    combine: Callable[[Iterable[object]], bool]

    def __init__(self, spec: AfterAny | AfterAll, path: str) -> None:
        super().__init__(spec, path)
        self.subtriggers = tuple(
            _build(sub, f"{path}{ix}/") for ix, sub in enumerate(spec.triggers)
        )
        self._adopt_rules(self.subtriggers)

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        for sub in self.subtriggers:
            sub.on_element(ctx, count)

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        for sub in self.subtriggers:
            sub.on_merge(ctx, merged)

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        # Every subtrigger is asked (no short-circuit): asking clears stale timers.
        return self.combine([sub.should_fire(ctx, domain, watermark) for sub in self.subtriggers])

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        finished = [
            sub.on_fire(ctx, domain, watermark)
            for sub in self.subtriggers
            if sub.should_fire(ctx, domain, watermark)
        ]
        return self.combine(finished)

    def reset(self, ctx: TriggerContext) -> None:
        for sub in self.subtriggers:
            sub.reset(ctx)


class AfterAnyMachine(_ParallelMachine):
    """Fires when any subtrigger would; finished when any subtrigger that fired finished.

    ``OrFinally(main, until)`` runs as this machine, as in Beam Python."""

    __slots__ = ()
    combine = staticmethod(any)


class AfterAllMachine(_ParallelMachine):
    """Fires when every subtrigger would at once; finished when all of them finished."""

    __slots__ = ()
    combine = staticmethod(all)


class AfterEachMachine(TriggerMachine):
    """Runs its subtriggers one after another, moving on when the current one finishes."""

    __slots__ = ("key", "subtriggers")

    def __init__(self, spec: AfterEach, path: str) -> None:
        super().__init__(spec, path)
        self.subtriggers = tuple(
            _build(sub, f"{path}{ix}/") for ix, sub in enumerate(spec.triggers)
        )
        self.key = path + "index"
        # Merging windows continue from the furthest-advanced part, as in Beam.
        self.merge_rules[self.key] = max
        self._adopt_rules(self.subtriggers)

    def _current(self, ctx: TriggerContext) -> TriggerMachine | None:
        index = ctx.get(self.key, 0)
        return self.subtriggers[index] if index < len(self.subtriggers) else None

    def on_element(self, ctx: TriggerContext, count: int) -> None:
        current = self._current(ctx)
        if current is not None:
            current.on_element(ctx, count)

    def on_merge(self, ctx: TriggerContext, merged: Sequence[BoundedWindow]) -> None:
        current = self._current(ctx)
        if current is not None:
            current.on_merge(ctx, merged)

    def should_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        current = self._current(ctx)
        return current is not None and current.should_fire(ctx, domain, watermark)

    def on_fire(self, ctx: TriggerContext, domain: TimeDomain, watermark: int) -> bool:
        index = ctx.get(self.key, 0)
        if index >= len(self.subtriggers):
            return True
        if self.subtriggers[index].on_fire(ctx, domain, watermark):
            index += 1
            ctx.put(self.key, index)
        return index == len(self.subtriggers)

    def reset(self, ctx: TriggerContext) -> None:
        ctx.drop(self.key)
        for sub in self.subtriggers:
            sub.reset(ctx)


def _no_machine(spec: Any, known: list[str]) -> TypeError:
    msg = (
        f"no trigger state machine for {spec!r} ({type(spec).__qualname__}); "
        f"the engine runs these triggers: {', '.join(known)}"
    )
    return TypeError(msg)


# Exact types: a user subclass of a spec may mean something else, so it is not guessed.
_BUILDERS: Registry[Callable[[Any, str], TriggerMachine]] = Registry("trigger state machines", refuse=_no_machine)
for _spec_type, _builder in (
    (DefaultTrigger, DefaultTriggerMachine),
    (AfterWatermark, AfterWatermarkMachine),
    (AfterCount, AfterCountMachine),
    (AfterProcessingTime, AfterProcessingTimeMachine),
    (Repeatedly, RepeatedlyMachine),
    (AfterAny, AfterAnyMachine),
    (OrFinally, AfterAnyMachine),
    (AfterAll, AfterAllMachine),
    (AfterEach, AfterEachMachine),
    (Always, AlwaysMachine),
    (_AfterSynchronizedProcessingTime, AlwaysMachine),
    (Never, NeverMachine),
):
    _BUILDERS.add(_spec_type, _builder)


def _build(spec: TriggerFn, path: str) -> TriggerMachine:
    return _BUILDERS.lookup(spec)(spec, path)


def build_trigger_machine(spec: TriggerFn) -> TriggerMachine:
    """The state machine that runs ``spec``; raises ``TypeError`` for an unknown trigger.

    >>> from sparkbeam.trigger import AfterWatermark, AfterCount
    >>> build_trigger_machine(AfterWatermark(early=AfterCount(2))).merge_rules.keys()
    dict_keys(['is_late', 'early/count'])
    """
    return _build(spec, "")


def merge_trigger_cells(machine: TriggerMachine, parts: Sequence[TriggerCell], into: TriggerCell) -> None:
    """Combine the trigger data of merging windows into ``into`` (overwriting it).

    State keys combine by the rule their machine declared; a timer key present in several
    parts keeps its earliest time. Call ``machine.on_merge`` afterwards.
    """
    values_by_key: dict[str, list[Any]] = {}
    timers: dict[str, int] = {}
    for part in parts:
        if part.trigger_state:
            for key, value in part.trigger_state.items():
                values_by_key.setdefault(key, []).append(value)
        if part.timers:
            for key, micros in part.timers.items():
                earlier = timers.get(key)
                timers[key] = micros if earlier is None else min(earlier, micros)
    state: dict[str, Any] = {}
    for key, values in values_by_key.items():
        rule = machine.merge_rules.get(key)
        if rule is None:
            msg = (
                f"trigger state key {key!r} has no merge rule in {machine!r}; the window "
                "state does not belong to this trigger (was the trigger changed on restore?)"
            )
            raise RuntimeError(msg)
        state[key] = values[0] if len(values) == 1 else rule(values)
    into.trigger_state = state or None
    into.timers = timers or None
