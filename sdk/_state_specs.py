"""The state and timer specs of stateful DoFns, and the parameter markers that ask for them
(re-exported by ``sparkbeam.userstate``, ``sparkbeam.transforms.userstate`` and, for the
markers, ``sparkbeam.dofn``).

Specs and markers are one module because each refers to the other: ``DoFn.StateParam(spec)``
checks that it is given a spec, and ``get_dofn_specs`` finds a DoFn's specs through its
markers. Both sides import this module, which imports neither of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sparkbeam._combine_fn import CombineFn
from sparkbeam._dofn_params import DoFnParam
from sparkbeam.coders import Coder, PickleCoder

__all__ = [
    "BagStateSpec",
    "CombiningValueStateSpec",
    "OrderedListStateSpec",
    "ReadModifyWriteStateSpec",
    "SetStateSpec",
    "StateParamMarker",
    "StateSpec",
    "TimeDomain",
    "TimerParamMarker",
    "TimerSpec",
    "on_timer",
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


class StateParamMarker(DoFnParam):
    """``DoFn.StateParam(spec)``: the runner passes the state cell ``spec`` declares, for
    the current key and window."""

    state_spec: Any

    def __init__(self, state_spec: Any) -> None:
        if not isinstance(state_spec, StateSpec):
            msg = (
                f"DoFn.StateParam expects a StateSpec (BagStateSpec, ReadModifyWriteStateSpec, "
                f"CombiningValueStateSpec, SetStateSpec, OrderedListStateSpec), not {state_spec!r}"
            )
            raise ValueError(msg)
        object.__setattr__(self, "name", f"StateParam({state_spec.name})")
        object.__setattr__(self, "state_spec", state_spec)

    def __reduce__(self) -> tuple:
        return _reduce_marker(self, "state_spec")

    def __setstate__(self, state: dict) -> None:
        _restore_marker(self, state)


class TimerParamMarker(DoFnParam):
    """``DoFn.TimerParam(spec)``: the runner passes the timer ``spec`` declares, for the
    current key and window."""

    timer_spec: Any

    def __init__(self, timer_spec: Any) -> None:
        if not isinstance(timer_spec, TimerSpec):
            msg = f"DoFn.TimerParam expects a TimerSpec, not {timer_spec!r}"
            raise ValueError(msg)
        object.__setattr__(self, "name", f"TimerParam({timer_spec.name})")
        object.__setattr__(self, "timer_spec", timer_spec)

    def __reduce__(self) -> tuple:
        return _reduce_marker(self, "timer_spec")

    def __setstate__(self, state: dict) -> None:
        _restore_marker(self, state)


def _reduce_marker(marker: DoFnParam, field: str) -> tuple:
    # Rebuilt empty, then filled: a spec and the on_timer method whose defaults hold this
    # marker refer to each other, so the spec may still be half-built when the marker is.
    return (_empty_marker, (type(marker),), {"name": marker.name, field: getattr(marker, field)})


def _empty_marker(kind: type) -> Any:
    return object.__new__(kind)


def _restore_marker(marker: DoFnParam, state: dict) -> None:
    for field, value in state.items():
        object.__setattr__(marker, field, value)
