"""``PTransform``: a named step of a pipeline, composed with ``|`` and labelled with ``>>``.

>>> class Double(PTransform):
...     def expand(self, pcoll):
...         return pcoll | Map(lambda x: 2 * x)
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from collections.abc import Callable
from typing import Any

from sparkbeam import pvalue
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import IOTypeHints, WithTypeHints, get_type_hints

__all__ = ["PTransform", "label_from_callable", "ptransform_fn"]

# The resource hint names Beam knows (apache_beam.transforms.resources).
_RESOURCE_HINTS = frozenset({
    "accelerator", "min_ram", "minRam", "cpu_count", "cpuCount", "max_active_bundles_per_worker",
    "MaxActiveBundlesPerWorker", "max_active_bundle_per_worker", "MaxActiveBundlePerWorker",
})


def label_from_callable(fn: Any) -> str:
    """A readable label for a callable: its name, or ``<lambda at file.py:12>``."""
    if hasattr(fn, "default_label"):
        return fn.default_label()
    if isinstance(fn, functools.partial):
        return label_from_callable(fn.func)
    name = getattr(fn, "__name__", None)
    if name == "<lambda>":
        code = fn.__code__
        return f"<lambda at {os.path.basename(code.co_filename)}:{code.co_firstlineno}>"
    if name:
        return name
    return type(fn).__name__


class PTransform(WithTypeHints):
    """A transform from inputs to outputs. Subclasses implement ``expand``.

    A composite's ``expand`` applies other transforms; primitives are the runner's
    business. ``'Label' >> transform`` names an application. Element types are declared
    with ``with_input_types``/``with_output_types`` (or the decorators of
    ``sparkbeam.typehints``) and checked when the transform is applied.
    """

    # Set for the primitives the runner translates directly.
    is_primitive = False
    # Whether the declared input type is checked against the input when applied.
    checks_input_types = True
    _label: str | None = None

    def __init__(self, label: str | None = None) -> None:
        if label is not None:
            self.label = label

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _naming_keyword_errors(init)  # type: ignore[method-assign]

    @property
    def label(self) -> str:
        return self._label or self.default_label()

    @label.setter
    def label(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            msg = f"a transform label must be a non-empty string, got {value!r}"
            raise ValueError(msg)
        self._label = value

    def default_label(self) -> str:
        return type(self).__name__

    def expand(self, input_or_inputs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement expand()")

    def infer_output_type(self, input_type: Any) -> Any:
        """The element type of the output, from the input's, when none is declared."""
        return typehints.Any

    def with_resource_hints(self, **kwargs: Any) -> PTransform:
        """Beam's resource hints (``min_ram``, ``accelerator``, ``cpu_count``, ...) are hints a
        runner may ignore; Spark's executors are sized by Spark's own settings, so sparkbeam
        records them and ignores them, as Beam's local runners do. An unknown name is an error."""
        unknown = sorted(set(kwargs) - _RESOURCE_HINTS)
        if unknown:
            msg = f"{self.label}.with_resource_hints: unknown resource hint(s) {unknown}; Beam's are {sorted(_RESOURCE_HINTS)}"
            raise ValueError(msg)
        self.resource_hints = {**getattr(self, "resource_hints", {}), **kwargs}
        return self

    def __rrshift__(self, label: str) -> PTransform:
        if not isinstance(label, str):
            return NotImplemented
        named = copy.copy(self)
        named.label = label
        return named

    def __or__(self, right: Any) -> Any:
        if isinstance(right, PTransform):
            return _ChainedPTransform(self, right)
        return NotImplemented

    def __ror__(self, left: Any, label: str | None = None) -> Any:
        # A Pipeline or a PCollection on the left applies the transform itself (their
        # __or__); what is left here is a tuple, list or dict of PCollections.
        pipelines = {pv.pipeline for pv in _flat_pvalues(left)}
        if len(pipelines) != 1:
            msg = (
                f"{self.label}: the input must be PCollections of one pipeline, got {left!r}"
                if pipelines
                else f"{self.label}: cannot apply a transform to {left!r}; "
                "apply it to a Pipeline or a PCollection"
            )
            raise TypeError(msg)
        pipeline = pipelines.pop()
        return pipeline.apply(self, left, label)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label!r}>"


def _naming_keyword_errors(init: Callable) -> Callable:
    """``init``, with a misspelt keyword reported under the transform's name: Python's own
    error names the ``__init__`` that refused it, which may be a base class's."""

    @functools.wraps(init)
    def checked_init(self: PTransform, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except TypeError as error:
            text = str(error)
            owner = type(self).__name__
            if "unexpected keyword argument" in text and not text.startswith(f"{owner}"):
                raise TypeError(f"{owner}: {text}") from None
            raise

    return checked_init


PTransform.__init__ = _naming_keyword_errors(PTransform.__init__)  # type: ignore[method-assign]


def _flat_pvalues(value: Any) -> list[pvalue.PValue]:
    if isinstance(value, pvalue.PValue):
        return [value]
    if isinstance(value, pvalue.DoOutputsTuple):
        return list(value)
    if isinstance(value, dict):
        return [v for item in value.values() for v in _flat_pvalues(item)]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flat_pvalues(item)]
    return []


class _ChainedPTransform(PTransform):
    def __init__(self, *parts: PTransform) -> None:
        super().__init__()
        self._parts = parts

    def default_label(self) -> str:
        return "|".join(p.label for p in self._parts)

    def __or__(self, right: Any) -> Any:
        if isinstance(right, PTransform):
            return _ChainedPTransform(*self._parts, right)
        return NotImplemented

    def expand(self, pval: Any) -> Any:
        for part in self._parts:
            pval = pval | part
        return pval


class _PTransformFnPTransform(PTransform):
    def __init__(self, fn: Callable, args: tuple, kwargs: dict) -> None:
        super().__init__()
        self._fn = fn
        self._args = args
        self._kwargs = kwargs

    def default_label(self) -> str:
        return self._fn.__name__

    # As Beam (without --type_check_additional=ptransform_fn): a ptransform_fn's declared
    # input type is not checked, its output type is.
    checks_input_types = False

    def default_type_hints(self) -> IOTypeHints | None:
        return get_type_hints(self._fn)

    def expand(self, pcoll: Any) -> Any:
        return self._fn(pcoll, *self._args, **self._kwargs)


def ptransform_fn(fn: Callable) -> Callable[..., PTransform]:
    """Turn ``fn(pcoll, *args, **kwargs)`` into a transform: ``pcoll | fn(*args, **kwargs)``.

    >>> @ptransform_fn
    ... def Squares(pcoll):
    ...     return pcoll | Map(lambda x: x * x)
    """
    params = list(inspect.signature(fn).parameters)
    if not params:
        msg = f"ptransform_fn: {fn.__name__} must take the input PCollection as its first argument"
        raise TypeError(msg)

    @functools.wraps(fn)
    def make(*args: Any, **kwargs: Any) -> PTransform:
        label = kwargs.pop("label", None)
        transform = _PTransformFnPTransform(fn, args, kwargs)
        # Hints declared with the decorators, above (on ``make``) or below (on ``fn``) this one.
        declared = get_type_hints(make).with_defaults(get_type_hints(fn))
        if declared:
            transform._type_hints = declared
        if label:
            transform.label = label
        return transform

    return make
