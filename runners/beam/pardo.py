"""A Beam ParDo in the engine: its DoFn run by Beam's own ``DoFnRunner``.

``BeamParDoOp`` is a ``ParDoOp`` (so planning fuses it, routes its side inputs and makes
a stage wait for them in a stream) registered like one (``execution.register_kind``, at the
end of this module) but for what runs its DoFn in a fused body, ``BeamDoFnRunner``: each
element is handed to ``apache_beam.runners.common.DoFnRunner`` as Beam's WindowedValue, so
every DoFn feature of Beam's Python SDK (lifecycle methods, DoFn parameters, tagged
outputs, ``TimestampedValue`` and ``WindowedValue`` outputs, side inputs of every view
kind through Beam's own view functions) behaves as in Beam. Outputs come back through
receivers that convert them to the engine's elements.

Outputs to a tag the transform did not declare are dropped, as Beam's runners drop them
(``with_outputs()`` without tags declares only the outputs the pipeline reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
from apache_beam.runners import common
from apache_beam.runners.worker import statesampler
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.utils import windowed_value as beam_wv

from sparkbeam.runners.beam.elements import (
    to_beam_pane,
    to_beam_windows,
    to_engine_pane,
    to_engine_windows,
)
from sparkbeam.runners.beam.metrics import beam_metrics, task_tracker
from sparkbeam.runners.beam.windowing import for_outputs, to_beam_window
from sparkbeam.runners.core.elements.dofn_invoker import SideInputs
from sparkbeam.runners.core.elements.execution import pardo_joiner, register_kind
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.core.lowering.ops import ParDoOp
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["BeamDoFnRunner", "BeamParDoOp", "IndexedSideInputMap", "SideInputName", "SideView"]

Emit = Callable[[WindowedValue], None]
_create = beam_wv.create
_get_tracker = statesampler.get_current_tracker
_set_tracker = statesampler.set_current_tracker


@attrs.frozen
class SideInputName:
    """Stands for a Beam side input's PCollection in a slot (``SideInputSlot.describe``
    prints its label): the op ships this, not the PCollection with its pipeline."""

    label: str


@attrs.frozen
class SideView:
    """How Beam views one side input: the view class (``AsList``, ``AsDict``, ...) and the
    options its ``_from_runtime_iterable`` reads (default value, window mapping, coder)."""

    view_class: type
    options: dict = attrs.field(hash=False)


@attrs.frozen
class BeamParDoOp(ParDoOp):
    """A ParDo of an apache_beam pipeline. ``args``/``kwargs`` are Beam's, with argument
    placeholders where side inputs go; ``side_views`` are aligned with ``side_inputs``."""

    #: the main input PCollection's Beam windowing: Beam's output handler windows the
    #: ``TimestampedValue`` outputs with its window fn
    beam_windowing: Any = attrs.field(default=None, eq=False)
    side_views: tuple[SideView, ...] = attrs.field(default=(), eq=False)


class _EngineReceiver(common.Receiver):
    """Receives one output of a Beam DoFn and passes it on as the engine's element."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        # The outputs of one input share its windows (a tuple) and pane: converted once,
        # kept by identity (a pane's lookup by value hashes its five fields in Python).
        self._beam_windows: Any = None
        self._engine_windows: tuple = ()
        self._beam_pane: Any = None
        self._engine_pane: Any = None

    def receive(self, windowed_value: Any) -> None:
        windows = windowed_value.windows
        if windows is self._beam_windows:
            engine_windows = self._engine_windows
        else:
            engine_windows = to_engine_windows(windows)
            if type(windows) is tuple:  # a list may change in place: never kept
                self._beam_windows, self._engine_windows = windows, engine_windows
        pane = windowed_value.pane_info
        if pane is not self._beam_pane:  # Beam's PaneInfo is immutable: kept by identity
            self._beam_pane, self._engine_pane = pane, to_engine_pane(pane)
        try:
            self.emit(WindowedValue(windowed_value.value, windowed_value.timestamp_micros, engine_windows, self._engine_pane))
        except UserCodeError as error:
            # A failure downstream, already named: Beam's DoFnRunner must pass it on as it is,
            # not rename it after this step.
            error._tagged_with_step = True
            raise


class _Dropping(common.Receiver):
    def receive(self, windowed_value: Any) -> None:
        return None


class _Receivers(dict):
    """Tag -> receiver; an undeclared tag's outputs are dropped, as in Beam's runners."""

    def __missing__(self, tag: Any) -> common.Receiver:
        receiver = self[tag] = _Dropping()
        return receiver


def engine_receivers(emitters: dict[str | None, Emit]) -> _Receivers:
    """Beam's output receivers for a DoFnRunner: each tag's outputs to its emitter as the
    engine's elements; the main output dropped when nothing reads it."""
    receivers = _Receivers()
    for tag, emit in emitters.items():
        receivers[tag] = _EngineReceiver(emit)
    if None not in receivers:
        receivers[None] = _Dropping()
    return receivers


class _WindowValues:
    """One window's values of a side input as Beam's ``_FilteringIterable`` hands them to a
    view (iterable any number of times, pickled as a list), from a list already filtered."""

    __slots__ = ("_values",)

    def __init__(self, values: list) -> None:
        self._values = values

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __reduce__(self) -> tuple:
        return list, (list(self._values),)


class IndexedSideInputMap(SideInputMap):
    """Beam's ``SideInputMap`` (its window mapping, its view, its cache per main-input
    window), each window's values read from the engine's index by window.

    Beam's own map filters the side input's whole contents for each main-input window it
    is asked for, which suits Beam's runners: they hand it the contents of one window
    only. Handed every window's, as the engine holds them, a side input windowed like its
    main input costs a pass over all its windows per main-input window and bundle, which
    grows as the square of the windows (Nexmark query 7 at 1M events: 10,000 windows,
    four times the import swap's time). Keyed by Beam's windows, so a window is found by
    Beam's own equality, as Beam's filter finds it."""

    def __init__(self, view: SideView, by_window: dict[Any, list]) -> None:
        super().__init__(view.view_class, view.options, ())
        self._values: dict[Any, list] = {}
        for window, values in by_window.items():
            beam_window = to_beam_window(window)
            if beam_window in self._values:  # two of the engine's windows are one of Beam's
                self._values[beam_window] = self._values[beam_window] + values
            else:
                self._values[beam_window] = values

    def __getitem__(self, window: Any) -> Any:
        found = self._cache.get(window, _MISSING)
        if found is _MISSING:
            values = self._values.get(self._window_mapping_fn(window), [])
            found = self._cache[window] = self._view_class._from_runtime_iterable(_WindowValues(values), self._view_options)
        return found


_MISSING = object()


def _side_input_maps(op: BeamParDoOp, side_inputs: SideInputs | None) -> list[SideInputMap]:
    return [
        IndexedSideInputMap(view, side_inputs.values_by_window(slot.pcoll) if side_inputs is not None else {})
        for slot, view in zip(op.side_inputs, op.side_views)
    ]


class BeamDoFnRunner:
    """Runs one Beam ParDo over a bundle through Beam's ``DoFnRunner``.

    Built on the worker per bundle (a partition of a step), with this bundle's copy of the
    DoFn: ``start`` is its setup and start_bundle, ``teardown`` its teardown.
    """

    def __init__(self, op: BeamParDoOp, emitters: dict[str | None, Emit], side_inputs: SideInputs | None) -> None:
        self.label = op.label
        self.location = op.location
        receivers = self.receivers(op, emitters)
        try:
            # With the step name, Beam adds "[while running 'label']" to a DoFn's exception,
            # as Beam's runners do (tests match on it); our note then says where it was applied.
            self.runner = common.DoFnRunner(
                op.dofn,
                op.args,
                op.kwargs,
                _side_input_maps(op, side_inputs),
                for_outputs(op.beam_windowing),
                tagged_receivers=receivers,
                step_name=op.label,
            )
        except Exception as error:
            raise UserCodeError(self.label, self.location, error) from error

    def receivers(self, op: BeamParDoOp, emitters: dict[str | None, Emit]) -> _Receivers:
        """Beam's output receivers for this DoFn (``batched.py`` adds batch outputs)."""
        return engine_receivers(emitters)

    def start(self) -> None:
        # Beam's metric updates of this bundle go to the task's container, under this step.
        self.tracker = task_tracker()
        # Consecutive elements share their windows (a tuple) and pane (a grouping's panes
        # are one object): converted once, kept by identity.
        self._engine_windows: tuple = ()
        self._beam_windows: tuple = ()
        self._engine_pane: Any = None
        self._beam_pane: Any = None
        self._guard(self.runner.setup)
        self._guard(self.runner.start)

    def to_beam(self, wv: WindowedValue) -> Any:
        """Beam's WindowedValue for the engine's (same value object)."""
        windows = wv.windows
        if windows is not self._engine_windows:
            self._beam_windows = to_beam_windows(windows)
            self._engine_windows = windows
        pane = wv.pane_info
        if pane is not self._engine_pane:  # the engine's PaneInfo is frozen: kept by identity
            self._beam_pane = to_beam_pane(pane)
            self._engine_pane = pane
        return _create(wv.value, wv.timestamp_micros, self._beam_windows, self._beam_pane)

    def process(self, wv: WindowedValue) -> None:
        previous = _get_tracker()
        _set_tracker(self.tracker)  # the DoFn's metrics go to the engine's
        try:
            self.runner.process(self.to_beam(wv))
        except UserCodeError:
            raise  # from a DoFn downstream in the same stage, already named
        except Exception as error:
            raise UserCodeError(self.label, self.location, error, wv.value) from error
        finally:
            _set_tracker(previous)

    def finish(self) -> None:
        self._guard(self.runner.finish)

    def finalize_bundle(self) -> None:
        """The callbacks the DoFn registered with ``DoFn.BundleFinalizerParam``, each once."""
        self._guard(self.runner.finalize)
        # Beam's finalizer keeps its callbacks: a later finalization must not call these again.
        self.runner.bundle_finalizer_param.reset()

    def teardown(self) -> None:
        self._guard(self.runner.teardown)

    def _guard(self, method: Callable[[], Any]) -> None:
        try:
            beam_metrics(method)
        except UserCodeError:
            raise
        except Exception as error:
            raise UserCodeError(self.label, self.location, error) from error


# A ParDo in every way (planning, side inputs, what must pickle) but for its DoFn's runner.
# Beam's metric updates read the step at each update (metrics.py): a fused body may name it
# per chunk.
register_kind(BeamParDoOp, like=ParDoOp, join_body=pardo_joiner(BeamDoFnRunner), body_code="pardo")
