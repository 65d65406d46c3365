"""Handles into a pipeline's graph: ``PCollection``, ``PBegin``, tagged outputs, side inputs.

A ``PCollection`` is a handle: the pipeline owns the graph, and the handle knows which
applied transform produced it and under which output tag.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import attrs

from sparkbeam.beam_surface import module_getattr
from sparkbeam.row import Row  # Beam's path apache_beam.pvalue.Row
from sparkbeam.windowing import Windowing

if TYPE_CHECKING:
    from sparkbeam.pipeline import AppliedTransform, Pipeline

__all__ = [
    "AsDict",
    "AsIter",
    "AsList",
    "AsMultiMap",
    "AsSideInput",
    "AsSingleton",
    "DoOutputsTuple",
    "PBegin",
    "PCollection",
    "PDone",
    "PValue",
    "Row",
    "TaggedOutput",
]


@attrs.define(eq=False, repr=False)
class PValue:
    """Something a transform can be applied to with ``|``."""

    pipeline: Pipeline

    def __or__(self, ptransform: Any) -> Any:
        return self.pipeline.apply(ptransform, self)

    def apply(self, ptransform: Any, *args: Any, **kwargs: Any) -> Any:
        label = None
        if args and isinstance(args[0], str):
            label, args = args[0], args[1:]
        if args or kwargs:
            msg = "PValue.apply takes a transform and an optional label"
            raise TypeError(msg)
        return self.pipeline.apply(ptransform, self, label)


@attrs.define(eq=False, repr=False)
class PBegin(PValue):
    """The input of a root transform such as ``Create`` or ``ReadFromText``."""

    def __repr__(self) -> str:
        return "PBegin"


@attrs.define(eq=False, repr=False)
class PDone(PValue):
    """The output of a transform that writes and produces nothing to consume."""

    producer: AppliedTransform | None = None

    def __repr__(self) -> str:
        return "PDone"


@attrs.define(eq=False, repr=False)
class PCollection(PValue):
    """A handle to the elements one transform outputs under one tag."""

    windowing: Windowing = attrs.field(factory=Windowing)
    is_bounded: bool = True
    tag: str | None = None
    producer: AppliedTransform | None = None
    element_type: Any = None

    @property
    def label(self) -> str:
        producer = self.producer.full_label if self.producer else "?"
        return producer if self.tag is None else f"{producer}.{self.tag}"

    def __repr__(self) -> str:
        return f"<PCollection {self.label}>"

    def __hash__(self) -> int:
        return id(self)


@attrs.frozen
class TaggedOutput:
    """Yield ``TaggedOutput('tag', value)`` from a DoFn to emit to an additional output."""

    tag: str
    value: Any

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.tag, str):
            msg = f"TaggedOutput tag must be a string, got {self.tag!r}"
            raise TypeError(msg)


class DoOutputsTuple:
    """The outputs of ``ParDo(...).with_outputs(...)``: by tag, by attribute, or unpacked.

    Unpacking yields the main output first, then the declared tags in order.
    """

    def __init__(self, main_tag: str | None, tags: tuple[str, ...], outputs: dict) -> None:
        self._main_tag = main_tag
        self._tags = tags
        self._outputs = outputs

    @property
    def pipeline(self) -> Pipeline:
        return next(iter(self._outputs.values())).pipeline

    def __getitem__(self, tag: str | None) -> PCollection:
        if tag is None:
            tag = self._main_tag
        try:
            return self._outputs[tag]
        except KeyError:
            msg = f"no output tagged {tag!r}; declared tags: {list(self._tags)}"
            raise KeyError(msg) from None

    def __getattr__(self, tag: str) -> PCollection:
        if tag.startswith("__"):
            raise AttributeError(tag)
        try:
            return self[tag]
        except KeyError as error:
            raise AttributeError(str(error)) from None

    def __iter__(self):
        yield self._outputs[self._main_tag]
        for tag in self._tags:
            yield self._outputs[tag]

    def __len__(self) -> int:
        return 1 + len(self._tags)

    def __repr__(self) -> str:
        return f"DoOutputsTuple(main={self._main_tag!r}, tags={list(self._tags)})"


class AsSideInput:
    """Marks a PCollection passed as an extra argument to be read whole, per window."""

    def __init__(self, pcoll: PCollection) -> None:
        if not isinstance(pcoll, PCollection):
            msg = f"{type(self).__name__} takes a PCollection, not {pcoll!r}"
            raise TypeError(msg)
        self.pvalue = pcoll

    def view(self, values: list) -> Any:
        """The value the DoFn sees, built from the window's elements."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pvalue!r})"


class _NoDefault:
    """Marks "no default_value given"; one instance, which pickles back to itself on executors."""

    _instance: _NoDefault | None = None

    def __new__(cls) -> _NoDefault:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self):
        return (_NoDefault, ())

    def __repr__(self) -> str:
        return "<no default>"


_NO_DEFAULT = _NoDefault()


class AsSingleton(AsSideInput):
    """The one element of the side input (or ``default_value`` when it is empty)."""

    def __init__(self, pcoll: PCollection, default_value: Any = _NO_DEFAULT) -> None:
        super().__init__(pcoll)
        self.default_value = default_value

    def view(self, values: list) -> Any:
        if len(values) == 1:
            return values[0]
        if not values and not isinstance(self.default_value, _NoDefault):
            return self.default_value
        shown = values[:3]
        msg = (
            f"AsSingleton({self.pvalue.label}) needs exactly one element per window, "
            f"found {len(values)}{': ' + repr(shown) if values else ''}"
            + ("" if values else "; pass default_value= to allow an empty side input")
        )
        raise ValueError(msg)


class AsIter(AsSideInput):
    """Every element of the side input, as an iterable."""

    def view(self, values: list) -> Any:
        return list(values)


class AsList(AsSideInput):
    """Every element of the side input, as a list."""

    def view(self, values: list) -> Any:
        return list(values)


class AsDict(AsSideInput):
    """A dict built from (key, value) elements."""

    def view(self, values: list) -> Any:
        return dict(values)


class AsMultiMap(AsSideInput):
    """A dict from each key to the list of its values."""

    def view(self, values: list) -> Any:
        # A missing key reads as no values, as in Beam.
        grouped: collections.defaultdict = collections.defaultdict(list)
        for key, value in values:
            grouped[key].append(value)
        return grouped


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.pvalue")
