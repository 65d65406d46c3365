"""Beam's type-hint language: ``Any``, ``Tuple``, ``KV``, ``List``, ``Iterable``, ``Dict``, ...

A hint is a Python type (``int``), a constraint built with square brackets
(``Tuple[str, int]``, ``KV[str, Iterable[int]]``, ``Optional[float]``), or one of Python's
own generics (``tuple[str, int]``, ``typing.List[int]``, ``int | None``), which are
converted to Beam's form. ``is_consistent_with(sub, base)`` is the relation the pipeline
checks at construction, with Beam's rules: ``Any`` fits everything, ``int`` fits ``float``,
a ``Union`` fits if each member fits, containers fit element-wise.

>>> is_consistent_with(Tuple[str, int], KV[Any, Any])
True
>>> is_consistent_with(int, Tuple[Any, Any])
False
"""

from __future__ import annotations

import collections.abc as abc
import types
import typing
from collections.abc import Callable
from typing import Any as _AnyType

import attrs

from sparkbeam.beam_surface import module_getattr
from sparkbeam.utils.windowed_value import WindowedValue as RuntimeWindowedValue

__all__ = [
    "KV",
    "Any",
    "Collection",
    "CompositeTypeHintError",
    "Dict",
    "FrozenSet",
    "Generator",
    "Iterable",
    "Iterator",
    "List",
    "Mapping",
    "Optional",
    "Sequence",
    "Set",
    "SimpleTypeHintError",
    "Tuple",
    "TypeConstraint",
    "TypeVariable",
    "Union",
    "WindowedValue",
]


class SimpleTypeHintError(TypeError):
    """An instance is not of the plain Python type a hint names."""


class CompositeTypeHintError(TypeError):
    """An instance does not satisfy a composite hint (``Tuple[...]``, ``List[...]``, ...)."""


class TypeConstraint:
    """A parameterised hint. Subclasses say which hints fit them and check instances."""

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        """Whether ``sub`` (normalised, not Any) is consistent with this constraint."""
        raise NotImplementedError

    def type_check(self, instance: _AnyType) -> None:
        """Raise a ``TypeError`` subclass if ``instance`` does not satisfy the constraint."""
        raise NotImplementedError

    def _inner_types(self) -> typing.Iterator[_AnyType]:
        return iter(())

    def match_type_variables(self, concrete_type: _AnyType) -> dict:
        return {}

    def bind_type_variables(self, bindings: dict) -> _AnyType:
        return self

    def visit(self, visitor: Callable[[_AnyType, _AnyType], None], visitor_arg: _AnyType) -> None:
        visitor(self, visitor_arg)
        for inner in self._inner_types():
            if isinstance(inner, TypeConstraint):
                inner.visit(visitor, visitor_arg)
            else:
                visitor(inner, visitor_arg)


def _type_repr(hint: _AnyType) -> str:
    return repr(hint)


# -- Any and type variables ---------------------------------------------------------------------


@attrs.frozen(repr=False)
class AnyTypeConstraint(TypeConstraint):
    """``Any``: consistent with every hint, and every instance satisfies it."""

    def __repr__(self) -> str:
        return "Any"

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        return True

    def type_check(self, instance: _AnyType) -> None:
        return None


@attrs.frozen(repr=False)
class TypeVariable(AnyTypeConstraint):
    """A named placeholder (``K``, ``V``) that matches anything and binds to what it matched."""

    name: str

    def __repr__(self) -> str:
        return f"TypeVariable[{self.name}]"

    def match_type_variables(self, concrete_type: _AnyType) -> dict:
        return {self: concrete_type}

    def bind_type_variables(self, bindings: dict) -> _AnyType:
        return bindings.get(self, bindings.get("*", self))


# -- unions -------------------------------------------------------------------------------------


@attrs.frozen(repr=False)
class UnionConstraint(TypeConstraint):
    """``Union[X, Y]``: an instance of any member. Members form a set (order does not matter)."""

    union_types: frozenset

    def __repr__(self) -> str:
        return f"Union[{', '.join(sorted(map(_type_repr, self.union_types)))}]"

    def inner_types(self) -> typing.Iterator[_AnyType]:
        return iter(sorted(self.union_types, key=repr))

    def _inner_types(self) -> typing.Iterator[_AnyType]:
        return self.inner_types()

    def contains_type(self, maybe_type: _AnyType) -> bool:
        return maybe_type in self.union_types

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        if isinstance(sub, UnionConstraint):
            return all(is_consistent_with(member, self) for member in sub.union_types)
        return any(is_consistent_with(sub, member) for member in self.union_types)

    def type_check(self, instance: _AnyType) -> None:
        last_error = ""
        for member in self.inner_types():
            try:
                check_constraint(member, instance)
                return
            except TypeError as error:
                last_error = str(error)
        msg = (
            f"{self!r} type-constraint violated. Expected an instance of one of: "
            f"{tuple(map(repr, self.inner_types()))}, received {type(instance).__name__} instead.{last_error}"
        )
        raise CompositeTypeHintError(msg)

    def match_type_variables(self, concrete_type: _AnyType) -> dict:
        matches = [
            match_type_variables(member, concrete_type)
            for member in self.union_types
            if is_consistent_with(concrete_type, member)
        ]
        if not matches:
            return {}
        shared = set.intersection(*(set(m) for m in matches))
        return {var: Union[tuple(m[var] for m in matches)] for var in shared}

    def bind_type_variables(self, bindings: dict) -> _AnyType:
        return Union[tuple(bind_type_variables(member, bindings) for member in self.union_types)]


class UnionHint:
    """``Union[X, Y, ...]``; nested unions flatten, duplicates go, ``Union[X]`` is ``X``."""

    def __getitem__(self, type_params: _AnyType) -> _AnyType:
        if not isinstance(type_params, (abc.Iterable, set)) or isinstance(type_params, str):
            msg = "Cannot create Union without a sequence of types."
            raise TypeError(msg)
        members: set = set()
        for param in type_params:
            validate_composite_type_param(param, "All parameters to a Union hint")
            param = normalize(param, none_as_type=True)
            if isinstance(param, UnionConstraint):
                members |= param.union_types
            else:
                members.add(param)
        if Any in members:  # attrs equality is by class: a TypeVariable is not Any here
            return Any
        if len(members) == 1:
            return next(iter(members))
        return UnionConstraint(frozenset(members))


class OptionalHint(UnionHint):
    """``Optional[X]`` is ``Union[X, None]``."""

    def __getitem__(self, py_type: _AnyType) -> _AnyType:
        if isinstance(py_type, abc.Sequence) and not isinstance(py_type, str):
            msg = "An Option type-hint only accepts a single type parameter."
            raise TypeError(msg)
        return Union[py_type, type(None)]


def is_nullable(hint: _AnyType) -> bool:
    return isinstance(hint, UnionConstraint) and type(None) in hint.union_types and len(hint.union_types) == 2


def get_concrete_type_from_nullable(hint: _AnyType) -> _AnyType:
    if not is_nullable(hint):
        msg = f"Typehint is not of nullable type: {hint!r}"
        raise TypeError(msg)
    return next(member for member in hint.union_types if member is not type(None))


# -- tuples --------------------------------------------------------------------------------------


@attrs.frozen(repr=False)
class TupleConstraint(TypeConstraint):
    """``Tuple[X, Y]``: a tuple of exactly these element types (``KV[K, V]`` is one)."""

    tuple_types: tuple

    def __repr__(self) -> str:
        return f"Tuple[{', '.join(map(_type_repr, self.tuple_types))}]"

    def _inner_types(self) -> typing.Iterator[_AnyType]:
        return iter(self.tuple_types)

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        return (
            isinstance(sub, TupleConstraint)
            and len(sub.tuple_types) == len(self.tuple_types)
            and all(is_consistent_with(s, b) for s, b in zip(sub.tuple_types, self.tuple_types))
        )

    def type_check(self, instance: _AnyType) -> None:
        if not isinstance(instance, tuple):
            msg = (
                "Tuple type constraint violated. Valid object instance must be of type 'tuple'. "
                f"Instead, an instance of '{type(instance).__name__}' was received."
            )
            raise CompositeTypeHintError(msg)
        if len(instance) != len(self.tuple_types):
            msg = (
                "Passed object instance is of the proper type, but differs in length from the "
                f"hinted type. Expected a tuple of length {len(self.tuple_types)}, received a tuple "
                f"of length {len(instance)}."
            )
            raise CompositeTypeHintError(msg)
        for position, (expected, item) in enumerate(zip(self.tuple_types, instance)):
            _check_item(self, expected, item, f"element #{position} in the passed tuple")

    def match_type_variables(self, concrete_type: _AnyType) -> dict:
        bindings: dict = {}
        if isinstance(concrete_type, TupleConstraint):
            for mine, theirs in zip(self.tuple_types, concrete_type.tuple_types):
                bindings.update(match_type_variables(mine, theirs))
        return bindings

    def bind_type_variables(self, bindings: dict) -> _AnyType:
        bound = tuple(bind_type_variables(t, bindings) for t in self.tuple_types)
        return self if bound == self.tuple_types else TupleConstraint(bound)


def _check_item(owner: TypeConstraint, expected: _AnyType, item: _AnyType, where: str) -> None:
    try:
        check_constraint(expected, item)
    except SimpleTypeHintError:
        msg = (
            f"{owner!r} hint type-constraint violated. The type of {where} is incorrect. Expected "
            f"an instance of type {expected!r}, instead received an instance of type {type(item).__name__}."
        )
        raise CompositeTypeHintError(msg) from None
    except CompositeTypeHintError as error:
        msg = f"{owner!r} hint type-constraint violated. The type of {where} is incorrect: {error}"
        raise CompositeTypeHintError(msg) from None


# -- homogeneous containers ------------------------------------------------------------------------


@attrs.frozen(repr=False)
class SequenceTypeConstraint(TypeConstraint):
    """A container of any length whose elements are all ``inner_type``."""

    inner_type: _AnyType = attrs.field(converter=lambda t: normalize(t, none_as_type=True))
    _name: typing.ClassVar[str] = "Sequence"
    _python_type: typing.ClassVar[type] = abc.Sequence

    def __repr__(self) -> str:
        return f"{self._name}[{self.inner_type!r}]"

    def _inner_types(self) -> typing.Iterator[_AnyType]:
        yield self.inner_type

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        return isinstance(sub, type(self)) and is_consistent_with(sub.inner_type, self.inner_type)

    def type_check(self, instance: _AnyType) -> None:
        if not isinstance(instance, self._python_type):
            msg = (
                f"{self._name} type-constraint violated. Valid object instance must be of type "
                f"'{self._python_type.__name__.lower()}'. Instead, an instance of "
                f"'{type(instance).__name__}' was received."
            )
            raise CompositeTypeHintError(msg)
        for index, item in enumerate(typing.cast(abc.Iterable, instance)):
            _check_item(self, self.inner_type, item, f"element #{index} in the passed {self._name.lower()}")

    def match_type_variables(self, concrete_type: _AnyType) -> dict:
        if isinstance(concrete_type, SequenceTypeConstraint):
            return match_type_variables(self.inner_type, concrete_type.inner_type)
        return {}

    def bind_type_variables(self, bindings: dict) -> _AnyType:
        bound = bind_type_variables(self.inner_type, bindings)
        return self if bound == self.inner_type else type(self)(bound)


@attrs.frozen(repr=False)
class TupleSequenceConstraint(SequenceTypeConstraint):
    """``Tuple[X, ...]``: a tuple of any length of X."""

    _name = "Tuple"
    _python_type = tuple

    def __repr__(self) -> str:
        return f"Tuple[{self.inner_type!r}, ...]"

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        if isinstance(sub, TupleConstraint):
            return all(is_consistent_with(item, self.inner_type) for item in sub.tuple_types)
        return super()._consistent_with_check_(sub)


@attrs.frozen(repr=False)
class ListConstraint(SequenceTypeConstraint):
    _name = "List"
    _python_type = list


@attrs.frozen(repr=False)
class SetTypeConstraint(SequenceTypeConstraint):
    _name = "Set"
    _python_type = set


@attrs.frozen(repr=False)
class FrozenSetTypeConstraint(SequenceTypeConstraint):
    _name = "FrozenSet"
    _python_type = frozenset


@attrs.frozen(repr=False)
class ABCSequenceTypeConstraint(SequenceTypeConstraint):
    """``Sequence[X]`` (``collections.abc.Sequence``): lists and tuples fit."""

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        if isinstance(sub, TupleConstraint):
            return all(is_consistent_with(item, self.inner_type) for item in sub.tuple_types)
        if isinstance(sub, ListConstraint):
            return is_consistent_with(sub.inner_type, self.inner_type)
        return super()._consistent_with_check_(sub)


@attrs.frozen(repr=False)
class CollectionTypeConstraint(SequenceTypeConstraint):
    """``Collection[X]``: sized, iterable containers (lists, sets, tuples, mappings)."""

    _name = "Collection"
    _python_type = abc.Collection

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        if isinstance(sub, (CollectionTypeConstraint, ABCSequenceTypeConstraint, FrozenSetTypeConstraint, SetTypeConstraint, ListConstraint)):
            return is_consistent_with(sub.inner_type, self.inner_type)
        if isinstance(sub, TupleConstraint):
            return all(is_consistent_with(item, self.inner_type) for item in sub.tuple_types)
        return isinstance(sub, (MappingTypeConstraint, DictConstraint))


@attrs.frozen(repr=False)
class IterableTypeConstraint(SequenceTypeConstraint):
    """``Iterable[X]``: anything iterated over in a for loop yielding X."""

    _name = "Iterable"
    _python_type = abc.Iterable

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        if isinstance(sub, SequenceTypeConstraint):
            return is_consistent_with(sub.inner_type, self.inner_type)
        if isinstance(sub, TupleConstraint):
            return all(is_consistent_with(item, self.inner_type) for item in sub.tuple_types)
        if isinstance(sub, MappingTypeConstraint):
            return is_consistent_with(sub.key_type, self.inner_type)
        return False


@attrs.frozen(repr=False)
class IteratorTypeConstraint(TypeConstraint):
    """``Iterator[X]`` (and ``Generator[X, None, None]``): lazily yields X."""

    yielded_type: _AnyType = attrs.field(converter=lambda t: normalize(t, none_as_type=True))

    def __repr__(self) -> str:
        return f"Iterator[{self.yielded_type!r}]"

    def _inner_types(self) -> typing.Iterator[_AnyType]:
        yield self.yielded_type

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        return isinstance(sub, IteratorTypeConstraint) and is_consistent_with(sub.yielded_type, self.yielded_type)

    def type_check(self, instance: _AnyType) -> None:
        _check_item(self, self.yielded_type, instance, "a yielded element")


# -- mappings ---------------------------------------------------------------------------------------


def _normalized(hint: _AnyType) -> _AnyType:
    return normalize(hint, none_as_type=True)


@attrs.frozen(repr=False)
class DictConstraint(TypeConstraint):
    """``Dict[K, V]``: a dict whose keys are all K and values all V."""

    key_type: _AnyType = attrs.field(converter=_normalized)
    value_type: _AnyType = attrs.field(converter=_normalized)
    _name: typing.ClassVar[str] = "Dict"
    _python_type: typing.ClassVar[type] = dict

    def __repr__(self) -> str:
        return f"{self._name}[{self.key_type!r}, {self.value_type!r}]"

    def _inner_types(self) -> typing.Iterator[_AnyType]:
        yield self.key_type
        yield self.value_type

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        return (
            isinstance(sub, type(self))
            and is_consistent_with(sub.key_type, self.key_type)
            and is_consistent_with(sub.value_type, self.value_type)
        )

    def type_check(self, instance: _AnyType) -> None:
        if not isinstance(instance, self._python_type):
            msg = (
                f"{self._name} type-constraint violated. All passed instances must be of type "
                f"{self._python_type.__name__}. {instance!r} is of type {type(instance).__name__}."
            )
            raise CompositeTypeHintError(msg)
        for key, value in typing.cast(abc.Mapping, instance).items():
            _check_item(self, self.key_type, key, f"key {key!r}")
            _check_item(self, self.value_type, value, f"the value of key {key!r}")

    def match_type_variables(self, concrete_type: _AnyType) -> dict:
        if isinstance(concrete_type, DictConstraint):
            return {
                **match_type_variables(self.key_type, concrete_type.key_type),
                **match_type_variables(self.value_type, concrete_type.value_type),
            }
        return {}

    def bind_type_variables(self, bindings: dict) -> _AnyType:
        key = bind_type_variables(self.key_type, bindings)
        value = bind_type_variables(self.value_type, bindings)
        return self if (key, value) == (self.key_type, self.value_type) else type(self)(key, value)


@attrs.frozen(repr=False)
class MappingTypeConstraint(DictConstraint):
    """``Mapping[K, V]``: any mapping; a ``Dict[K, V]`` fits it."""

    _name = "Mapping"
    _python_type = abc.Mapping

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        return (
            isinstance(sub, DictConstraint)
            and is_consistent_with(sub.key_type, self.key_type)
            and is_consistent_with(sub.value_type, self.value_type)
        )


@attrs.frozen(repr=False)
class WindowedTypeConstraint(TypeConstraint):
    """``WindowedValue[X]``: a windowed element whose value is X (mostly internal in Beam)."""

    inner_type: _AnyType = attrs.field(converter=_normalized)

    def __repr__(self) -> str:
        return f"WindowedValue[{self.inner_type!r}]"

    def _inner_types(self) -> typing.Iterator[_AnyType]:
        yield self.inner_type

    def _consistent_with_check_(self, sub: _AnyType) -> bool:
        return isinstance(sub, WindowedTypeConstraint) and is_consistent_with(sub.inner_type, self.inner_type)

    def type_check(self, instance: _AnyType) -> None:
        if not isinstance(instance, RuntimeWindowedValue):
            msg = f"Window type-constraint violated. Expected a WindowedValue, received a {type(instance).__name__}."
            raise CompositeTypeHintError(msg)
        _check_item(self, self.inner_type, instance.value, "the windowed value")


# -- the hint factories ------------------------------------------------------------------------------


class _Subscriptable:
    """``Name[X]`` builds a constraint; ``Name`` alone is the factory (as Beam's hints)."""

    def __init__(self, name: str, build: Callable[[_AnyType], _AnyType]) -> None:
        self._name = name
        self._build = build

    def __getitem__(self, params: _AnyType) -> _AnyType:
        return self._build(params)

    def __repr__(self) -> str:
        return self._name


def _one(name: str, constraint: type) -> _Subscriptable:
    def build(param: _AnyType) -> _AnyType:
        validate_composite_type_param(param, f"Parameter to {name} hint")
        return constraint(param)

    return _Subscriptable(name, build)


def _two(name: str, constraint: type) -> _Subscriptable:
    def build(params: _AnyType) -> _AnyType:
        if not isinstance(params, tuple) or len(params) != 2:
            msg = f"Parameter to {name} type-hint must be a tuple of two types: {name}[.., ..]; got {params!r}"
            raise TypeError(msg)
        for param in params:
            validate_composite_type_param(param, f"Parameter to a {name} hint")
        return constraint(*params)

    return _Subscriptable(name, build)


def _tuple(params: _AnyType) -> _AnyType:
    if not isinstance(params, tuple):
        params = tuple(params) if isinstance(params, list) else (params,)
    if params and params[-1] is Ellipsis:
        if len(params) != 2:
            msg = "Ellipsis can only be used to type-hint an arbitrary length tuple of one type: Tuple[A, ...]."
            raise TypeError(msg)
        validate_composite_type_param(params[0], "All parameters to a Tuple hint")
        return TupleSequenceConstraint(params[0])
    for param in params:
        validate_composite_type_param(param, "All parameters to a Tuple hint")
    return TupleConstraint(tuple(_normalized(p) for p in params))


def _kv(params: _AnyType) -> _AnyType:
    if not isinstance(params, tuple) or len(params) != 2:
        msg = f"Parameter to KV type-hint must be a tuple of two types: KV[.., ..]; got {params!r}"
        raise TypeError(msg)
    return _tuple(params)


def _generator(params: _AnyType) -> _AnyType:
    yielded = params[0] if isinstance(params, tuple) and len(params) == 3 else params
    return IteratorTypeConstraint(yielded)


Any = AnyTypeConstraint()
Union = UnionHint()
Optional = OptionalHint()
Tuple = _Subscriptable("Tuple", _tuple)
KV = _Subscriptable("KV", _kv)
List = _one("List", ListConstraint)
Set = _one("Set", SetTypeConstraint)
FrozenSet = _one("FrozenSet", FrozenSetTypeConstraint)
Collection = _one("Collection", CollectionTypeConstraint)
Sequence = _one("Sequence", ABCSequenceTypeConstraint)
Iterable = _one("Iterable", IterableTypeConstraint)
Iterator = _one("Iterator", IteratorTypeConstraint)
Generator = _Subscriptable("Generator", _generator)
Dict = _two("Dict", DictConstraint)
Mapping = _two("Mapping", MappingTypeConstraint)
WindowedValue = _one("WindowedValue", WindowedTypeConstraint)

DISALLOWED_PRIMITIVE_TYPES = (list, set, frozenset, tuple, dict)


def validate_composite_type_param(type_param: _AnyType, error_msg_prefix: str) -> None:
    """Refuse parameters that are not types (``List[1, 2]``, ``Dict[5]``)."""
    if type_param is None or type_param is Ellipsis:
        return
    if isinstance(type_param, (type, TypeConstraint, types.UnionType, typing.TypeVar)):
        return
    if typing.get_origin(type_param) is not None or getattr(type_param, "__module__", None) == "typing":
        return
    msg = f"{error_msg_prefix} must be a non-sequence, a type, or a TypeConstraint. {type_param!r} is an instance of {type(type_param).__name__}."
    raise TypeError(msg)


# -- Python's own hints, in Beam's form -------------------------------------------------------------

_ONE_ARG_ORIGINS: dict[_AnyType, type] = {
    list: ListConstraint,
    set: SetTypeConstraint,
    frozenset: FrozenSetTypeConstraint,
    abc.Iterable: IterableTypeConstraint,
    abc.Iterator: IteratorTypeConstraint,
    abc.Collection: CollectionTypeConstraint,
    abc.Sequence: ABCSequenceTypeConstraint,
    abc.MutableSequence: ABCSequenceTypeConstraint,
    abc.Set: SetTypeConstraint,
    abc.MutableSet: SetTypeConstraint,
    abc.KeysView: SetTypeConstraint,
    abc.ItemsView: SetTypeConstraint,
    abc.ValuesView: IterableTypeConstraint,
    abc.Generator: IteratorTypeConstraint,
    abc.AsyncIterator: IteratorTypeConstraint,
}
_TWO_ARG_ORIGINS: dict[_AnyType, type] = {
    dict: DictConstraint,
    abc.Mapping: MappingTypeConstraint,
    abc.MutableMapping: MappingTypeConstraint,
}


def convert_to_beam_type(hint: _AnyType) -> _AnyType:
    """A hint in Beam's form: Python's generics become constraints, others stay as they are."""
    if hint is None or isinstance(hint, TypeConstraint):
        return hint
    if hint is typing.Any:
        return Any
    if isinstance(hint, typing.TypeVar):
        return TypeVariable(hint.__name__)
    if isinstance(hint, (str, list)):  # a forward reference, Callable's parameters: no check
        return Any
    if isinstance(hint, type) and hint in _BARE_CONTAINERS:
        return _BARE_CONTAINERS[hint]
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or origin is typing.Union:
        return Union[tuple(convert_to_beam_type(arg) for arg in args)]
    if origin is None:
        if getattr(hint, "__module__", None) != "typing" and not (isinstance(hint, type) and (hint in _ONE_ARG_ORIGINS or hint in _TWO_ARG_ORIGINS)):
            return hint  # a class
        origin = hint
    if not args:  # unparameterised: typing.List, collections.abc.Iterable, ...
        if origin in _ONE_ARG_ORIGINS:
            return _ONE_ARG_ORIGINS[origin](Any)
        if origin in _TWO_ARG_ORIGINS:
            return _TWO_ARG_ORIGINS[origin](Any, Any)
        return _BARE_CONTAINERS.get(origin, Any)
    converted = tuple(convert_to_beam_type(arg) for arg in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return TupleSequenceConstraint(converted[0])
        if args == ((),):
            return TupleConstraint(())
        return TupleConstraint(tuple(_normalized(c) for c in converted))
    if origin in _TWO_ARG_ORIGINS and len(converted) == 2:
        return _TWO_ARG_ORIGINS[origin](*converted)
    if origin in _ONE_ARG_ORIGINS:
        return _ONE_ARG_ORIGINS[origin](converted[0])
    return Any  # Callable, Literal, user generics, ...: no check


def convert_to_beam_types(hints: _AnyType) -> _AnyType:
    if isinstance(hints, dict):
        return {name: convert_to_beam_type(hint) for name, hint in hints.items()}
    return tuple(convert_to_beam_type(hint) for hint in hints)


def normalize(hint: _AnyType, none_as_type: bool = False) -> _AnyType:
    """A hint in the form the checks compare: ``None`` as ``NoneType`` if asked, generics converted."""
    if none_as_type and hint is None:
        return type(None)
    if isinstance(hint, TypeConstraint):
        return hint
    if isinstance(hint, type) and hint in _BARE_CONTAINERS:
        return _BARE_CONTAINERS[hint]
    if isinstance(hint, (types.UnionType, typing.TypeVar)) or typing.get_origin(hint) is not None or getattr(hint, "__module__", None) in ("typing", "collections.abc"):
        return convert_to_beam_type(hint)
    return hint


# Built-in container types stand for their unparameterised hints.
_BARE_CONTAINERS: dict[type, _AnyType] = {
    dict: DictConstraint(Any, Any),
    list: ListConstraint(Any),
    tuple: TupleSequenceConstraint(Any),
    set: SetTypeConstraint(Any),
    frozenset: FrozenSetTypeConstraint(Any),
}


# -- the relation ---------------------------------------------------------------------------------


def is_consistent_with(sub: _AnyType, base: _AnyType) -> bool:
    """Whether a value of hint ``sub`` may be used where ``base`` is expected (PEP 483's
    consistency, with Beam's extra rules: ``int`` fits ``float`` and ``complex``)."""
    if sub == base:
        return True
    if sub is int and base in (float, complex):
        return True
    if sub is float and base is complex:
        return True
    sub = normalize(sub, none_as_type=True)
    base = normalize(base, none_as_type=True)
    if isinstance(sub, AnyTypeConstraint) or isinstance(base, AnyTypeConstraint):
        return True
    if isinstance(sub, UnionConstraint):
        return all(is_consistent_with(member, base) for member in sub.union_types)
    if isinstance(base, TypeConstraint):
        return base._consistent_with_check_(sub)
    if isinstance(sub, TypeConstraint):
        return base is object
    if sub == base:
        return True
    try:
        return issubclass(sub, base)
    except TypeError:
        return False


def check_constraint(type_constraint: _AnyType, instance: _AnyType) -> None:
    """Raise ``SimpleTypeHintError``/``CompositeTypeHintError`` if ``instance`` does not fit."""
    type_constraint = normalize(type_constraint, none_as_type=True)
    if isinstance(type_constraint, TypeConstraint):
        type_constraint.type_check(instance)
    elif isinstance(type_constraint, type) and not isinstance(instance, type_constraint):
        int_as_float = type_constraint is float and isinstance(instance, int) and not isinstance(instance, bool)
        if not int_as_float:
            raise SimpleTypeHintError(f"{instance!r} is not an instance of {type_constraint!r}")


def match_type_variables(type_constraint: _AnyType, concrete_type: _AnyType) -> dict:
    if isinstance(type_constraint, TypeConstraint):
        return type_constraint.match_type_variables(concrete_type)
    return {}


def bind_type_variables(type_constraint: _AnyType, bindings: dict) -> _AnyType:
    if isinstance(type_constraint, TypeConstraint):
        return type_constraint.bind_type_variables(bindings)
    return type_constraint


def get_yielded_type(hint: _AnyType) -> _AnyType:
    """The element type of an iterable hint (``Iterable[X]`` gives X); ValueError if not one."""
    hint = normalize(hint, none_as_type=True)
    if isinstance(hint, AnyTypeConstraint):
        return hint
    if isinstance(hint, UnionConstraint):
        return Union[tuple(get_yielded_type(member) for member in hint.union_types)]
    if isinstance(hint, IteratorTypeConstraint):
        return hint.yielded_type
    if isinstance(hint, TupleConstraint):
        return Union[hint.tuple_types] if hint.tuple_types else Any
    if isinstance(hint, SequenceTypeConstraint):
        return hint.inner_type
    if isinstance(hint, DictConstraint):
        return hint.key_type
    msg = f"{hint!r} is not iterable"
    raise ValueError(msg)


def key_value_types(kv: _AnyType) -> tuple:
    """(key type, value type) of a ``KV`` hint, (Any, Any) for anything else."""
    if isinstance(kv, TupleConstraint) and len(kv.tuple_types) == 2:
        return kv.tuple_types
    return Any, Any


def coerce_to_kv_type(element_type: _AnyType, label: str | None = None) -> _AnyType:
    """``element_type`` as a ``KV[K, V]``; ValueError naming ``label`` if it cannot be one."""
    if element_type is None or isinstance(element_type, AnyTypeConstraint):
        return KV[Any, Any]
    if isinstance(element_type, TupleConstraint):
        if len(element_type.tuple_types) == 2:
            return element_type
        msg = f"Tuple input to {label!r} must have two components. Found {element_type!r}."
        raise ValueError(msg)
    if isinstance(element_type, UnionConstraint):
        members = [coerce_to_kv_type(member, label) for member in element_type.union_types]
        return KV[Union[tuple(m.tuple_types[0] for m in members)], Union[tuple(m.tuple_types[1] for m in members)]]
    msg = f"Input to {label!r} must be compatible with KV[Any, Any]. Found {element_type!r}."
    raise ValueError(msg)


def instance_to_type(value: _AnyType) -> _AnyType:
    """The hint Beam infers for a value (``Create`` infers its output type this way)."""
    kind = type(value)
    if value is None:
        return type(None)
    if kind not in DISALLOWED_PRIMITIVE_TYPES:
        return kind
    if kind is tuple:
        return TupleConstraint(tuple(instance_to_type(item) for item in value))
    if kind is dict:
        if not value:
            return DictConstraint(Any, Any)
        return DictConstraint(
            Union[tuple(instance_to_type(k) for k in value)], Union[tuple(instance_to_type(v) for v in value.values())]
        )
    containers: dict[type, type] = {list: ListConstraint, set: SetTypeConstraint, frozenset: FrozenSetTypeConstraint}
    container = containers[kind]
    if not value:
        return container(Any)
    return container(Union[tuple(instance_to_type(item) for item in value)])


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.typehints.typehints")
