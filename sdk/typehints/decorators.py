"""Declaring element types: ``with_input_types``/``with_output_types`` as decorators and methods.

On a function used by ``Map``/``FlatMap``/``Filter``, a ``DoFn`` or ``CombineFn`` class, or a
``PTransform`` class::

    @with_input_types(str)
    @with_output_types(Tuple[str, int])
    def parse(line): ...

    words = lines | beam.Map(parse)                     # element type Tuple[str, int]
    pairs | beam.Map(fn).with_output_types(KV[str, int])  # on one application

Python annotations (``def parse(line: str) -> Tuple[str, int]``) count too, as in Beam
(``disable_type_annotations()`` turns that off). The pipeline checks each transform's
declared input type against the element type of what it is applied to, at construction.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from sparkbeam._dofn_params import DoFnParam
from sparkbeam.beam_surface import module_getattr
from sparkbeam.typehints import typehints

__all__ = [
    "IOTypeHints",
    "TypeCheckError",
    "WithTypeHints",
    "disable_type_annotations",
    "get_type_hints",
    "no_annotations",
    "with_input_types",
    "with_output_types",
]

T = TypeVar("T")


class TypeCheckError(Exception):
    """Element types that cannot fit: raised at construction, naming the transforms."""


def _hint_tuple(hints: tuple | None) -> tuple | None:
    return None if hints is None else (tuple(hints[0]), dict(hints[1]))


@attrs.frozen
class IOTypeHints:
    """Declared input and output types: each ``(positional hints, keyword hints)`` or None."""

    input_types: tuple | None = attrs.field(default=None, converter=_hint_tuple, eq=False)
    output_types: tuple | None = attrs.field(default=None, converter=_hint_tuple, eq=False)

    @classmethod
    def empty(cls) -> IOTypeHints:
        return cls()

    @classmethod
    def from_callable(cls, fn: Callable) -> IOTypeHints | None:
        """The hints a callable's annotations declare, or None when it has none."""
        if _annotations_disabled or getattr(fn, "_beam_no_annotations", False):
            return None
        if (getattr(fn, "__module__", None) or "").startswith("sparkbeam."):
            # sparkbeam's own annotations are for mypy; its transforms declare element
            # types with the decorators, as Beam's library does.
            return None
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return None
        params = [p for p in signature.parameters.values() if not _is_dofn_param(p.default)]
        annotations = {p.name: p.annotation for p in params if p.annotation is not p.empty}
        if signature.return_annotation is not signature.empty:
            annotations["return"] = signature.return_annotation
        if not annotations:
            return None
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for param in params:
            hint = _annotation_hint(annotations.get(param.name, typehints.Any))
            if param.kind in (param.KEYWORD_ONLY, param.VAR_KEYWORD):
                kwargs[param.name] = hint
            elif param.kind != param.VAR_POSITIONAL:
                args.append(hint)
        output = _annotation_hint(annotations.get("return", typehints.Any))
        return cls((tuple(args), kwargs), ((output,), {}))

    def with_input_types(self, *args: Any, **kwargs: Any) -> IOTypeHints:
        return attrs.evolve(self, input_types=(args, kwargs))

    def with_output_types(self, *args: Any, **kwargs: Any) -> IOTypeHints:
        return attrs.evolve(self, output_types=(args, kwargs))

    def with_defaults(self, hints: IOTypeHints | None) -> IOTypeHints:
        """These hints, with ``hints`` filling in what these do not declare."""
        if not hints:
            return self
        return IOTypeHints(
            self.input_types if self.has_input_types() else hints.input_types,
            self.output_types if self.has_output_types() else hints.output_types,
        )

    def has_input_types(self) -> bool:
        return self.input_types is not None and any(self.input_types)

    def has_output_types(self) -> bool:
        return self.output_types is not None and any(self.output_types)

    def has_simple_output_type(self) -> bool:
        return self.output_types is not None and len(self.output_types[0]) == 1

    def simple_output_type(self, context: str) -> Any:
        """The one declared output type (keyword hints are tagged outputs), or None."""
        if not self.has_output_types():
            return None
        args = self.output_types[0]  # type: ignore[index]
        if len(args) != 1:
            msg = f"Expected a single output type hint for {context} but got: {self.output_types}"
            raise TypeError(msg)
        return args[0]

    def tagged_output_types(self) -> dict:
        return dict(self.output_types[1]) if self.has_output_types() else {}  # type: ignore[index]

    def strip_iterable(self) -> IOTypeHints:
        """The output as the element type of an iterable output (a DoFn's or FlatMap's)."""
        if not self.has_simple_output_type():
            return self
        output = self.output_types[0][0]  # type: ignore[index]
        if output is None or output is type(None):
            return self
        if typehints.is_nullable(output):
            output = typehints.get_concrete_type_from_nullable(output)
        try:
            element = typehints.get_yielded_type(output)
        except ValueError:
            element = typehints.Any  # not iterable: nothing useful to declare
        return attrs.evolve(self, output_types=((element,), self.output_types[1]))  # type: ignore[index]

    def element_input_type(self) -> Any:
        """The main input's declared type (the first positional hint), or None."""
        if not self.has_input_types():
            return None
        args, kwargs = self.input_types  # type: ignore[misc]
        if args:
            return args[0]
        return next(iter(kwargs.values())) if len(kwargs) == 1 else None

    def __bool__(self) -> bool:
        return self.has_input_types() or self.has_output_types()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IOTypeHints):
            return NotImplemented

        def same(a: tuple | None, b: tuple | None) -> bool:
            return (b is None or not any(b)) if (a is None or not any(a)) else a == b

        return same(self.input_types, other.input_types) and same(self.output_types, other.output_types)

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"IOTypeHints[inputs={self.input_types}, outputs={self.output_types}]"


def _annotation_hint(annotation: Any) -> Any:
    # A string annotation (``from __future__ import annotations``) is not evaluated, as in
    # Beam, which reads annotations as they are: it declares nothing.
    return typehints.Any if isinstance(annotation, str) else typehints.convert_to_beam_type(annotation)


def _is_dofn_param(default: Any) -> bool:
    return isinstance(default, DoFnParam)


_annotations_disabled = False


def disable_type_annotations() -> None:
    """Ignore Python annotations as type hints (only the decorators and methods count)."""
    global _annotations_disabled
    _annotations_disabled = True


def no_annotations(fn: T) -> T:
    """A decorator: ignore this function's annotations as type hints."""
    fn._beam_no_annotations = True  # type: ignore[attr-defined]
    return fn


def get_type_hints(fn: Any) -> IOTypeHints:
    """The hints declared on ``fn`` (a function or class) by the decorators."""
    hints = getattr(fn, "_type_hints", None)
    return hints if isinstance(hints, IOTypeHints) else IOTypeHints.empty()


def _declare(fn: Any, hints: IOTypeHints) -> None:
    try:
        fn._type_hints = hints
    except (AttributeError, TypeError):
        msg = f"cannot declare type hints on {fn!r}: it takes no attributes; wrap it in a function"
        raise TypeError(msg) from None


def _check_hints(where: str, hints: Any) -> None:
    for hint in hints:
        typehints.validate_composite_type_param(hint, f"Type hints for {where}")


def with_input_types(*positional_hints: Any, **keyword_hints: Any) -> Callable[[T], T]:
    """Declare the input types of a function, DoFn, CombineFn or PTransform class.

    >>> @with_input_types(int)
    ... def double(x):
    ...     return 2 * x
    """
    positional = typehints.convert_to_beam_types(positional_hints)
    keyword = typehints.convert_to_beam_types(keyword_hints)
    _check_hints("with_input_types", [*positional, *keyword.values()])

    def annotate(fn: T) -> T:
        if keyword and not isinstance(fn, type):
            _check_keyword_names(fn, keyword)
        _declare(fn, get_type_hints(fn).with_input_types(*positional, **keyword))
        return fn

    return annotate


def with_output_types(*return_type_hint: Any, **tagged_hints: Any) -> Callable[[T], T]:
    """Declare the (main) output type of a function, DoFn, CombineFn or PTransform class.

    >>> @with_output_types(str)
    ... def name(x):
    ...     return str(x)
    """
    if len(return_type_hint) != 1:
        msg = f"with_output_types takes exactly one type (the main output's), got {len(return_type_hint)}"
        raise TypeError(msg)
    positional = typehints.convert_to_beam_types(return_type_hint)
    tagged = typehints.convert_to_beam_types(tagged_hints)
    _check_hints("with_output_types", [*positional, *tagged.values()])

    def annotate(fn: T) -> T:
        _declare(fn, get_type_hints(fn).with_output_types(*positional, **tagged))
        return fn

    return annotate


def _check_keyword_names(fn: Any, keyword: dict) -> None:
    try:
        names = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return
    unknown = sorted(set(keyword) - names)
    if unknown:
        msg = f"with_input_types: {getattr(fn, '__name__', fn)!r} has no parameter(s) {unknown}"
        raise TypeError(msg)


class WithTypeHints:
    """What transforms, DoFns and CombineFns share: hints set on the instance, declared on
    the class, or derived from the code (``default_type_hints``), in that order."""

    def _instance_hints(self) -> IOTypeHints:
        hints = self.__dict__.get("_type_hints")
        return hints if isinstance(hints, IOTypeHints) else IOTypeHints.empty()

    def get_type_hints(self) -> IOTypeHints:
        return self._instance_hints().with_defaults(self.default_type_hints()).with_defaults(get_type_hints(type(self)))

    def default_type_hints(self) -> IOTypeHints | None:
        return None

    def with_input_types(self, *arg_hints: Any, **kwarg_hints: Any) -> Any:
        """Declare this instance's input types; returns it, so calls chain."""
        positional = typehints.convert_to_beam_types(arg_hints)
        keyword = typehints.convert_to_beam_types(kwarg_hints)
        _check_hints(f"{type(self).__name__}.with_input_types", [*positional, *keyword.values()])
        self._type_hints = self._instance_hints().with_input_types(*positional, **keyword)
        return self

    def with_output_types(self, *arg_hints: Any, **kwarg_hints: Any) -> Any:
        """Declare this instance's output type (keywords: tagged outputs); returns it."""
        positional = typehints.convert_to_beam_types(arg_hints)
        keyword = typehints.convert_to_beam_types(kwarg_hints)
        _check_hints(f"{type(self).__name__}.with_output_types", [*positional, *keyword.values()])
        self._type_hints = self._instance_hints().with_output_types(*positional, **keyword)
        return self


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.typehints.decorators")
