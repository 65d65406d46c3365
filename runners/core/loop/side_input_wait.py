"""Streaming side inputs: a main-input element waits until its side inputs are ready for its window.

When a side input is ready follows Beam's direct runner, the oracle of our tests
(``apache_beam/runners/direct/executor.py`` and ``evaluation_context.py``): the main
window is mapped onto the side input's window (``side_window_for``), and the side input is
ready for it once the output watermark of what produces the side input has reached that
window's end. A fired pane does not make it ready sooner (Beam Java's runners also accept
a first pane; Beam Python's direct runner does not, so an early pane of a global-window
side input is seen only with the rest, when the input ends).

Until then the element is parked in the reading stage's state, per window, holding the
stage's output watermark at its timestamp; it is processed in the step that makes the side
input ready. In batch every side input is complete before the stage runs, so nothing waits.

A side input's contents for a window are kept until the window expires: its end plus the
side input's allowed lateness behind the reading stage's input watermark
(``expire_side_contents``). A main-input element that arrives after the side window it
reads has expired is dropped and counted as late (``DropReason.LATE``), since what it
would read is gone.

``run_waiting`` is one step of such a stage over one partition, the same code in memory
and on Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sparkbeam.runners.core.elements.dofn_invoker import SideInputs, side_window_for
from sparkbeam.runners.core.elements.execution import kind_of
from sparkbeam.runners.core.elements.fused import FusedBody
from sparkbeam.runners.core.grouping.drops import DropReason, GroupingStats
from sparkbeam.runners.core.grouping.records import Parked, ReleaseAt, Summary
from sparkbeam.runners.core.lowering.errors import TransformError, UserCodeError
from sparkbeam.runners.core.lowering.ops import Op, SideInputSlot
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.runners.core.plan.plan import Stage, StagePlan
from sparkbeam.utils.timestamp import MAX_TIMESTAMP
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import GlobalWindow, GlobalWindows

__all__ = [
    "expire_side_contents",
    "refuse_side_inputs_never_ready",
    "run_waiting",
    "side_input_op",
]

MAX = MAX_TIMESTAMP.micros


def side_input_op(stage: Stage) -> Op | None:
    """The ParDo reading side inputs that heads the stage's body (``Stage.side_input_reader``)."""
    return stage.side_input_reader


def _gc_time(slot: SideInputSlot, side_window: Any) -> int:
    return side_window.max_timestamp().micros + slot.allowed_lateness.micros


class _Gate:
    """Sorts a stage's main-input elements, per window, into ready, waiting and expired."""

    def __init__(self, op: Op, params: StepParams) -> None:
        self.op = op
        self.slots = op.side_inputs
        self.watermarks = dict(params.side_input_watermarks)
        # Elements arriving in a step are judged at the input watermark as it was.
        self.input_watermark = params.old_input_watermark
        self._verdicts: dict[Any, tuple[str, str, str]] = {}
        #: side input -> the earliest end of a side window an element waits for on it first
        self.release_at: dict[int, int] = {}

    def verdict(self, window: Any, value: Any) -> tuple[str, str, str]:
        """("ready" | "expired" | "waiting", which side input, its window) for a main window."""
        found = self._verdicts.get(window)
        if found is None:
            found = self._verdicts[window] = self._judge(window, value)
        return found

    def _judge(self, window: Any, value: Any) -> tuple[str, str, str]:
        waiting = None
        for slot in self.slots:
            try:
                side_window = side_window_for(slot.windowfn, window)
            except ValueError as error:
                raise UserCodeError(self.op.label, self.op.location, error, value) from error
            if _gc_time(slot, side_window) < self.input_watermark:
                return ("expired", slot.describe(), str(side_window))
            end = side_window.end.micros
            if waiting is None and self.watermarks.get(slot.pcoll, MAX) < end:
                waiting = ("waiting", slot.describe(), str(side_window))
                # Until this side input's watermark reaches ``end``, the element cannot go.
                self.release_at[slot.pcoll] = min(end, self.release_at.get(slot.pcoll, MAX))
        return waiting or ("ready", "", "")

    def sort(self, wv: WindowedValue) -> Iterator[tuple[str, WindowedValue, str, str]]:
        """(verdict, element in the windows it applies to, side input, side window)."""
        verdicts = [self.verdict(window, wv.value) for window in wv.windows]
        if all(v[0] == "ready" for v in verdicts):
            yield ("ready", wv, "", "")
            return
        for window, (kind, side, side_window) in zip(wv.windows, verdicts):
            yield (kind, WindowedValue(wv.value, wv.timestamp_micros, (window,), wv.pane_info), side, side_window)


def run_waiting(
    stage: Stage,
    side_inputs: SideInputs | None,
    params: StepParams,
    arriving: Iterable[WindowedValue],
    parked: Iterable[WindowedValue],
) -> Iterator[tuple[int | None, WindowedValue | Parked | ReleaseAt | Summary]]:
    """One step of a stage that reads side inputs, over one partition.

    ``parked`` are the elements still waiting from earlier steps, ``arriving`` the stage's
    new input. Yields (pcoll, element) for what leaves the stage, (None, Parked) for what
    waits on, (None, ReleaseAt): nothing waiting can go before one of these side inputs'
    watermarks reaches its value (so a backend can skip the steps that cannot release
    anything), and last (None, Summary): elements in, out, dropped late, waiting, and the
    earliest waiting element as the stage's hold (``records.py``).
    """
    op = side_input_op(stage)
    if op is None:
        msg = f"'{stage.name}': no ParDo with side inputs heads this stage"
        raise TypeError(msg)
    (source,) = stage.inputs
    gate = _Gate(op, params)
    summary = StageSummary()
    stats = GroupingStats()
    waiting: list[WindowedValue] = []

    def ready() -> Iterator[tuple[int, WindowedValue]]:
        # Parked elements first: they arrived earlier.
        for counts, elements in ((False, parked), (True, arriving)):
            for wv in elements:
                if counts:
                    summary.elements_in += 1
                for kind, part, side, side_window in gate.sort(wv):
                    if kind == "ready":
                        yield (source, part)
                    elif kind == "expired":
                        stats.discard(DropReason.LATE, 1)
                    else:
                        waiting.append(part)
                        _hold(summary, part, side, side_window)

    body = FusedBody(stage, side_inputs)
    for pcoll, wv in body.run(ready()):
        summary.elements_out += 1
        yield pcoll, wv
    for wv in waiting:
        yield None, Parked(wv)
    yield None, ReleaseAt(tuple(sorted(gate.release_at.items())))
    summary.late_dropped = stats.late_dropped
    summary.side_input_waiting = len(waiting)
    yield None, Summary(summary)


def _hold(summary: StageSummary, wv: WindowedValue, side: str, side_window: str) -> None:
    """A waiting element holds the stage's output watermark at its timestamp."""
    if summary.earliest_hold is None or wv.timestamp_micros < summary.earliest_hold:
        summary.earliest_hold = wv.timestamp_micros
        summary.hold_key = f"side-input wait {side}"
        summary.hold_window = side_window


def expire_side_contents(elements: list[WindowedValue], watermark: int, allowed_lateness: int) -> list[WindowedValue]:
    """The side-input elements whose windows have not expired at ``watermark`` (the reading
    stages' input watermark): a window expires once its end plus the side input's allowed
    lateness is behind it, as a grouping's window state does."""
    kept = []
    for wv in elements:
        live = tuple(w for w in wv.windows if w.max_timestamp().micros + allowed_lateness >= watermark)
        if len(live) == len(wv.windows):
            kept.append(wv)
        elif live:
            kept.append(WindowedValue(wv.value, wv.timestamp_micros, live, wv.pane_info))
    return kept


def refuse_side_inputs_never_ready(plan: StagePlan, *, sources_end: bool) -> None:
    """Refuse, before any data is read, a side input that can never be ready.

    A side input is ready for a window once its watermark reaches the window's end. Fed by
    a real stream that never ends (no ``--available_now``), its watermark never reaches the
    end of the global window: a side input in the global window, or one read from main
    windows in the global window (which map onto the side window at the end of time), would
    keep every main element waiting for ever. Triggers do not help (see the module docs).
    """
    if sources_end:
        return
    endless = _stages_fed_by_endless_sources(plan)
    infos = plan.lowered.pcollections
    for stage in plan.stages:
        op = side_input_op(stage)
        if op is None:
            continue
        (main,) = op.inputs
        main_global = isinstance(infos[main].windowing.windowfn, GlobalWindows)
        for slot in op.side_inputs:
            source = endless.get(plan.stage_of(slot.pcoll).id)
            if source is None:
                continue
            if isinstance(slot.windowfn, GlobalWindows):
                why = "is in the global window"
            elif main_global:
                window = side_window_for(slot.windowfn, GlobalWindow())
                why = f"is read from main-input elements in the global window, which read its window {window} at the end of time"
            else:
                continue
            msg = (
                f"'{op.label}' (applied at {op.location}): side input {slot.describe()} {why}, and it "
                f"is fed by '{source}', a stream that never ends. A side input is ready for a window "
                "once its watermark passes the window's end (as in Beam's direct runner; a fired pane "
                f"does not make it ready), which that window never does, so every element of '{op.label}' "
                "would wait for ever. Window the side input and the main input into windows that close "
                "(e.g. beam.WindowInto(window.FixedWindows(60))), or run with --available_now so that "
                "the stream ends"
            )
            raise TransformError(msg)


def _stages_fed_by_endless_sources(plan: StagePlan) -> dict[int, str]:
    """Stage id -> label of a real-stream source upstream of it (stages are in topological order)."""
    fed: dict[int, str] = {}
    for stage in plan.stages:
        if stage.head is not None and kind_of(stage.head).endless:
            fed[stage.id] = stage.head.label
            continue
        for upstream in stage.upstream:
            if upstream in fed:
                fed[stage.id] = fed[upstream]
                break
    return fed
