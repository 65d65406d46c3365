"""Beam's windows, window fns and windowing strategies as the engine's.

The engine keeps its own window classes (``sparkbeam.window``) and specs, and Beam's are
translated at the edge, for two reasons:

- the engine hashes windows to shuffle and to key state by (key, window) across executor
  processes; Beam's ``GlobalWindow`` hashes by its type's identity, which differs from one
  Python process to the next, while ours hashes to a constant;
- the built-in window fns have fast paths in the engine (cached assignment, the
  overlapping-window rule of ``SlidingWindows``), which a translated fn keeps.

So Beam's built-in ``GlobalWindows``, ``FixedWindows``, ``SlidingWindows`` and ``Sessions``
become ours (same arguments, same semantics), a custom Beam ``WindowFn`` is wrapped in
``BeamWindowFn``, which calls it with Beam's windows and timestamps, and windows are
converted where Beam code sees them (DoFns, custom window fns, side-input views):
``to_beam_window`` and ``to_engine_window``. Triggers, accumulation modes, timestamp
combiners and allowed lateness map one to one onto ``sparkbeam.trigger`` and
``sparkbeam.windowing.Windowing``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import attrs
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import Duration as BeamDuration
from apache_beam.utils.timestamp import Timestamp as BeamTimestamp

from sparkbeam import trigger
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.utils.timestamp import Duration, Timestamp
from sparkbeam.window import (
    BoundedWindow,
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    TimestampCombiner,
    WindowFn,
)
from sparkbeam.windowing import Windowing

__all__ = [
    "BeamWindowFn",
    "ForeignWindow",
    "engine_trigger",
    "engine_windowfn",
    "engine_windowing",
    "for_outputs",
    "to_beam_window",
    "to_engine_window",
]

_ENGINE_GLOBAL = GlobalWindow()
_BEAM_GLOBAL = beam_window.GlobalWindow()
# Conversions repeat: a stream's elements share few windows. The caches are bounded so a
# long stream of ever-new windows does not grow them without end.
_CACHE_LIMIT = 100_000


@attrs.frozen(repr=False)
class ForeignWindow(BoundedWindow):
    """A window of a class of the user's (a custom Beam ``BoundedWindow``), as the engine
    sees it: ordered by its end, equal and hashed as the user's window is."""

    beam: Any

    @property
    def start(self) -> Timestamp:
        start = getattr(self.beam, "start", None)
        return Timestamp.from_micros(start.micros) if start is not None else Timestamp.from_micros(self.beam.end.micros - 1)

    @property
    def end(self) -> Timestamp:
        return Timestamp.from_micros(self.beam.end.micros)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BoundedWindow):
            return NotImplemented
        return self.end.micros < other.end.micros

    def __repr__(self) -> str:
        return repr(self.beam)

    def __str__(self) -> str:
        return str(self.beam)


_to_engine: dict[Any, BoundedWindow] = {}
_to_beam: dict[Any, Any] = {}


def to_engine_window(window: Any) -> BoundedWindow:
    """The engine's window for one of Beam's."""
    found = _to_engine.get(window)
    if found is not None:
        return found
    kind = type(window)
    converted: BoundedWindow
    if kind is beam_window.GlobalWindow:
        converted = _ENGINE_GLOBAL
    elif kind is beam_window.IntervalWindow and window.end.micros > window.start.micros:
        converted = IntervalWindow(Timestamp.from_micros(window.start.micros), Timestamp.from_micros(window.end.micros))
    else:
        # A window of the user's class, or an empty interval (Beam allows [5, 5), ours does not).
        converted = ForeignWindow(window)
    if len(_to_engine) >= _CACHE_LIMIT:
        _to_engine.clear()
    _to_engine[window] = converted
    return converted


def to_beam_window(window: BoundedWindow) -> Any:
    """Beam's window for one of the engine's."""
    found = _to_beam.get(window)
    if found is not None:
        return found
    converted: Any
    if isinstance(window, GlobalWindow):
        converted = _BEAM_GLOBAL
    elif isinstance(window, IntervalWindow):
        converted = beam_window.IntervalWindow(
            BeamTimestamp(micros=window.start.micros), BeamTimestamp(micros=window.end.micros)
        )
    elif isinstance(window, ForeignWindow):
        converted = window.beam
    else:
        msg = f"no Beam window for the engine's {window!r}"
        raise TypeError(msg)
    if len(_to_beam) >= _CACHE_LIMIT:
        _to_beam.clear()
    _to_beam[window] = converted
    return converted


class _ForwardingMergeContext(beam_window.WindowFn.MergeContext):
    """Beam's merge context over the engine's: each merge the user's fn reports is passed on
    with the engine's windows."""

    def __init__(self, engine_context: WindowFn.MergeContext) -> None:
        super().__init__(to_beam_window(w) for w in engine_context.windows)
        self._engine_context = engine_context

    def merge(self, to_be_merged: Iterable[Any], merge_result: Any) -> None:
        self._engine_context.merge([to_engine_window(w) for w in to_be_merged], to_engine_window(merge_result))


@attrs.frozen(eq=False)
class BeamWindowFn(WindowFn):
    """A custom Beam ``WindowFn``, run as the user wrote it, for the engine.

    Assigning and merging call the user's fn with Beam's timestamps and windows; the
    windows it returns come back as the engine's. Equal when the wrapped fns are equal.
    """

    beam: Any

    def assign(self, assign_context: WindowFn.AssignContext) -> list[BoundedWindow]:
        current = assign_context.window
        context = beam_window.WindowFn.AssignContext(
            BeamTimestamp(micros=assign_context.timestamp.micros),
            element=assign_context.element,
            window=to_beam_window(current) if current is not None else None,
        )
        return [to_engine_window(w) for w in self.beam.assign(context)]

    def merge(self, merge_context: WindowFn.MergeContext) -> None:
        self.beam.merge(_ForwardingMergeContext(merge_context))

    def is_merging(self) -> bool:
        return bool(self.beam.is_merging())

    def get_transformed_output_time(self, window: BoundedWindow, input_timestamp: Timestamp) -> Timestamp:
        output = self.beam.get_transformed_output_time(to_beam_window(window), BeamTimestamp(micros=input_timestamp.micros))
        return Timestamp.from_micros(BeamTimestamp.of(output).micros)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BeamWindowFn) and self.beam == other.beam

    def __hash__(self) -> int:
        try:
            return hash(self.beam)
        except TypeError:  # a user's fn with __eq__ and no __hash__
            return hash(type(self.beam))

    def __repr__(self) -> str:
        return f"BeamWindowFn({self.beam!r})"


class _AssignsTheGlobalWindow(beam_window.GlobalWindows):
    """Beam's ``GlobalWindows`` for a DoFn's re-stamped outputs (``TimestampedValue``):
    the same window, but Beam's one ``GlobalWindow`` object is assigned as it is, where
    ``GlobalWindow()`` would read the end of the global window from Beam's protos again."""

    def assign(self, assign_context: Any) -> list[Any]:
        return [_BEAM_GLOBAL]  # a new list: Beam's output handler may extend it in place


def for_outputs(windowing: Any) -> Any:
    """The Beam windowing a DoFnRunner windows re-stamped outputs with: ``windowing``, but
    for Beam's plain ``GlobalWindows``, which becomes ``_AssignsTheGlobalWindow``."""
    if windowing is None or type(windowing.windowfn) is not beam_window.GlobalWindows:
        return windowing
    fast = copy.copy(windowing)
    fast.windowfn = _AssignsTheGlobalWindow()
    return fast


def _micros(value: Any) -> int:
    return int(value.micros)


def engine_windowfn(windowfn: Any) -> WindowFn:
    """The engine's window fn for a Beam one: Beam's built-ins become ours, exactly (not
    their subclasses, which may override ``assign``); any other is wrapped."""
    kind = type(windowfn)
    if kind is beam_window.GlobalWindows:
        return GlobalWindows()
    if kind is beam_window.FixedWindows:
        return FixedWindows(Duration.from_micros(_micros(windowfn.size)), Timestamp.from_micros(_micros(windowfn.offset)))
    if kind is beam_window.SlidingWindows:
        return SlidingWindows(
            Duration.from_micros(_micros(windowfn.size)),
            Duration.from_micros(_micros(windowfn.period)),
            Timestamp.from_micros(_micros(windowfn.offset)),
        )
    if kind is beam_window.Sessions:
        return Sessions(Duration.from_micros(_micros(windowfn.gap_size)))
    if not isinstance(windowfn, beam_window.WindowFn):
        msg = f"{windowfn!r} is not a Beam WindowFn"
        raise TypeError(msg)
    return BeamWindowFn(windowfn)


def _composite(kind: Callable[..., trigger.TriggerFn]) -> Callable[[Any, str], trigger.TriggerFn]:
    def translate(spec: Any, label: str) -> trigger.TriggerFn:
        return kind(*(engine_trigger(t, label) for t in spec.triggers))

    return translate


def _after_watermark(spec: Any, label: str) -> trigger.TriggerFn:
    # Beam wraps early and late in Repeatedly, as ours does: pass what they repeat.
    early = engine_trigger(spec.early.underlying, label) if spec.early is not None else None
    late = engine_trigger(spec.late.underlying, label) if spec.late is not None else None
    return trigger.AfterWatermark(early=early, late=late)


_TRIGGER_TRANSLATIONS: dict[type, Callable[[Any, str], trigger.TriggerFn]] = {
    beam_trigger.DefaultTrigger: lambda spec, label: trigger.DefaultTrigger(),
    beam_trigger.Always: lambda spec, label: trigger.Always(),
    beam_trigger._Never: lambda spec, label: trigger.Never(),
    beam_trigger.AfterCount: lambda spec, label: trigger.AfterCount(spec.count),
    beam_trigger.AfterProcessingTime: lambda spec, label: trigger.AfterProcessingTime(
        Duration.from_micros(BeamDuration.of(spec.delay).micros)
    ),
    beam_trigger._AfterSynchronizedProcessingTime: lambda spec, label: trigger._AfterSynchronizedProcessingTime(),
    beam_trigger.Repeatedly: lambda spec, label: trigger.Repeatedly(engine_trigger(spec.underlying, label)),
    beam_trigger.AfterWatermark: _after_watermark,
    beam_trigger.AfterAny: _composite(trigger.AfterAny),
    beam_trigger.AfterAll: _composite(trigger.AfterAll),
    beam_trigger.AfterEach: _composite(trigger.AfterEach),
    beam_trigger.OrFinally: _composite(trigger.OrFinally),
}


def _untranslated_trigger(subject: tuple[Any, str], known: list[str]) -> UnsupportedError:
    spec, label = subject
    msg = (
        f"'{label}': the trigger {spec!r} ({type(spec).__name__}) has no translation to "
        f"sparkbeam's triggers; supported: {', '.join(known)}"
    )
    return UnsupportedError(msg)


#: Beam trigger type (exactly) -> the engine's trigger
_TRIGGERS: Registry[Callable[[Any, str], trigger.TriggerFn]] = Registry(
    "Beam triggers", refuse=_untranslated_trigger, key=lambda subject: type(subject[0])
)
for _beam_type, _translation in _TRIGGER_TRANSLATIONS.items():
    _TRIGGERS.add(_beam_type, _translation)


def engine_trigger(spec: Any, label: str) -> trigger.TriggerFn:
    """The engine's trigger spec for a Beam trigger (same semantics, same names)."""
    return _TRIGGERS.lookup((spec, label))(spec, label)


_COMBINERS = {
    beam_window.TimestampCombiner.OUTPUT_AT_EOW: TimestampCombiner.OUTPUT_AT_EOW,
    beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST: TimestampCombiner.OUTPUT_AT_EARLIEST,
    beam_window.TimestampCombiner.OUTPUT_AT_LATEST: TimestampCombiner.OUTPUT_AT_LATEST,
    beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED: TimestampCombiner.OUTPUT_AT_EARLIEST_TRANSFORMED,
}

_ACCUMULATION = {
    beam_trigger.AccumulationMode.DISCARDING: trigger.AccumulationMode.DISCARDING,
    beam_trigger.AccumulationMode.ACCUMULATING: trigger.AccumulationMode.ACCUMULATING,
}


def engine_windowing(windowing: Any, label: str) -> Windowing:
    """The engine's windowing strategy for a Beam PCollection's ``windowing``."""
    combiner = _COMBINERS.get(windowing.timestamp_combiner)
    if combiner is None:
        msg = f"'{label}': unknown timestamp combiner {windowing.timestamp_combiner!r}"
        raise UnsupportedError(msg)
    accumulation = _ACCUMULATION.get(windowing.accumulation_mode)
    if accumulation is None:
        msg = f"'{label}': accumulation mode {windowing.accumulation_mode!r} is not supported (DISCARDING or ACCUMULATING)"
        raise UnsupportedError(msg)
    return Windowing(
        windowfn=engine_windowfn(windowing.windowfn),
        triggerfn=engine_trigger(windowing.triggerfn, label),
        accumulation_mode=accumulation,
        timestamp_combiner=combiner,
        allowed_lateness=Duration.from_micros(_micros(windowing.allowed_lateness)),
    )
