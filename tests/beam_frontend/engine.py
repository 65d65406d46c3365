"""Running a translated Beam pipeline on the engine alone (no Spark), for fast exact tests."""

from __future__ import annotations

from typing import Any

from apache_beam.runners.pipeline_utils import group_by_key_input_visitor

from sparkbeam.runners.beam.capture import captured_in
from sparkbeam.runners.beam.translate import translate
from sparkbeam.runners.core.loop.clock import ManualClock
from sparkbeam.runners.core.loop.history import RunHistory
from sparkbeam.runners.core.loop.memory import MemoryBackend
from sparkbeam.runners.core.loop.steps import StepLoop
from sparkbeam.runners.core.plan.plan import StagePlan, plan_stages


def plan_of(pipeline: Any) -> StagePlan:
    pipeline.visit(group_by_key_input_visitor(True))
    captured, logs = captured_in(pipeline)
    locations = getattr(pipeline.runner, "locations", {})
    return plan_stages(translate(pipeline, locations=locations, captured=captured, capture_logs=logs))


def run_in_engine(pipeline: Any, *, streaming: bool = False) -> tuple[StagePlan, StepLoop]:
    """Translate ``pipeline`` and run it on the in-memory backend; (plan, finished loop)."""
    plan = plan_of(pipeline)
    history = RunHistory(plan.lowered.captured)
    loop = StepLoop(plan, MemoryBackend(overlapping_window_rule=False), ManualClock(), batch=not streaming, history=history)
    loop.run()
    return plan, loop


def emitted_values(plan: StagePlan, loop: StepLoop, pcoll: Any) -> list[Any]:
    labels = {info.id: info.label for info in plan.lowered.pcollections}
    return [e.value for e in loop.history.emitted(labels)[plan.lowered.id_of(pcoll)]]


def op_labelled(plan: Any, label: str) -> Any:
    """The op of the plan with ``label`` (a Beam Map's own, or the composite's)."""
    (op,) = [op for op in plan.lowered.ops if op.label == label or op.label.startswith(f"{label}/Map(")]
    return op


def sparkbeam_wv(value: Any) -> Any:
    """``value`` as a sparkbeam element: in the global window at the minimum timestamp."""
    from sparkbeam.utils.timestamp import MIN_TIMESTAMP
    from sparkbeam.utils.windowed_value import PANE_INFO_UNKNOWN, WindowedValue
    from sparkbeam.window import GlobalWindow

    return WindowedValue(value, MIN_TIMESTAMP.micros, (GlobalWindow(),), PANE_INFO_UNKNOWN)
