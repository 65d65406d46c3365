"""Stable descriptions of a pipeline's settings: the same text in every process that builds them.

A checkpoint records its pipeline's shape (``runners/spark/checkpoints.py``) and a restart
compares it with the shape of the pipeline it runs. ``repr`` cannot be that record: a
WindowFn, trigger or estimator written as a plain class has Python's default repr, which
holds the object's address (``<Bucketing object at 0x7f...>``), different in every run, so
an unchanged pipeline would never resume. ``describe`` writes what defines the value
instead: its class's name and its parameters (attrs fields, else the instance's
``__dict__`` or ``__slots__``), recursively, down to plain values.

>>> class EveryTen:
...     def __init__(self):
...         self.size = 10
>>> describe(EveryTen())
'EveryTen(size=10)'
>>> describe({"b": [1.5, None], "a": (True, b"x")})
"{'a': (True, b'x'), 'b': [1.5, None]}"
"""

from __future__ import annotations

import enum
import re
import types
from typing import Any

import attrs

__all__ = ["attributes", "describe"]

#: how deep parameters are followed; deeper values are named by their class alone (a
#: WindowFn holding a graph of objects, or a cycle, still describes in bounded time)
MAX_DEPTH = 8

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _class_name(kind: type) -> str:
    return kind.__qualname__


def describe(value: Any, depth: int = 0) -> str:
    """A description of ``value`` that depends only on its class and its parameters (see the
    module docs): equal for equal settings in any process, never an address."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{_class_name(type(value))}.{value.name}"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    if depth >= MAX_DEPTH:
        return f"{_class_name(type(value))}(...)"
    inner = depth + 1
    if isinstance(value, (list, tuple)):
        items = ", ".join(describe(item, inner) for item in value)
        if type(value) is list:
            return f"[{items}]"
        if type(value) is tuple:
            return f"({items}{',' if len(value) == 1 else ''})"
        return f"{_class_name(type(value))}({items})"  # a named tuple, a list subclass
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(describe(item, inner) for item in value)) + "}"
    if isinstance(value, dict):
        pairs = sorted((describe(k, inner), describe(v, inner)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    return _describe_object(value, inner)


def _describe_object(value: Any, depth: int) -> str:
    kind = type(value)
    if attrs.has(kind):
        fields = [(field.name, getattr(value, field.name)) for field in attrs.fields(kind)]
    else:
        fields = sorted(attributes(value).items())
        if not fields:
            # A value without parameters of its own: its repr if that is stable (a
            # class's own __repr__), else its class alone.
            text = repr(value)
            return text if kind.__repr__ is not object.__repr__ and not _ADDRESS.search(text) else f"{_class_name(kind)}()"
    described = ", ".join(f"{name}={describe(field, depth)}" for name, field in fields)
    return f"{_class_name(kind)}({described})"


def attributes(value: Any) -> dict[str, Any]:
    """An instance's own attributes: its ``__dict__`` and the slots it has set."""
    found = dict(getattr(value, "__dict__", None) or {})
    for kind in type(value).__mro__:
        slots = getattr(kind, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                found.setdefault(name, getattr(value, name))
    return found
