"""State and timers for DoFns, under Beam's names (``sparkbeam.transforms.userstate``); the
specs and ``on_timer`` are defined in ``sparkbeam._state_specs``, below ``sparkbeam.dofn``.

A DoFn that declares state or timer parameters is *stateful*: its input must be
``(key, value)`` pairs, and each key (and window) gets its own state cells and timers, as in
Beam. The runner keeps them between elements, bundles and steps; see README "State and
timers".

>>> from sparkbeam.coders import VarIntCoder
>>> class CountPerKey(DoFn):
...     COUNT = CombiningValueStateSpec("count", VarIntCoder(), sum)
...     FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)
...
...     def process(self, element, count=DoFn.StateParam(COUNT),
...                 flush=DoFn.TimerParam(FLUSH), window=DoFn.WindowParam):
...         count.add(1)
...         flush.set(window.max_timestamp())
...
...     @on_timer(FLUSH)
...     def emit(self, key=DoFn.KeyParam, count=DoFn.StateParam(COUNT)):
...         yield key, count.read()

Beam's Python SDK has no ``on_window_expiration`` and no output timestamp for timers: a
timer's ``set(timestamp, dynamic_timer_tag='')`` holds the stage's output watermark at
``timestamp`` (event time) or at the timestamp of the element that set it (processing
time), and what its callback outputs is stamped with ``timestamp``, as in Beam.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

from sparkbeam._state_specs import (
    BagStateSpec,
    CombiningValueStateSpec,
    OrderedListStateSpec,
    ReadModifyWriteStateSpec,
    SetStateSpec,
    StateParamMarker,
    StateSpec,
    TimeDomain,
    TimerParamMarker,
    TimerSpec,
    on_timer,
)
from sparkbeam.utils.timestamp import Timestamp

__all__ = [
    "AccumulatingRuntimeState",
    "BagRuntimeState",
    "BagStateSpec",
    "BaseTimer",
    "CombiningValueRuntimeState",
    "CombiningValueStateSpec",
    "OrderedListRuntimeState",
    "OrderedListStateSpec",
    "ReadModifyWriteRuntimeState",
    "ReadModifyWriteStateSpec",
    "RuntimeState",
    "SetRuntimeState",
    "SetStateSpec",
    "StateSpec",
    "TimeDomain",
    "TimerSpec",
    "get_dofn_specs",
    "is_stateful_dofn",
    "on_timer",
    "validate_stateful_dofn",
]


def _param_defaults(method: Callable) -> list[tuple[str, Any]]:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return []
    return [(p.name, p.default) for p in parameters if p.default is not inspect.Parameter.empty]


def get_dofn_specs(dofn: Any) -> tuple[set[StateSpec], set[TimerSpec]]:
    """The state and timer specs the DoFn's methods ask for, as Beam's function of that name."""
    states: set[StateSpec] = set()
    timers: set[TimerSpec] = set()
    for name in dir(dofn):
        method = getattr(dofn, name, None)
        if not isinstance(method, types.MethodType):
            continue
        for _, default in _param_defaults(method):
            if isinstance(default, StateParamMarker):
                states.add(default.state_spec)
            elif isinstance(default, TimerParamMarker):
                timers.add(default.timer_spec)
    return states, timers


def is_stateful_dofn(dofn: Any) -> bool:
    """Whether the DoFn uses state or timers."""
    states, timers = get_dofn_specs(dofn)
    return bool(states or timers)


def timer_callback(dofn: Any, spec: TimerSpec) -> Callable:
    """The DoFn's bound method that ``spec``'s ``@on_timer`` marked."""
    attached = spec._attached_callback
    if attached is None:
        msg = f"{spec!r} has no @on_timer callback"
        raise ValueError(msg)
    return getattr(dofn, attached.__name__)


def validate_stateful_dofn(dofn: Any) -> None:
    """Beam's checks: spec names unique per DoFn, each timer with its own ``@on_timer`` method."""
    states, timers = get_dofn_specs(dofn)
    for kind, specs in (("StateSpecs", states), ("TimerSpecs", timers)):
        names = [spec.name for spec in specs]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            msg = f"DoFn {type(dofn).__name__} has multiple {kind} with the same name: {duplicated}"
            raise ValueError(msg)
    for spec in timers:
        attached = spec._attached_callback
        if attached is None:
            msg = f"DoFn {type(dofn).__name__} has a TimerSpec without an associated @on_timer callback: {spec!r}"
            raise ValueError(msg)
        method = getattr(dofn, attached.__name__, None)
        if getattr(method, "__func__", None) is not attached:
            msg = (
                f"The on_timer callback for {spec!r} is not the method .{attached.__name__} of DoFn "
                f"{type(dofn).__name__} (perhaps it was overwritten?)"
            )
            raise ValueError(msg)


# ------------------------------------------------------------ what the user's code is given


class BaseTimer:
    """A timer as the DoFn sees it: ``set(timestamp)`` (replacing any earlier setting) and ``clear()``."""

    def clear(self, dynamic_timer_tag: str = "") -> None:
        raise NotImplementedError

    def set(self, timestamp: Timestamp | int | float, dynamic_timer_tag: str = "") -> None:
        raise NotImplementedError


class RuntimeState:
    """A state cell as the DoFn sees it."""

    def prefetch(self) -> None:
        """Nothing to prefetch: the cell is in the task's memory."""

    def finalize(self) -> None:
        pass


class ReadModifyWriteRuntimeState(RuntimeState):
    def read(self) -> Any:
        raise NotImplementedError(type(self))

    def write(self, value: Any) -> None:
        raise NotImplementedError(type(self))

    def clear(self) -> None:
        raise NotImplementedError(type(self))


class AccumulatingRuntimeState(RuntimeState):
    def read(self) -> Iterable[Any]:
        raise NotImplementedError(type(self))

    def add(self, value: Any) -> None:
        raise NotImplementedError(type(self))

    def clear(self) -> None:
        raise NotImplementedError(type(self))


class BagRuntimeState(AccumulatingRuntimeState):
    """Bag state, as the DoFn sees it."""


class SetRuntimeState(AccumulatingRuntimeState):
    """Set state, as the DoFn sees it."""


class CombiningValueRuntimeState(AccumulatingRuntimeState):
    """Combining state, as the DoFn sees it."""


class OrderedListRuntimeState(AccumulatingRuntimeState):
    """Ordered-list state, as the DoFn sees it."""

    def read_range(self, min_timestamp: Timestamp, limit_timestamp: Timestamp) -> Iterable[tuple[Timestamp, Any]]:
        raise NotImplementedError(type(self))

    def clear_range(self, min_timestamp: Timestamp, limit_timestamp: Timestamp) -> None:
        raise NotImplementedError(type(self))
