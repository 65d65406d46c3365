"""Every lookup table of the engine is a ``Registry`` with one rule: an entry serves its
key, and its key's subclasses only when registered to; anything else is refused by name."""

from __future__ import annotations

import enum

import attrs
import pytest

from sparkbeam.runners.core.elements import execution
from sparkbeam.runners.core.grouping import triggers
from sparkbeam.runners.core.lowering import ops
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.registry import Registry
from sparkbeam.runners.core.state import stateful_step, user_state


def _refuse(subject, known):
    return LookupError(f"no entry for {subject!r}; registered: {', '.join(known)}")


class Base:
    pass


class Child(Base):
    pass


class Grandchild(Child):
    pass


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_an_entry_serves_its_own_key_and_subclasses_only_when_registered_so():
    exact = Registry("exact", refuse=_refuse)
    exact.add(Base, "base")
    assert exact.lookup(Base()) == "base"
    with pytest.raises(LookupError, match=r"no entry for <.*Child object.*>; registered: Base"):
        exact.lookup(Child())
    wide = Registry("wide", refuse=_refuse)
    wide.add(Base, "base", subclasses=True)
    wide.add(Child, "child")
    # The nearest registered class that serves subclasses: Child's entry does not, so
    # Grandchild is served by Base's.
    assert [wide.lookup(x()) for x in (Base, Child, Grandchild)] == ["base", "child", "base"]
    wide.add(Child, "child", subclasses=True)
    assert wide.lookup(Grandchild()) == "child"


def test_values_are_their_own_keys_and_a_missing_one_is_refused_with_what_is_registered():
    strategies = Registry("strategies", refuse=_refuse, key=None)
    strategies.add(Colour.RED, "paint")
    assert strategies.lookup(Colour.RED) == "paint"
    assert Colour.RED in strategies and Colour.BLUE not in strategies
    with pytest.raises(LookupError, match=r"registered: red$"):
        strategies.lookup(Colour.BLUE)
    with pytest.raises(TypeError, match="only a class can serve its subclasses"):
        strategies.add(Colour.BLUE, "x", subclasses=True)


def test_a_temporary_registration_puts_back_what_was_there():
    table = Registry("table", refuse=_refuse)
    table.add(Base, "kept")
    with table.registered(Base, "for now"), table.registered(Child, "child"):
        assert (table.lookup(Base()), table.lookup(Child())) == ("for now", "child")
    assert table.lookup(Base()) == "kept"
    assert not table.serves(Child())


def test_the_engines_tables_are_registries():
    for table in (execution.KINDS, ops._LOWERINGS, stateful_step._RUNNERS, triggers._BUILDERS, user_state._RUNTIME_STATES):
        assert isinstance(table, Registry)
    memory = execution.backend_ops("in-memory")
    assert all(isinstance(table, Registry) for table in (memory.sources, memory.strategies, memory.sinks))


def test_a_stateful_pardo_with_no_runner_of_its_own_is_refused_not_run_as_sparkbeams():
    @attrs.frozen
    class OtherStatefulOp(ops.StatefulParDoOp):
        pass

    op = OtherStatefulOp.__new__(OtherStatefulOp)
    object.__setattr__(op, "label", "Theirs")
    object.__setattr__(op, "location", "their_pipeline.py:9")
    with pytest.raises(UnsupportedError, match=r"'Theirs' \(applied at their_pipeline.py:9\): nothing runs the stateful DoFns of OtherStatefulOp"):
        stateful_step._RUNNERS.lookup(op)
    assert stateful_step._RUNNERS.lookup(ops.StatefulParDoOp.__new__(ops.StatefulParDoOp)) is stateful_step.StatefulDoFnRunner


def test_the_documented_example_runs():
    import doctest

    from sparkbeam.runners.core.lowering import registry

    assert doctest.testmod(registry).failed == 0
