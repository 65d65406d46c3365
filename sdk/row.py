"""``Row``: a record with named fields, the element type of schema transforms (``Select``).

A Row keeps its fields in the order they were given. Two Rows are equal when they have
the same field names, in the same order, with equal values; a Row never equals a tuple,
a dict or a NamedTuple, whatever their contents (as in Beam).

>>> row = Row(name="a", count=2)
>>> row.name, row.count
('a', 2)
>>> row
Row(name='a', count=2)
>>> row == Row(name="a", count=2), row == Row(count=2, name="a")
(True, False)
>>> row.as_dict()
{'name': 'a', 'count': 2}
>>> name, count = row
>>> count
2

NamedTuples are schema'd elements too: their fields are read by attribute in the same way,
and ``Row(**named_tuple._asdict())`` turns one into a Row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["Row"]


class Row:
    """A record whose fields are the keyword arguments, in order: ``Row(x=1, y=2.5)``.

    Fields are read as attributes (``row.x``); iterating yields the values in field order;
    ``as_dict()`` (also ``_asdict()``, as on a NamedTuple) gives a new dict.

    Beam's own Row raises ``TypeError`` from ``hash()``; ours hashes its (name, value)
    pairs, so a Row whose values are hashable can be a grouping key on Spark, where keys
    are hashed to partitions. Everything that works with Beam's Row works the same here.
    Pickled Rows rebuild as Rows in any process that can import ``sparkbeam``.

    >>> Row(x=1, y=[2, 3])
    Row(x=1, y=[2, 3])
    >>> hash(Row(x=1)) == hash(Row(x=1))
    True
    """

    def __init__(self, **fields: Any) -> None:
        # Fields live in the instance dict, so attribute access is Python's own and keyword
        # order (guaranteed since 3.7) is the field order.
        vars(self).update(fields)

    def as_dict(self) -> dict[str, Any]:
        """A new dict from field name to value, in field order."""
        return dict(vars(self))

    _asdict = as_dict  # the NamedTuple spelling, so code written for either reads both

    def __iter__(self) -> Iterator[Any]:
        return iter(list(vars(self).values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"Row({shown})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return list(vars(self).items()) == list(vars(other).items())

    def __hash__(self) -> int:
        return hash(tuple(vars(self).items()))

    def __reduce__(self) -> tuple[Any, tuple[tuple[tuple[str, Any], ...]]]:
        return _row_from_items, (tuple(vars(self).items()),)


def _row_from_items(items: tuple[tuple[str, Any], ...]) -> Row:
    """Rebuild a pickled Row (module-level so pickle finds it by name in any process)."""
    row = Row.__new__(Row)
    vars(row).update(items)
    return row
