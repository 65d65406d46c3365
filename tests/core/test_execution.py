"""The execution registry: every lowered op has a kind, backends run what they register and
refuse the rest by name, and the lists of what runs are read off the registry."""

from __future__ import annotations

import attrs
import pytest

import sparkbeam as beam
from sparkbeam.runners.core.elements.execution import Role, backend_ops, kind_of, supported_ops
from sparkbeam.runners.core.elements.fused import FusedBody
from sparkbeam.runners.core.loop.memory import run_in_memory
from sparkbeam.runners.core.lowering import ops
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import lower
from sparkbeam.runners.core.plan.plan import Stage, plan_stages
from sparkbeam.window import GlobalWindows
from sparkbeam.windowing import Windowing

LOWERED_OPS = [
    cls for name in ops.__all__ if isinstance(cls := getattr(ops, name), type) and issubclass(cls, ops.Op) and cls not in (ops.Op, ops.SinkOp)
]


@attrs.frozen
class MadeUpOp(ops.Op):
    pass


@pytest.mark.parametrize("op_type", LOWERED_OPS, ids=lambda cls: cls.__name__)
def test_every_op_the_lowering_makes_has_a_kind_with_what_its_role_needs(op_type):
    kind = kind_of(op_type.__new__(op_type))
    assert kind.op_type is op_type
    if kind.role is Role.SOURCE:
        assert kind.source_state is not None
    if kind.role is Role.ELEMENT_WISE:
        assert kind.join_body is not None


def test_an_op_the_engine_does_not_know_is_refused_naming_it():
    op = MadeUpOp("Mystery", "my_pipeline.py:12", (0,), (1,))
    with pytest.raises(UnsupportedError, match=r"'Mystery' \(applied at my_pipeline.py:12\): .*cannot execute MadeUpOp"):
        kind_of(op)
    stage = Stage(id=0, name="Mystery", head=None, body=(op,), inputs=(0,), outputs=(1,), upstream=())
    with pytest.raises(UnsupportedError, match="'Mystery'"):
        FusedBody(stage)


def test_a_backend_refuses_what_it_did_not_register_naming_the_op_and_the_backend():
    op = MadeUpOp("Mystery", "my_pipeline.py:12", (0,), (1,))
    with pytest.raises(UnsupportedError, match=r"'Mystery' \(applied at my_pipeline.py:12\): the in-memory backend cannot read MadeUpOp \(it can read BoundedSourceReadOp, CreateOp, ImpulseOp, TestStreamOp\)"):
        backend_ops("in-memory").sources.lookup(op)


def test_the_in_memory_backend_refuses_a_file_read_naming_it(tmp_path):
    p = beam.Pipeline()
    _ = p | "Lines" >> beam.io.ReadFromText(str(tmp_path / "*.txt")) | beam.Map(len)
    with pytest.raises(UnsupportedError, match=r"'Lines' \(applied at .*test_execution.py:\d+\): the in-memory backend cannot read ReadTextOp"):
        run_in_memory(p)


def test_the_in_memory_backend_refuses_a_file_write_naming_it(tmp_path):
    p = beam.Pipeline()
    _ = p | beam.Create(["a"]) | "Out" >> beam.io.WriteToText(str(tmp_path / "out"))
    with pytest.raises(UnsupportedError, match=r"'Out' \(applied at .*\): the in-memory backend cannot write WriteTextOp"):
        run_in_memory(p)


def test_what_each_backend_runs_is_read_off_the_registry():
    import sparkbeam.runners.beam.translate  # (the Beam front end's op kinds register themselves)
    import sparkbeam.runners.spark.backend  # noqa: F401  (registers Spark's implementations)

    # Whatever other tests imported before, the front end's kinds are registered by now.
    beam_front_end = [
        "BeamBatchedParDoOp", "BeamFnParDoOp", "BeamParDoOp", "BeamSplittableParDoOp", "BeamStatefulParDoOp", "KeyCodingOp",
    ]
    assert supported_ops("in-memory") == sorted([
        *beam_front_end, "BoundedSourceReadOp", "CreateOp", "FlattenOp", "GroupOp", "ImpulseOp", "ParDoOp", "StatefulParDoOp",
        "TestStreamOp", "WindowIntoOp",
    ])
    # SchemaAggregateOp: what the Spark runner's SQL-plan rewrite lowers a schema'd segment to
    assert supported_ops("Spark") == sorted([*beam_front_end, "SchemaAggregateOp", *(cls.__name__ for cls in LOWERED_OPS)])


def test_plan_roles_come_from_the_kinds():
    p = beam.Pipeline()
    _ = (
        p
        | "Make" >> beam.Create([("a", 1)])
        | "Double" >> beam.Map(lambda kv: (kv[0], kv[1] * 2))
        | "Group" >> beam.GroupByKey()
        | "Count" >> beam.Map(lambda kv: len(kv[1]))
    )
    plan = plan_stages(lower(p))
    assert [(stage.head.label if stage.head else None, [op.label for op in stage.body]) for stage in plan.stages] == [
        ("Make", ["Double"]),
        ("Group", ["Count"]),
    ]
    assert [stage.is_source for stage in plan.stages] == [True, False]
    assert plan.stages[1].grouping is plan.stages[1].head


@attrs.frozen
class MadeUpSourceOp(ops.Op):
    pass


@pytest.fixture
def made_up_source():
    """A source kind the engine knows, registered for the test only (no backend runs it)."""
    from sparkbeam.runners.core.elements import execution
    from sparkbeam.runners.core.sources.sources import BoundedSourceState

    kind = execution.OpKind(MadeUpSourceOp, Role.SOURCE, source_state=BoundedSourceState)
    op = MadeUpSourceOp("Ticks", "my_pipeline.py:7", (), (0,))
    info = ops.PCollectionInfo(0, "Ticks.out", Windowing(GlobalWindows()), True)
    with execution.KINDS.registered(MadeUpSourceOp, kind):
        yield plan_stages(ops.LoweredPipeline((op,), (info,)))


@pytest.mark.parametrize("backend", ["in-memory", "Spark"])
def test_a_backend_refuses_before_running_a_source_it_did_not_register(made_up_source, backend):
    import sparkbeam.runners.spark.backend  # noqa: F401  (registers Spark's implementations)

    assert made_up_source.stages[0].is_source
    with pytest.raises(UnsupportedError, match=rf"'Ticks' \(applied at my_pipeline.py:7\): the {backend} backend cannot read MadeUpSourceOp"):
        backend_ops(backend).check(made_up_source)


def test_a_subclass_of_a_registered_op_is_refused_until_it_is_registered_itself():
    @attrs.frozen
    class MyParDoOp(ops.ParDoOp):
        pass

    op = MyParDoOp("Mine", "my_pipeline.py:3", (0,), (1,), dofn=None, args=(), kwargs={}, output_tags=(None,))
    with pytest.raises(UnsupportedError, match=r"'Mine' \(applied at my_pipeline.py:3\): .*cannot execute MyParDoOp"):
        kind_of(op)


def test_the_beam_front_ends_pardo_is_a_pardo_but_for_its_runner():
    from sparkbeam.runners.beam.pardo import BeamParDoOp

    beam_kind, kind = kind_of(BeamParDoOp.__new__(BeamParDoOp)), kind_of(ops.ParDoOp.__new__(ops.ParDoOp))
    assert beam_kind.role is kind.role is Role.ELEMENT_WISE
    assert beam_kind.shipped_parts is kind.shipped_parts
    assert beam_kind.join_body is not kind.join_body
