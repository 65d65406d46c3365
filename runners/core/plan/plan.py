"""Stage planning: fuse element-wise ops into stages, with a boundary at each source and grouping.

A stage is: a head (a source, a grouping, or nothing), then a fused body of element-wise
ops (ParDo, WindowInto, Flatten) that run in one pass over the head's output. An
element-wise op joins the stage its input comes from; one whose inputs come from several
stages (a Flatten across branches) starts a stage with no head; a ParDo with side inputs
starts a new stage, after the stages producing its side inputs: in batch they are complete
before it runs; in a stream its elements wait there until their side windows are ready
(``side_input_wait``). Each stage has an input and an output watermark (DESIGN §4); the
step loop runs stages in the topological order planned here. Which of these an op is, is
its kind's role (``execution.py``).
"""

from __future__ import annotations

import attrs

from sparkbeam.runners.core.elements.execution import Role, kind_of
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import LoweredPipeline, Op

__all__ = ["Stage", "StagePlan", "plan_stages"]


@attrs.frozen
class Stage:
    """One fused stage. ``inputs`` are PCollections produced by other stages."""

    id: int
    name: str
    head: Op | None
    body: tuple[Op, ...]
    inputs: tuple[int, ...]
    #: PCollections produced here that something outside the stage reads (another stage,
    #: a sink, a side input, a capture)
    outputs: tuple[int, ...]
    upstream: tuple[int, ...]
    sinks: tuple[Op, ...] = ()
    #: for a TestStream split per output tag: the tag this stage emits
    source_tag: str | None = None
    #: outputs read by more than one consumer (stages, sinks, side inputs, captures)
    shared_outputs: tuple[int, ...] = ()

    @property
    def is_source(self) -> bool:
        return self.head is not None and kind_of(self.head).role is Role.SOURCE

    @property
    def grouping(self) -> Op | None:
        """The grouping that heads the stage, if one does."""
        if self.head is not None and kind_of(self.head).role is Role.GROUPING:
            return self.head
        return None

    @property
    def side_input_reader(self) -> Op | None:
        """The ParDo reading side inputs that heads the stage's body (planning starts a new
        stage at each such ParDo, so there is at most one, and it reads the stage's input)."""
        if self.head is not None or not self.body:
            return None
        first = self.body[0]
        return first if first.side_inputs else None

    @property
    def produced(self) -> tuple[int, ...]:
        """Every PCollection computed inside the stage (head and body outputs)."""
        ids = list(self.head.outputs) if self.head is not None else []
        for op in self.body:
            ids.extend(op.outputs)
        return tuple(ids)


@attrs.frozen
class StagePlan:
    stages: tuple[Stage, ...]  # topological order
    lowered: LoweredPipeline

    def stage_of(self, pcoll: int) -> Stage:
        for stage in self.stages:
            if pcoll in stage.produced:
                return stage
        msg = f"no stage produces PCollection {pcoll}"
        raise KeyError(msg)

    def side_input_pcolls(self) -> frozenset[int]:
        return frozenset(
            slot.pcoll
            for stage in self.stages
            for op in stage.body
            for slot in op.side_inputs
        )

    def note(self, stage: Stage) -> str | None:
        """How the planner chose to run the stage's head, if it chose (``LoweredPipeline.notes``)."""
        return self.lowered.notes.get(stage.head.label) if stage.head is not None else None

    def stage_notes(self) -> dict[str, str]:
        """Stage name -> the planner's note on it, for the stages that have one."""
        return {stage.name: note for stage in self.stages if (note := self.note(stage)) is not None}

    def describe(self) -> str:
        """A readable listing of the stages, for users and for tests."""
        lines = []
        for stage in self.stages:
            head = stage.head.label if stage.head is not None else "-"
            body = ", ".join(op.label for op in stage.body) or "-"
            lines.append(f"stage {stage.id} {stage.name!r}: head={head}; body=[{body}]; upstream={list(stage.upstream)}")
            note = self.note(stage)
            if note is not None:
                lines.append(f"    {note}")
        return "\n".join(lines)


def plan_stages(lowered: LoweredPipeline) -> StagePlan:
    producer_stage: dict[int, int] = {}  # pcoll -> index in drafts
    sink_outputs: dict[int, Op] = {}  # a sink's output PCollection, which stays empty
    drafts: list[dict] = []

    def new_stage(name: str, head: Op | None, inputs: tuple[int, ...], source_tag: str | None = None) -> int:
        drafts.append({"name": name, "head": head, "body": [], "inputs": inputs, "sinks": [], "source_tag": source_tag, "side": set()})
        index = len(drafts) - 1
        if head is not None:
            for pcoll in head.outputs:
                producer_stage[pcoll] = index
        return index

    for op in lowered.ops:
        side_pcolls = tuple(slot.pcoll for slot in op.side_inputs)
        _refuse_reading_sink_output(op, (*op.inputs, *side_pcolls), sink_outputs)
        kind = kind_of(op)
        split = kind.split_stages(op)
        if split:
            # each output has its own watermark, so each becomes its own source stage
            for name, part, tag in split:
                new_stage(name, part, (), tag)
            continue
        if kind.role is Role.SOURCE:
            new_stage(op.label, op, ())
            continue
        if kind.role is Role.GROUPING:
            new_stage(op.label, op, op.inputs)
            continue
        if kind.role is Role.SINK:
            (pcoll,) = op.inputs
            drafts[producer_stage[pcoll]]["sinks"].append(op)
            sink_outputs.update((output, op) for output in op.outputs)
            continue
        input_stages = {producer_stage[pcoll] for pcoll in op.inputs}
        side_inputs = op.side_inputs
        if len(input_stages) == 1 and not side_inputs:
            index = input_stages.pop()
        else:
            index = new_stage(op.label, None, op.inputs)
        drafts[index]["body"].append(op)
        if side_inputs:
            drafts[index]["side"].update(producer_stage[slot.pcoll] for slot in op.side_inputs)
        for pcoll in op.outputs:
            producer_stage[pcoll] = index

    external: set[int] = set(lowered.captured)
    readers: dict[int, int] = {p: 1 for p in lowered.captured}  # pcoll -> how many read it
    for pcoll in lowered.captured & sink_outputs.keys():
        _refuse_reading_sink_output(None, (pcoll,), sink_outputs)
    for draft in drafts:
        external.update(draft["inputs"])
        for pcoll in draft["inputs"]:
            readers[pcoll] = readers.get(pcoll, 0) + 1
        for op in draft["body"]:
            external.update(slot.pcoll for slot in op.side_inputs)
            for slot in op.side_inputs:
                readers[slot.pcoll] = readers.get(slot.pcoll, 0) + 1
        for sink in draft["sinks"]:
            external.update(sink.inputs)
            for pcoll in sink.inputs:
                readers[pcoll] = readers.get(pcoll, 0) + 1

    stages = []
    for index, draft in enumerate(drafts):
        produced = set(draft["head"].outputs) if draft["head"] is not None else set()
        for op in draft["body"]:
            produced.update(op.outputs)
        upstream = {producer_stage[p] for p in draft["inputs"]} | draft["side"]
        stages.append(
            Stage(
                id=index,
                name=draft["name"],
                head=draft["head"],
                body=tuple(draft["body"]),
                inputs=tuple(draft["inputs"]),
                outputs=tuple(sorted(p for p in produced if p in external)),
                shared_outputs=tuple(sorted(p for p in produced if readers.get(p, 0) > 1)),
                upstream=tuple(sorted(upstream)),
                sinks=tuple(draft["sinks"]),
                source_tag=draft["source_tag"],
            )
        )
    # Ops arrive producers-first, so stage ids are already a topological order.
    return StagePlan(tuple(stages), lowered)


def _refuse_reading_sink_output(reader: Op | None, inputs: tuple[int, ...], sink_outputs: dict[int, Op]) -> None:
    """A streaming file sink's output PCollection is never filled: reading it is an error."""
    for pcoll in inputs:
        sink = sink_outputs.get(pcoll)
        if sink is None:
            continue
        what = f"'{reader.label}' (applied at {reader.location}) reads" if reader is not None else "capturing"
        msg = (
            f"{what} the output of '{sink.label}' (applied at {sink.location}), which a streaming "
            "file write leaves empty: its output is the directory each step commits "
            "(prefix-step-NNNNNNNN/); read those files, or capture the PCollection before the write"
        )
        raise UnsupportedError(msg)
