"""Schema transforms: ``Select`` builds Rows, ``GroupBy`` groups and aggregates by fields.

Elements are read by attribute: ``Row``s, NamedTuples and any object with the named
attributes. A field is either a name (``'price'``, read as ``element.price``) or a
callable of the element. Both transforms are composites of ``Map``, ``GroupByKey`` and
``CombinePerKey``; the field lists they keep (``fields``, ``key_fields``,
``aggregations``) are what a runner reads to replace them by a native equivalent.

Output shapes, as Beam produces them:

- ``Select('a', b=fn)`` gives ``Row(a=..., b=...)``; an unnamed callable is named by its
  position: ``arg00``, ``arg01``, ...
- ``GroupBy('a')`` gives ``(value of a, [elements])``: one field, the key is its value.
- ``GroupBy('a', 'b')``, ``GroupBy(k=fn)``, ``GroupBy()`` or ``.force_tuple_keys()`` give
  a NamedTuple key named ``Key`` (``Key(a=..., b=...)``, a tuple with field attributes);
  an unnamed callable is named ``key`` alone and ``key0``, ``key1``, ... among several.
- ``GroupBy(...).aggregate_field(field, combine_fn, 'name')`` gives one NamedTuple named
  ``Result`` per key and window: the key fields then the aggregates, in order.

>>> from sparkbeam import Create, Pipeline, Row, capture
>>> p = Pipeline()
>>> sales = p | Create([Row(shop="x", price=3), Row(shop="y", price=1), Row(shop="x", price=2)])
>>> totals = capture(sales | GroupBy("shop").aggregate_field("price", sum, "total"))
>>> sorted(e.value for e in p.run().emissions(totals))      # doctest: +SKIP
[Result(shop='x', total=5), Result(shop='y', total=1)]
"""

from __future__ import annotations

import collections
import copy
import keyword
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.combine import CombineFn, CombinePerKey
from sparkbeam.core import GroupByKey, Map
from sparkbeam.ptransform import PTransform
from sparkbeam.row import Row
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.window import TimestampedValue

__all__ = [
    "Aggregation",
    "AssignTimestamps",
    "GroupAndAggregate",
    "GroupBy",
    "MissingFieldError",
    "SchemaField",
    "Select",
    "schema_tuple_type",
]

FieldExpr = str | Callable[[Any], Any]


class MissingFieldError(AttributeError):
    """A field named in ``Select`` or ``GroupBy`` is not an attribute of an element."""


@attrs.frozen
class SchemaField:
    """One output field: its ``name`` and ``expr``, a field name or a callable of the element."""

    name: str
    expr: FieldExpr

    @property
    def is_attribute(self) -> bool:
        """True when the field is read straight from an attribute of the element."""
        return isinstance(self.expr, str)


@attrs.frozen
class Aggregation:
    """``combine_fn`` over ``field`` of each group, output as ``output_name``."""

    field: SchemaField
    combine_fn: CombineFn
    output_name: str


def _field(expr: Any, default_name: str, where: str, position: int | str) -> SchemaField:
    if isinstance(expr, str):
        return SchemaField(expr, expr)
    if callable(expr):
        return SchemaField(default_name, expr)
    msg = f"{where}: the field at {position!r} must be a field name or a callable, not {expr!r}"
    raise TypeError(msg)


def _check_tuple_names(names: Iterable[str], where: str) -> None:
    """Schema field names, as Beam checks them: identifiers, no keywords, no leading '_', no repeats."""
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            msg = (
                f"{where}: {name!r} cannot name an output field; as in Beam's schemas, use an "
                "identifier that does not start with '_' and is not a Python keyword"
            )
            raise ValueError(msg)
        if name in seen:
            msg = f"{where}: the output field {name!r} is named twice; give one of them another name"
            raise ValueError(msg)
        seen.add(name)


# -- NamedTuple types made on the fly ------------------------------------------------

_SCHEMA_TUPLE_TYPES: dict[tuple[str, tuple[str, ...]], type] = {}


def schema_tuple_type(type_name: str, field_names: tuple[str, ...]) -> type:
    """The NamedTuple type ``type_name`` with ``field_names``, made once per process.

    Its instances pickle by type name and field names, so they rebuild in a Spark
    executor, which cannot import a class made at run time.

    >>> Key = schema_tuple_type("Key", ("shop", "day"))
    >>> Key("x", 3)
    Key(shop='x', day=3)
    >>> schema_tuple_type("Key", ("shop", "day")) is Key
    True
    """
    cache_key = (type_name, tuple(field_names))
    known = _SCHEMA_TUPLE_TYPES.get(cache_key)
    if known is not None:
        return known
    made = collections.namedtuple(type_name, cache_key[1], module=__name__)  # type: ignore[misc]
    made.__reduce__ = _reduce_schema_tuple  # type: ignore[method-assign,assignment]
    _SCHEMA_TUPLE_TYPES[cache_key] = made
    return made


def _reduce_schema_tuple(instance: tuple) -> tuple:
    return _rebuild_schema_tuple, (type(instance).__name__, type(instance)._fields, tuple(instance))  # type: ignore[attr-defined]


def _rebuild_schema_tuple(type_name: str, field_names: tuple[str, ...], values: tuple) -> tuple:
    return schema_tuple_type(type_name, field_names)(*values)


# -- the functions that run on workers (module-level classes: small and picklable) ----


def _short_repr(value: Any, limit: int = 200) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken repr must not hide the missing field
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fields_of(element: Any) -> str:
    if isinstance(element, Row):
        return f"its fields: {', '.join(element.as_dict()) or 'none'}"
    names = getattr(type(element), "_fields", None)
    if isinstance(element, tuple) and isinstance(names, tuple):
        return f"its fields: {', '.join(names) or 'none'}"
    if isinstance(element, dict):
        return "it is a dict; read a key with a callable such as lambda d: d['name']"
    return f"it is a {type(element).__name__}"


@attrs.frozen
class _ReadField:
    """``element.<name>``, or an error naming the transform, the element and its fields."""

    name: str
    transform: str

    def __call__(self, element: Any) -> Any:
        try:
            return getattr(element, self.name)
        except AttributeError as error:
            msg = (
                f"{self.transform}: the element {_short_repr(element)} has no field "
                f"{self.name!r} ({_fields_of(element)})"
            )
            raise MissingFieldError(msg) from error


def _reader(field: SchemaField, transform: str) -> Callable[[Any], Any]:
    return _ReadField(field.expr, transform) if isinstance(field.expr, str) else field.expr


@attrs.frozen
class _ToRow:
    readers: tuple[tuple[str, Callable[[Any], Any]], ...]

    def __call__(self, element: Any) -> Row:
        return Row(**{name: read(element) for name, read in self.readers})


#: AssignTimestamps' units: microseconds per unit
TIMESTAMP_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}


@attrs.frozen
class _Stamp:
    """The element re-stamped at the value of its timestamp field (seconds, or a Timestamp;
    a whole number of milliseconds or microseconds with ``unit``)."""

    read: Callable[[Any], Any]
    unit: str = "s"
    transform: str = "AssignTimestamps"

    def __call__(self, element: Any) -> TimestampedValue:
        value = self.read(element)
        if self.unit == "s":
            return TimestampedValue(element, value)
        if type(value) is not int:
            msg = f"{self.transform}: the timestamp {value!r} of {_short_repr(element)} is not a whole number of {self.unit}"
            raise TypeError(msg)
        return TimestampedValue(element, Timestamp.from_micros(value * TIMESTAMP_UNITS[self.unit]))


@attrs.frozen
class _TupleKey:
    """The ``Key`` NamedTuple of an element's key fields."""

    names: tuple[str, ...]
    readers: tuple[Callable[[Any], Any], ...]

    def __call__(self, element: Any) -> tuple:
        return schema_tuple_type("Key", self.names)(*(read(element) for read in self.readers))


@attrs.frozen
class _KeyWith:
    key: Callable[[Any], Any]

    def __call__(self, element: Any) -> tuple:
        return (self.key(element), element)


@attrs.frozen
class _KeyWithValues:
    key: Callable[[Any], Any]
    readers: tuple[Callable[[Any], Any], ...]

    def __call__(self, element: Any) -> tuple:
        return (self.key(element), tuple(read(element) for read in self.readers))


@attrs.frozen
class _ToResult:
    names: tuple[str, ...]

    def __call__(self, keyed: tuple) -> tuple:
        key, aggregates = keyed
        return schema_tuple_type("Result", self.names)(*key, *aggregates)


class _FieldsCombineFn(CombineFn):
    """One CombineFn per position of a tuple of values; the output is the tuple of outputs."""

    def __init__(self, combine_fns: tuple[CombineFn, ...]) -> None:
        self.combine_fns = combine_fns

    def default_label(self) -> str:
        return f"Fields({', '.join(fn.default_label() for fn in self.combine_fns)})"

    def setup(self, *args: Any, **kwargs: Any) -> None:
        for fn in self.combine_fns:
            fn.setup()

    def create_accumulator(self, *args: Any, **kwargs: Any) -> list:
        return [fn.create_accumulator() for fn in self.combine_fns]

    def add_input(self, mutable_accumulator: list, element: tuple, *args: Any, **kwargs: Any) -> list:
        return [fn.add_input(acc, value) for fn, acc, value in zip(self.combine_fns, mutable_accumulator, element)]

    def merge_accumulators(self, accumulators: Iterable[list], *args: Any, **kwargs: Any) -> list:
        by_position = list(zip(*accumulators))
        if not by_position:
            return self.create_accumulator()
        return [fn.merge_accumulators(list(accs)) for fn, accs in zip(self.combine_fns, by_position)]

    def compact(self, accumulator: list, *args: Any, **kwargs: Any) -> list:
        return [fn.compact(acc) for fn, acc in zip(self.combine_fns, accumulator)]

    def extract_output(self, accumulator: list, *args: Any, **kwargs: Any) -> tuple:
        return tuple(fn.extract_output(acc) for fn, acc in zip(self.combine_fns, accumulator))

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        for fn in self.combine_fns:
            fn.teardown()


def _applied(pcoll: Any, kind: str) -> str:
    """``Select 'label' (applied at file:line)``: names the user's transform in errors."""
    node = pcoll.pipeline.current_transform()
    return f"{kind} '{node.full_label}' (applied at {node.location})"


# -- the transforms -------------------------------------------------------------------


class Select(PTransform):
    """A ``Row`` per element, with the given fields: ``Select('a', total=lambda x: x.b + x.c)``.

    Names copy attributes of the element; keyword arguments name new fields, computed by a
    callable or copied from an attribute (``Select(z='a')`` renames ``a`` to ``z``).

    >>> Select("name", doubled=lambda x: 2 * x.count).fields[1].name
    'doubled'
    >>> # p | Create([Row(name="a", count=2)]) | Select("name", doubled=...)  gives
    >>> # Row(name='a', doubled=4)
    """

    def __init__(self, *fields: FieldExpr, **named_fields: FieldExpr) -> None:
        super().__init__()
        where = "Select"
        self.fields: tuple[SchemaField, ...] = tuple(
            _field(expr, f"arg{position:02d}", where, position) for position, expr in enumerate(fields)
        ) + tuple(attrs.evolve(_field(expr, name, where, name), name=name) for name, expr in named_fields.items())
        # Beam's type inference makes a NamedTuple of these names, so it rejects the same.
        _check_tuple_names((field.name for field in self.fields), where)

    def with_exception_handling(self, **kwargs: Any) -> Select:
        msg = (
            "Select(...).with_exception_handling() is not supported by sparkbeam yet; "
            "a failing element fails the pipeline with an error naming the transform"
        )
        raise NotImplementedError(msg)

    def default_label(self) -> str:
        return f"ToRows({', '.join(field.name for field in self.fields)})"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        where = _applied(pcoll, "Select")
        readers = tuple((field.name, _reader(field, where)) for field in self.fields)
        return pcoll | "ToRow" >> Map(_ToRow(readers))


class AssignTimestamps(PTransform):
    """Each element re-stamped at the value of a field (seconds since the epoch, int or
    float, or a ``Timestamp``), as Beam YAML's ``AssignTimestamps``; windows follow the new
    timestamp. ``AssignTimestamps('event_time')`` reads ``element.event_time``; a callable
    of the element works too. ``unit='ms'`` (or ``'us'``) reads a whole number of
    milliseconds (microseconds) since the epoch instead, as files and logs often hold them.
    A runner reads ``timestamp`` and ``unit`` to do the same natively.

    >>> AssignTimestamps("t").timestamp, AssignTimestamps("event_ms", unit="ms").unit
    (SchemaField(name='t', expr='t'), 'ms')
    """

    def __init__(self, timestamp: FieldExpr, *, unit: str = "s") -> None:
        super().__init__()
        self.timestamp = _field(timestamp, "timestamp", "AssignTimestamps", 0)
        if unit not in TIMESTAMP_UNITS:
            msg = f"AssignTimestamps: unit must be one of {', '.join(map(repr, TIMESTAMP_UNITS))}, got {unit!r}"
            raise ValueError(msg)
        self.unit = unit

    def default_label(self) -> str:
        return f"AssignTimestamps({self.timestamp.expr if self.timestamp.is_attribute else 'timestamp'})"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        where = _applied(pcoll, "AssignTimestamps")
        return pcoll | "Stamp" >> Map(_Stamp(_reader(self.timestamp, where), self.unit, where))


class GroupBy(PTransform):
    """Group elements by fields: ``(key, [elements])`` per key and window, as ``GroupByKey``.

    With one field the key is that field's value; with several (or named ones, or none,
    or after ``.force_tuple_keys()``) it is a NamedTuple ``Key`` of them.
    ``.aggregate_field(field, combine_fn, output_name)`` turns it into an aggregation.

    >>> GroupBy("shop").default_label(), GroupBy("shop", big=lambda s: s.price > 2).default_label()
    ('GroupBy(shop)', 'GroupBy(shop, big)')
    """

    def __init__(self, *fields: FieldExpr, **named_fields: FieldExpr) -> None:
        super().__init__()
        where = "GroupBy"
        if len(fields) == 1 and not named_fields:
            self.key_fields: tuple[SchemaField, ...] = (_field(fields[0], "key", where, 0),)
            self.tuple_keys = False
        else:
            self.key_fields = tuple(
                _field(expr, f"key{position}", where, position) for position, expr in enumerate(fields)
            ) + tuple(attrs.evolve(_field(expr, name, where, name), name=name) for name, expr in named_fields.items())
            self.tuple_keys = True
        _check_tuple_names(self.key_names, where)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.key_fields)

    def force_tuple_keys(self, value: bool = True) -> GroupBy:
        """A copy whose key is a NamedTuple ``Key`` even for a single field."""
        forced = copy.copy(self)
        forced.tuple_keys = bool(value) or len(self.key_fields) != 1
        return forced

    def aggregate_field(self, field: FieldExpr, combine_fn: CombineFn | Callable, output_name: str) -> GroupAndAggregate:
        """Aggregate ``field`` (a name or a callable) of each group with ``combine_fn``.

        ``combine_fn`` is a ``CombineFn`` or a callable over an iterable such as ``sum``;
        call again for more aggregates. Each key and window gives one ``Result``.
        """
        return GroupAndAggregate(self, ()).aggregate_field(field, combine_fn, output_name)

    def default_label(self) -> str:
        return f"GroupBy({', '.join(self.key_names)})"

    def key_fn(self, where: str, *, tuple_keys: bool | None = None) -> Callable[[Any], Any]:
        """The key of an element (the field's value, or a ``Key`` NamedTuple)."""
        readers = tuple(_reader(field, where) for field in self.key_fields)
        as_tuple = self.tuple_keys if tuple_keys is None else tuple_keys
        return _TupleKey(self.key_names, readers) if as_tuple else readers[0]

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        where = _applied(pcoll, "GroupBy")
        return pcoll | "KeyBy" >> Map(_KeyWith(self.key_fn(where))) | "GroupByKey" >> GroupByKey()


class GroupAndAggregate(PTransform):
    """What ``GroupBy(...).aggregate_field(...)`` returns: one ``Result`` per key and window.

    ``Result`` is a NamedTuple of the key fields then the aggregates; the aggregation is one
    ``CombinePerKey`` over all of them, so a runner lifts it into a partial combine.
    """

    def __init__(self, grouping: GroupBy, aggregations: tuple[Aggregation, ...]) -> None:
        super().__init__()
        self.grouping = grouping
        self.aggregations = tuple(aggregations)
        names = grouping.key_names + tuple(agg.output_name for agg in self.aggregations)
        _check_tuple_names(names, self.default_label())
        self.result_names = names

    def aggregate_field(self, field: FieldExpr, combine_fn: CombineFn | Callable, output_name: str) -> GroupAndAggregate:
        """A copy that also aggregates ``field`` with ``combine_fn`` into ``output_name``."""
        where = f"{self.grouping.default_label()}.aggregate_field"
        if not isinstance(output_name, str):
            msg = f"{where}: output_name must be a string, not {output_name!r}"
            raise TypeError(msg)
        try:
            fn = CombineFn.maybe_from_callable(combine_fn)
        except TypeError as error:
            msg = f"{where}({field!r}, ..., {output_name!r}): {error}"
            raise TypeError(msg) from None
        aggregation = Aggregation(_field(field, output_name, where, 0), fn, output_name)
        return GroupAndAggregate(self.grouping, (*self.aggregations, aggregation))

    def default_label(self) -> str:
        outputs = ", ".join(agg.output_name for agg in self.aggregations)
        return f"{self.grouping.default_label()}.aggregate_field({outputs})"

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        where = _applied(pcoll, "GroupBy")
        keyed = _KeyWithValues(
            self.grouping.key_fn(where, tuple_keys=True),
            tuple(_reader(agg.field, where) for agg in self.aggregations),
        )
        combine_fn = _FieldsCombineFn(tuple(agg.combine_fn for agg in self.aggregations))
        return (
            pcoll
            | "KeyAndValues" >> Map(keyed)
            | "Combine" >> CombinePerKey(combine_fn)
            | "ToResult" >> Map(_ToResult(self.result_names))
        )
