"""Triggers and accumulation modes: when a window's pane is emitted, and what it holds.

Every trigger here is a frozen, hashable description with Beam's name and arguments. The
runner builds the state machine that executes it (``sparkbeam.runners.core.grouping.triggers``).

>>> AfterWatermark(early=AfterCount(2), late=AfterCount(1))
AfterWatermark(early=AfterCount(2), late=AfterCount(1))
"""

from __future__ import annotations

import enum
import numbers

import attrs

from sparkbeam.beam_surface import module_getattr
from sparkbeam.utils.timestamp import Duration, DurationLike, seconds_text

__all__ = [
    "AccumulationMode",
    "AfterAll",
    "AfterAny",
    "AfterCount",
    "AfterEach",
    "AfterProcessingTime",
    "AfterWatermark",
    "Always",
    "DefaultTrigger",
    "Never",
    "OrFinally",
    "Repeatedly",
    "TriggerFn",
]


class AccumulationMode(enum.Enum):
    """Whether a pane's contents are kept (ACCUMULATING) or cleared (DISCARDING) after it fires."""

    DISCARDING = 1
    ACCUMULATING = 2

    def __repr__(self) -> str:
        return f"AccumulationMode.{self.name}"


class TriggerFn:
    """Base of every trigger spec."""

    def get_continuation_trigger(self) -> TriggerFn:
        """The trigger a downstream grouping inherits (Beam's continuation rules)."""
        raise NotImplementedError

    def has_ontime_pane(self) -> bool:
        """Whether the trigger fires when the watermark passes the end of the window."""
        return False

    def may_finish(self) -> bool:
        """Whether the trigger can finish, closing its window to later data."""
        return True

    def can_fire(self) -> bool:
        """Whether any input can make this trigger fire (``Never`` cannot)."""
        return True

    def subtriggers(self) -> tuple[TriggerFn, ...]:
        return ()


def _check_trigger(owner: str, value: object) -> TriggerFn:
    if not isinstance(value, TriggerFn):
        msg = f"{owner} takes triggers (AfterCount(2), AfterWatermark(), ...), not {value!r}"
        raise TypeError(msg)
    return value


@attrs.frozen(repr=False)
class DefaultTrigger(TriggerFn):
    """Fire when the watermark passes the end of the window, then on every late element."""

    def get_continuation_trigger(self) -> TriggerFn:
        return self

    def has_ontime_pane(self) -> bool:
        return True

    def may_finish(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "DefaultTrigger()"


@attrs.frozen(repr=False)
class Always(TriggerFn):
    """Fire on every bundle of elements, never finishing."""

    def get_continuation_trigger(self) -> TriggerFn:
        return self

    def may_finish(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Always"


@attrs.frozen(repr=False)
class Never(TriggerFn):
    """Never fire; the window's contents are emitted once, when the window is garbage-collected."""

    def get_continuation_trigger(self) -> TriggerFn:
        return self

    def may_finish(self) -> bool:
        return False

    def can_fire(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Never"


_Never = Never  # Beam's spelling


@attrs.frozen(init=False, repr=False)
class AfterCount(TriggerFn):
    """Fire once at least ``count`` elements have arrived in the pane."""

    count: int

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            msg = f"AfterCount: count must be a positive integer, got {count!r}"
            raise ValueError(msg)
        self.__attrs_init__(int(count))

    def get_continuation_trigger(self) -> TriggerFn:
        return AfterCount(1)

    def __repr__(self) -> str:
        return f"AfterCount({self.count})"


@attrs.frozen(init=False, repr=False)
class AfterProcessingTime(TriggerFn):
    """Fire once, ``delay`` seconds of processing time after the pane's first element."""

    delay: Duration

    def __init__(self, delay: DurationLike = 0) -> None:
        duration = Duration.of(delay)
        if duration.micros < 0:
            msg = f"AfterProcessingTime: delay must not be negative, got {delay!r}"
            raise ValueError(msg)
        self.__attrs_init__(duration)

    def get_continuation_trigger(self) -> TriggerFn:
        return _AfterSynchronizedProcessingTime()

    def __repr__(self) -> str:
        return f"AfterProcessingTime(delay={seconds_text(self.delay.micros)})"


@attrs.frozen(repr=False)
class _AfterSynchronizedProcessingTime(TriggerFn):
    """Continuation of AfterProcessingTime downstream of a grouping: fires with every bundle."""

    def get_continuation_trigger(self) -> TriggerFn:
        return self

    def may_finish(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "_AfterSynchronizedProcessingTime()"


@attrs.frozen(init=False, repr=False)
class Repeatedly(TriggerFn):
    """Fire whenever ``underlying`` would, restarting it after each firing; never finishes."""

    underlying: TriggerFn

    def __init__(self, underlying: TriggerFn) -> None:
        self.__attrs_init__(_check_trigger("Repeatedly", underlying))

    def get_continuation_trigger(self) -> TriggerFn:
        return Repeatedly(self.underlying.get_continuation_trigger())

    def has_ontime_pane(self) -> bool:
        return self.underlying.has_ontime_pane()

    def may_finish(self) -> bool:
        return False

    def can_fire(self) -> bool:
        return self.underlying.can_fire()

    def subtriggers(self) -> tuple[TriggerFn, ...]:
        return (self.underlying,)

    def __repr__(self) -> str:
        return f"Repeatedly({self.underlying!r})"


def _repeated(trigger: TriggerFn | None, role: str) -> Repeatedly | None:
    if trigger is None:
        return None
    _check_trigger(f"AfterWatermark({role}=...)", trigger)
    return trigger if isinstance(trigger, Repeatedly) else Repeatedly(trigger)


@attrs.frozen(init=False, repr=False)
class AfterWatermark(TriggerFn):
    """Fire when the watermark passes the end of the window.

    ``early`` fires speculative panes before that, ``late`` fires on late data after it;
    each is repeated. Without ``late`` the trigger finishes with its on-time pane.
    """

    early: Repeatedly | None
    late: Repeatedly | None

    def __init__(self, early: TriggerFn | None = None, late: TriggerFn | None = None) -> None:
        self.__attrs_init__(_repeated(early, "early"), _repeated(late, "late"))

    def get_continuation_trigger(self) -> TriggerFn:
        return AfterWatermark(
            self.early.get_continuation_trigger() if self.early else None,
            self.late.get_continuation_trigger() if self.late else None,
        )

    def has_ontime_pane(self) -> bool:
        return True

    def may_finish(self) -> bool:
        return self.late is None

    def subtriggers(self) -> tuple[TriggerFn, ...]:
        return tuple(t for t in (self.early, self.late) if t is not None)

    def __repr__(self) -> str:
        parts = []
        if self.early is not None:
            parts.append(f"early={self.early.underlying!r}")
        if self.late is not None:
            parts.append(f"late={self.late.underlying!r}")
        return f"AfterWatermark({', '.join(parts)})"


@attrs.frozen(init=False, repr=False)
class _Composite(TriggerFn):
    triggers: tuple[TriggerFn, ...]

    def __init__(self, *triggers: TriggerFn) -> None:
        name = type(self).__name__
        if not triggers:
            msg = f"{name} needs at least one trigger; with none it could never fire"
            raise ValueError(msg)
        self.__attrs_init__(tuple(_check_trigger(name, t) for t in triggers))

    def get_continuation_trigger(self) -> TriggerFn:
        return type(self)(*(t.get_continuation_trigger() for t in self.triggers))

    def has_ontime_pane(self) -> bool:
        return any(t.has_ontime_pane() for t in self.triggers)

    def subtriggers(self) -> tuple[TriggerFn, ...]:
        return self.triggers

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(t) for t in self.triggers)})"


class AfterAny(_Composite):
    """Fire when any subtrigger fires; finish when any finishes."""

    def may_finish(self) -> bool:
        return any(t.may_finish() for t in self.triggers)

    def can_fire(self) -> bool:
        return any(t.can_fire() for t in self.triggers)


class AfterAll(_Composite):
    """Fire once every subtrigger has fired; finish when all have finished."""

    def may_finish(self) -> bool:
        return all(t.may_finish() for t in self.triggers)

    def can_fire(self) -> bool:
        return all(t.can_fire() for t in self.triggers)


class AfterEach(_Composite):
    """Run the subtriggers one after another; finish when the last one finishes."""

    def get_continuation_trigger(self) -> TriggerFn:
        return Repeatedly(AfterAny(*(t.get_continuation_trigger() for t in self.triggers)))

    def may_finish(self) -> bool:
        return all(t.may_finish() for t in self.triggers)

    def can_fire(self) -> bool:
        return self.triggers[0].can_fire()


class OrFinally(AfterAny):
    """``main`` until ``finally_`` fires: fires as AfterAny, finishing when ``finally_`` does.

    Beam writes it ``main.orFinally(until)``; here ``OrFinally(main, until)``.
    """

    def __init__(self, *triggers: TriggerFn) -> None:
        if len(triggers) != 2:
            msg = f"OrFinally takes exactly two triggers (main, until), got {len(triggers)}"
            raise ValueError(msg)
        super().__init__(*triggers)

    def get_continuation_trigger(self) -> TriggerFn:
        return AfterAny(*(t.get_continuation_trigger() for t in self.triggers))


def check_can_fire(trigger: TriggerFn) -> None:
    """Raise if some part of ``trigger`` can never fire (``Never`` alone is allowed)."""
    if isinstance(trigger, Never):
        return
    if not trigger.can_fire():
        msg = (
            f"trigger {trigger!r} can never fire: a Never inside it blocks every firing; "
            "remove the Never or use Never() alone to emit only when the window closes"
        )
        raise ValueError(msg)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.trigger")
