"""``CombineFn``, the aggregation in four steps, and the CombineFn made from a callable
(re-exported by ``sparkbeam.combine``, Beam's module for them).

It sits below the combining transforms: a ``CombiningValueStateSpec`` holds a CombineFn, and
the DoFn machinery that reads state specs sits below ``ParDo``, on which those transforms are
built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from sparkbeam.ptransform import label_from_callable
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import (
    IOTypeHints,
    TypeCheckError,
    WithTypeHints,
    get_type_hints,
)

__all__ = ["CallableWrapperCombineFn", "CombineFn", "accumulator_from"]


def accumulator_from(fn: Any, method: str, result: Any, given: Any) -> Any:
    """``result``, which ``fn.<method>`` returned where an accumulator is due, given the
    accumulator ``given`` (or a list of them): a None instead is the usual mistake of a
    method that changes the accumulator in place and forgets to return it, which would
    otherwise lose the data so far, or fail later in another method."""
    if result is None and (any(a is not None for a in given) if isinstance(given, list) else given is not None):
        name = fn.default_label() if isinstance(fn, CombineFn) else type(fn).__name__
        msg = (
            f"CombineFn {name}: {method} returned None where the accumulator is due; it must "
            "return the accumulator (also when it changed it in place: `return accumulator`)"
        )
        raise TypeError(msg)
    return result


class CombineFn(WithTypeHints):
    """An associative, commutative aggregation in four steps: create, add, merge, extract."""

    #: the SQL aggregate ("count", "mean") a backend may compute instead of this CombineFn,
    #: set by the class whose result is exactly that aggregate's (a subclass that changes
    #: what it computes does not inherit it: ``schema_segments.aggregate_kind``); None for others
    sql_aggregate: ClassVar[str | None] = None

    def setup(self, *args: Any, **kwargs: Any) -> None:
        pass

    def create_accumulator(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def add_inputs(self, mutable_accumulator: Any, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        for element in elements:
            added = self.add_input(mutable_accumulator, element, *args, **kwargs)
            mutable_accumulator = accumulator_from(self, "add_input", added, mutable_accumulator)
        return mutable_accumulator

    def merge_accumulators(self, accumulators: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def compact(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return accumulator

    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        pass

    def apply(self, elements: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        """Combine ``elements`` in one go (no distribution)."""
        accumulator = self.add_inputs(self.create_accumulator(*args, **kwargs), elements, *args, **kwargs)
        return self.extract_output(accumulator, *args, **kwargs)

    def for_input_type(self, input_type: Any) -> CombineFn:
        return self

    def default_label(self) -> str:
        return type(self).__name__

    @staticmethod
    def from_callable(fn: Callable) -> CombineFn:
        return CallableWrapperCombineFn(fn)

    @staticmethod
    def maybe_from_callable(fn: CombineFn | Callable, has_side_inputs: bool = True) -> CombineFn:
        if isinstance(fn, CombineFn):
            return fn
        if isinstance(fn, type) and issubclass(fn, CombineFn):
            msg = f"pass a CombineFn instance ({fn.__name__}()), not the class"
            raise TypeError(msg)
        if callable(fn):
            return CallableWrapperCombineFn(fn)
        msg = f"expected a CombineFn or a callable such as sum, got {fn!r}"
        raise TypeError(msg)


class CallableWrapperCombineFn(CombineFn):
    """A CombineFn from a callable over an iterable (``sum``, ``max``, ``lambda xs: ...``).

    The callable must be associative and commutative: it is applied to partial results.
    """

    _BUFFER_SIZE = 10

    def __init__(self, fn: Callable, buffer_size: int = _BUFFER_SIZE) -> None:
        if not callable(fn):
            msg = f"{fn!r} is not callable"
            raise TypeError(msg)
        self._fn = fn
        self._buffer_size = buffer_size

    def default_label(self) -> str:
        return label_from_callable(self._fn)

    def default_type_hints(self) -> IOTypeHints | None:
        """``fn(Iterable[V]) -> V`` declares a CombineFn from V to V, as in Beam."""
        hints = get_type_hints(self._fn).with_defaults(IOTypeHints.from_callable(self._fn))
        element = hints.element_input_type()
        if element is None:
            return hints
        if not typehints.is_consistent_with(element, typehints.Iterable[typehints.Any]):
            msg = (
                f"{self.default_label()}: a function combining values must take one argument "
                f"compatible with Iterable[Any]; it takes {element!r}"
            )
            raise TypeCheckError(msg)
        return hints.with_input_types(typehints.get_yielded_type(element))

    def create_accumulator(self, *args: Any, **kwargs: Any) -> list:
        return []

    def add_input(self, mutable_accumulator: list, element: Any, *args: Any, **kwargs: Any) -> list:
        accumulator = mutable_accumulator
        accumulator.append(element)
        if len(accumulator) > self._buffer_size:
            accumulator = [self._fn(accumulator, *args, **kwargs)]
        return accumulator

    def add_inputs(self, mutable_accumulator: list, elements: Iterable[Any], *args: Any, **kwargs: Any) -> list:
        accumulator = mutable_accumulator
        accumulator.extend(elements)
        if len(accumulator) > self._buffer_size:
            accumulator = [self._fn(accumulator, *args, **kwargs)]
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list], *args: Any, **kwargs: Any) -> list:
        merged = [x for accumulator in accumulators for x in accumulator]
        return [self._fn(merged, *args, **kwargs)] if len(merged) > 1 else merged

    def compact(self, accumulator: list, *args: Any, **kwargs: Any) -> list:
        return [self._fn(accumulator, *args, **kwargs)] if len(accumulator) > 1 else accumulator

    def extract_output(self, accumulator: list, *args: Any, **kwargs: Any) -> Any:
        return self._fn(accumulator, *args, **kwargs)
