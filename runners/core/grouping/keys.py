"""Keys grouped as Beam groups them: by what Beam's key encoding tells apart, where ``==`` differs.

Beam groups a key by the bytes its deterministic coder writes (for keys of no declared type,
``FastPrimitivesCoder``'s: a type byte, then the value). The engine groups by ``==`` and
``hash``, which agree with those bytes for ``str``, ``int``, ``bytes``, ``None`` and tuples
of them: the common keys, which go through unchanged after a type check. Elsewhere they
disagree, and ``grouping_key`` gives such a key a ``GroupingKey`` whose ``form`` holds what
the encoding distinguishes:

- a float by its 64 bits: every NaN of one bit pattern is one key (``nan != nan``, and a NaN
  that crossed a process is another object), ``-0.0`` and ``0.0`` are two; and ``1``,
  ``1.0`` and ``True`` are three keys (Python: one);
- lists, dicts and sets (unhashable) by their contents, a dict's items and a set's members
  in sorted order as Beam writes them, and tuples holding any of these by their parts.

The key itself rides along in the ``GroupingKey`` and is what a pane holds (``user_key``):
Beam's decoded key, since every key of a group has the same encoding. Keys of other types
(a class of the user's, a ``frozenset``, a ``datetime``) keep ``==`` and ``hash``, which
agree with a coder that agrees with ``__eq__``; a NamedTuple groups as the tuple of its
values (Beam also writes its class). A key that can be neither (an unhashable object, a dict
whose keys do not sort) raises ``UngroupableKeyError``, which the grouping reports naming
itself and the key's type.

>>> grouping_key(float("nan")) == grouping_key(float("nan")), grouping_key(-0.0) == grouping_key(0.0)
(True, False)
>>> user_key(grouping_key([1, 2])), grouping_key(("a", 1))
([1, 2], ('a', 1))
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["GroupingKey", "UngroupableKeyError", "grouping_key", "is_plain_key", "user_key"]

_DOUBLE = struct.Struct(">d")


class UngroupableKeyError(TypeError):
    """A key that neither Beam's encoding nor ``==`` and ``hash`` can group; the message
    names its type and says what to key by instead."""


class _Tag:
    """The kind of a form's part (float, list, ...): equal to the tag of that name alone,
    never to a user's value, and hashed alike in every process (partitioning hashes keys)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is _Tag and other.name == self.name

    def __hash__(self) -> int:
        return hash(("sparkbeam.key", self.name))

    def __reduce__(self) -> tuple:
        return (_Tag, (self.name,))

    def __repr__(self) -> str:
        return f"<{self.name}>"


_FLOAT, _BOOL, _TUPLE, _LIST, _DICT, _SET = (_Tag(name) for name in ("float", "bool", "tuple", "list", "dict", "set"))

#: keys that group by == and hash exactly as by Beam's encoding
_PLAIN = frozenset({str, int, bytes, type(None)})


class GroupingKey:
    """A key grouped by its ``form`` (see the module docs); ``key`` is the key as given."""

    __slots__ = ("form", "key")

    def __init__(self, form: Any, key: Any) -> None:
        self.form = form
        self.key = key

    def __eq__(self, other: object) -> bool:
        return type(other) is GroupingKey and self.form == other.form

    def __hash__(self) -> int:
        return hash(self.form)

    def __reduce__(self) -> tuple:
        return (GroupingKey, (self.form, self.key))

    def __repr__(self) -> str:  # what a timeline's hold_key or an error shows: the user's key
        return repr(self.key)


def is_plain_key(key: Any) -> bool:
    """Whether ``key`` groups by == and hash as by Beam's encoding without a form (a
    ``str``, ``int``, ``bytes`` or None: what the engine's loops check inline)."""
    return type(key) in _PLAIN


def grouping_key(key: Any) -> Any:
    """What the engine groups ``key`` by: the key itself where ``==`` and ``hash`` agree with
    Beam's encoding, else a ``GroupingKey``. Raises ``UngroupableKeyError``."""
    if type(key) is tuple:  # the common tuple of plain parts, at a loop's cost
        for part in key:
            if type(part) not in _PLAIN:
                break
        else:
            return key
    form = _form(key)
    return key if form is key else GroupingKey(form, key)


def user_key(key: Any) -> Any:
    """The key a pane or a DoFn sees for what the engine grouped by."""
    return key.key if type(key) is GroupingKey else key


def _form(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return (_FLOAT, _DOUBLE.pack(value))
    if kind is bool:
        return (_BOOL, value)
    if isinstance(value, tuple):  # NamedTuples too: grouped as the tuple of their values
        parts = tuple(_form(part) for part in value)
        if all(form is part for form, part in zip(parts, value)):
            return value
        return (_TUPLE, parts)
    if kind is list:
        return (_LIST, tuple(_form(part) for part in value))
    if kind is dict:
        return (_DICT, tuple((_form(k), _form(v)) for k, v in _sorted(value.items(), "the keys of a dict")))
    if kind is set:
        return (_SET, tuple(_form(member) for member in _sorted(value, "the members of a set")))
    try:
        hash(value)
    except TypeError:
        msg = (
            f"a key of type {kind.__qualname__} is unhashable, and sparkbeam groups keys of such types by == and "
            "hash (Beam by its coder's bytes); key by a value that is hashable and compares by value "
            "(a str, a number or a tuple of them)"
        )
        raise UngroupableKeyError(msg) from None
    return value


def _sorted(parts: Any, what: str) -> list:
    try:
        return sorted(parts)
    except TypeError as error:
        msg = f"cannot sort {what} in a key ({error}), as Beam's key encoding does; key by values that sort"
        raise UngroupableKeyError(msg) from None
