"""One registry class for every table the engine looks things up in by type or by value.

The engine and its front ends keep tables keyed by an op's type (what an op is to the
engine, what a backend does with it), by a spec's type (a trigger's state machine, a state
cell's runtime form, a primitive's lowering) or by a value (a backend's implementation of a
physical strategy). Each is a ``Registry``, and every one looks up by the same rule:

- an entry registered for a key serves that key;
- an entry registered for a class with ``subclasses=True`` also serves each subclass that
  has no entry of its own (the nearest such class in the subclass's method resolution
  order); registered without it, a subclass is refused until it is registered itself (a
  subclass of an op type is an op of its own, never run as its base by accident);
- anything else is refused by the registry's ``refuse``: an error that names what was
  looked up and what is registered. There is no default entry.

>>> shapes = Registry("shapes", refuse=lambda subject, known: KeyError(f"{subject!r}: known {known}"))
>>> _ = shapes.register(int, subclasses=True)("a number")
>>> shapes.lookup(True)  # bool is a subclass of int
'a number'
>>> shapes.lookup("x")
Traceback (most recent call last):
...
KeyError: "'x': known ['int']"
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import attrs

__all__ = ["Registry"]

_Value = TypeVar("_Value")


def _by_type(subject: Any) -> Any:
    return type(subject)


def _name(key: Any) -> str:
    if isinstance(key, type):
        return key.__name__
    if isinstance(key, enum.Enum):
        return str(key.value)
    return str(key)


@attrs.frozen
class _Entry(Generic[_Value]):
    value: _Value
    subclasses: bool


class Registry(Generic[_Value]):
    """A table of entries under keys, looked up by the module's one rule.

    ``key``: what a looked-up subject is filed under (by default its type: ``lookup(op)``
    finds the entry of ``type(op)``; ``key=None`` files a subject under itself, for enum
    values). ``refuse(subject, known)``: the error for a subject with no entry, given the
    names of what is registered."""

    def __init__(
        self,
        name: str,
        *,
        refuse: Callable[[Any, list[str]], Exception],
        key: Callable[[Any], Any] | None = _by_type,
    ) -> None:
        self.name = name
        self._refuse = refuse
        self._key = key
        self._entries: dict[Any, _Entry[_Value]] = {}

    def register(self, *keys: Any, subclasses: bool = False) -> Callable[[_Value], _Value]:
        """A decorator filing its argument under each of ``keys``."""

        def registering(value: _Value) -> _Value:
            for key in keys:
                self.add(key, value, subclasses=subclasses)
            return value

        return registering

    def add(self, key: Any, value: _Value, *, subclasses: bool = False) -> None:
        if subclasses and not isinstance(key, type):
            msg = f"{self.name}: only a class can serve its subclasses, not {key!r}"
            raise TypeError(msg)
        self._entries[key] = _Entry(value, subclasses)

    def _find(self, key: Any) -> _Entry[_Value] | None:
        entry = self._entries.get(key)
        if entry is not None or not isinstance(key, type):
            return entry
        for base in key.__mro__[1:]:
            entry = self._entries.get(base)
            if entry is not None and entry.subclasses:
                return entry
        return None

    def lookup(self, subject: Any) -> _Value:
        """The entry serving ``subject`` (see the module docs), or the registry's refusal."""
        entry = self._find(subject if self._key is None else self._key(subject))
        if entry is None:
            raise self._refuse(subject, self.names())
        return entry.value

    def at(self, key: Any) -> _Value:
        """``lookup`` by the key itself (a type, where subjects are filed by their type)."""
        entry = self._find(key)
        if entry is None:
            raise self._refuse(key, self.names())
        return entry.value

    def serves(self, subject: Any) -> bool:
        """Whether ``lookup(subject)`` finds an entry."""
        return self._find(subject if self._key is None else self._key(subject)) is not None

    def keys(self) -> list[Any]:
        """The keys registered, in the order they were first registered."""
        return list(self._entries)

    def items(self) -> list[tuple[Any, _Value]]:
        return [(key, entry.value) for key, entry in self._entries.items()]

    def names(self) -> list[str]:
        """The registered keys' names, sorted (what a refusal lists)."""
        return sorted(_name(key) for key in self._entries)

    def __contains__(self, key: Any) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    @contextlib.contextmanager
    def registered(self, key: Any, value: _Value, *, subclasses: bool = False) -> Iterator[None]:
        """``value`` under ``key`` while the block runs, then what was there before (tests)."""
        before = self._entries.get(key)
        self.add(key, value, subclasses=subclasses)
        try:
            yield
        finally:
            if before is None:
                del self._entries[key]
            else:
                self._entries[key] = before

    def __repr__(self) -> str:
        return f"Registry({self.name!r}: {', '.join(self.names())})"
