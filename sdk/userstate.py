"""State and timers for DoFns, under Beam's names (``sparkbeam.transforms.userstate``).

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
from typing import Any, TypeVar

from sparkbeam.coders import Coder
from sparkbeam.combine import CombineFn
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

_F = TypeVar("_F", bound=Callable)


class TimeDomain:
    """The clock a timer follows: the watermark (event time) or processing time."""

    WATERMARK = "WATERMARK"
    REAL_TIME = "REAL_TIME"
    DEPENDENT_REAL_TIME = "DEPENDENT_REAL_TIME"

    @staticmethod
    def from_string(domain: str) -> str:
        if domain in (TimeDomain.WATERMARK, TimeDomain.REAL_TIME, TimeDomain.DEPENDENT_REAL_TIME):
            return domain
        msg = f"Unknown time domain: {domain!r} (TimeDomain.WATERMARK or TimeDomain.REAL_TIME)"
        raise ValueError(msg)

    @staticmethod
    def is_event_time(domain: str) -> bool:
        return TimeDomain.from_string(domain) == TimeDomain.WATERMARK


class StateSpec:
    """A state cell a stateful DoFn declares: its name (unique per DoFn) and coder."""

    def __init__(self, name: str, coder: Coder) -> None:
        if not isinstance(name, str):
            msg = f"{type(self).__name__}: the name must be a string, not {name!r}"
            raise TypeError(msg)
        if not isinstance(coder, Coder):
            msg = f"{type(self).__name__}({name!r}): the coder must be a Coder (e.g. coders.PickleCoder()), not {coder!r}"
            raise TypeError(msg)
        self.name = name
        self.coder = coder

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class ReadModifyWriteStateSpec(StateSpec):
    """One value per key and window: ``read()`` (None when unset), ``write(v)``, ``clear()``."""


class BagStateSpec(StateSpec):
    """Values appended per key and window: ``add(v)``, ``read()`` in insertion order, ``clear()``."""


class SetStateSpec(StateSpec):
    """Distinct values per key and window: ``add(v)``, ``read()`` (a set), ``clear()``."""


class OrderedListStateSpec(StateSpec):
    """``(timestamp, value)`` pairs kept sorted by timestamp: ``add((ts, v))``, ``read()``,
    ``read_range(min, limit)``, ``clear_range(min, limit)``, ``clear()``."""


class CombiningValueStateSpec(StateSpec):
    """A CombineFn's accumulator per key and window: ``add(v)``, ``read()`` (its output), ``clear()``.

    ``CombiningValueStateSpec(name, combine_fn)`` or ``(name, coder, combine_fn)``, as Beam.
    """

    def __init__(self, name: str, coder: Coder | Any = None, combine_fn: Any = None) -> None:
        if combine_fn is None:
            if coder is None:
                msg = f"CombiningValueStateSpec({name!r}): combine_fn must be provided"
                raise ValueError(msg)
            coder, combine_fn = None, coder
        self.combine_fn: CombineFn = CombineFn.maybe_from_callable(combine_fn)
        if coder is None:
            from sparkbeam.coders import PickleCoder

            coder = PickleCoder()
        super().__init__(name, coder)


class TimerSpec:
    """A timer a stateful DoFn declares: its name and time domain; ``@on_timer(spec)``
    names the method that runs when it fires."""

    prefix = "ts-"

    def __init__(self, name: str, time_domain: str) -> None:
        if not isinstance(name, str):
            msg = f"TimerSpec: the name must be a string, not {name!r}"
            raise TypeError(msg)
        if time_domain not in (TimeDomain.WATERMARK, TimeDomain.REAL_TIME):
            msg = (
                f"TimerSpec({name!r}): unsupported time domain {time_domain!r}; Beam's timers take "
                "TimeDomain.WATERMARK (event time) or TimeDomain.REAL_TIME (processing time)"
            )
            raise ValueError(msg)
        self.name = self.prefix + name
        self.time_domain = time_domain
        self._attached_callback: Callable | None = None

    def __repr__(self) -> str:
        return f"TimerSpec({self.name})"


def on_timer(timer_spec: TimerSpec) -> Callable[[_F], _F]:
    """Marks the DoFn method that runs when ``timer_spec``'s timer fires."""
    if not isinstance(timer_spec, TimerSpec):
        msg = f"@on_timer expects a TimerSpec, not {timer_spec!r}"
        raise ValueError(msg)

    def attach(method: _F) -> _F:
        if not callable(method):
            msg = f"@on_timer({timer_spec!r}) decorates a method, not {method!r}"
            raise ValueError(msg)
        if timer_spec._attached_callback is not None:
            msg = f"Multiple on_timer callbacks registered for {timer_spec!r}"
            raise ValueError(msg)
        timer_spec._attached_callback = method
        return method

    return attach


def _param_defaults(method: Callable) -> list[tuple[str, Any]]:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return []
    return [(p.name, p.default) for p in parameters if p.default is not inspect.Parameter.empty]


def get_dofn_specs(dofn: Any) -> tuple[set[StateSpec], set[TimerSpec]]:
    """The state and timer specs the DoFn's methods ask for, as Beam's function of that name."""
    from sparkbeam.dofn import StateParamMarker, TimerParamMarker

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
