"""``assert_that`` and its matchers, as in Beam: check a PCollection's contents when the pipeline runs.

>>> with TestPipeline() as p:                                   # doctest: +SKIP
...     assert_that(p | Create([1, 2]) | Map(lambda x: x * 10), equal_to([10, 20]))
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.core import Create, DoFn, Flatten, GroupByKey, Map, ParDo, WindowInto
from sparkbeam.ptransform import PTransform
from sparkbeam.utils.timestamp import Timestamp
from sparkbeam.window import GlobalWindows

__all__ = [
    "BeamAssertException",
    "TestWindowedValue",
    "assert_that",
    "contains_in_any_order",
    "equal_to",
    "equal_to_per_window",
    "is_empty",
    "is_not_empty",
    "matches_all",
]


class BeamAssertException(AssertionError):
    """A failed ``assert_that`` (an AssertionError, so ``pytest.raises(AssertionError)`` works)."""


@attrs.frozen
class TestWindowedValue:
    """An element with its timestamp and windows, as ``assert_that(..., reify_windows=True)`` sees it."""

    __test__ = False
    value: Any
    timestamp: Timestamp
    windows: tuple


def _counts(items: list) -> tuple[collections.Counter | None, list]:
    try:
        return collections.Counter(items), []
    except TypeError:  # unhashable elements: compare by equality
        return None, list(items)


def _multiset_difference(left: list, right: list) -> list:
    remaining = list(right)
    missing = []
    for item in left:
        for index, candidate in enumerate(remaining):
            if candidate == item:
                del remaining[index]
                break
        else:
            missing.append(item)
    return missing


def equal_to(expected: Any, equals_fn: Callable[[Any, Any], bool] | None = None) -> Callable[[list], None]:
    """Matches when the actual elements equal ``expected`` as a multiset (order ignored)."""
    expected_list = list(expected)

    def _equal(actual: list) -> None:
        actual_list = list(actual)
        if equals_fn is not None:
            unexpected = [a for a in actual_list if not any(equals_fn(e, a) for e in expected_list)]
            missing = [e for e in expected_list if not any(equals_fn(e, a) for a in actual_list)]
        else:
            expected_counts, _ = _counts(expected_list)
            actual_counts, _ = _counts(actual_list)
            if expected_counts is not None and actual_counts is not None:
                unexpected = list((actual_counts - expected_counts).elements())
                missing = list((expected_counts - actual_counts).elements())
            else:
                unexpected = _multiset_difference(actual_list, expected_list)
                missing = _multiset_difference(expected_list, actual_list)
        if unexpected or missing or (equals_fn is None and len(actual_list) != len(expected_list)):
            msg = f"Failed assert: {expected_list!r} == {actual_list!r}"
            if unexpected:
                msg += f", unexpected elements {unexpected!r}"
            if missing:
                msg += f", missing elements {missing!r}"
            raise BeamAssertException(msg)

    return _equal


contains_in_any_order = equal_to


def is_empty() -> Callable[[list], None]:
    def _empty(actual: list) -> None:
        actual = list(actual)
        if actual:
            msg = f"Failed assert: [] == {actual!r}"
            raise BeamAssertException(msg)

    return _empty


def is_not_empty() -> Callable[[list], None]:
    def _nonempty(actual: list) -> None:
        if not list(actual):
            msg = "Failed assert: pcol is empty"
            raise BeamAssertException(msg)

    return _nonempty


def matches_all(expected: list[Callable[[Any], bool]]) -> Callable[[list], None]:
    """Matches when each predicate accepts a distinct element and nothing is left over."""

    def _matches(actual: list) -> None:
        remaining = list(actual)
        for predicate in expected:
            for index, item in enumerate(remaining):
                if predicate(item):
                    del remaining[index]
                    break
            else:
                msg = f"Failed assert: no element of {list(actual)!r} matches {predicate!r}"
                raise BeamAssertException(msg)
        if remaining:
            msg = f"Failed assert: unmatched elements {remaining!r}"
            raise BeamAssertException(msg)

    return _matches


def equal_to_per_window(expected_window_to_elements: dict) -> Callable[[list], None]:
    """For ``reify_windows=True``: the elements of each window equal the expected ones."""

    def _per_window(actual: list) -> None:
        by_window: dict = collections.defaultdict(list)
        for item in actual:
            for window in item.windows:
                by_window[window].append(item.value)
        for window, elements in expected_window_to_elements.items():
            equal_to(elements)(by_window.get(window, []))
        extra = set(by_window) - set(expected_window_to_elements)
        if extra:
            msg = f"Failed assert: unexpected windows {sorted(extra, key=repr)!r}"
            raise BeamAssertException(msg)

    return _per_window


class _ReifyTimestampWindow(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam, window: Any = DoFn.WindowParam) -> Any:
        return [TestWindowedValue(element, timestamp, (window,))]


_SENTINEL = ("__sparkbeam_assert_that_sentinel__",)


class _Match(DoFn):
    def __init__(self, matcher: Callable[[list], Any]) -> None:
        self.matcher = matcher

    def process(self, keyed: Any) -> Any:
        _, values = keyed
        actual = [v for v in values if v != _SENTINEL]
        self.matcher(actual)
        return []


def _void_key(value: Any) -> tuple:
    return (None, value)


class _AssertThat(PTransform):
    def __init__(self, matcher: Callable[[list], Any], reify_windows: bool, use_global_window: bool) -> None:
        super().__init__()
        self.matcher = matcher
        self.reify_windows = reify_windows
        self.use_global_window = use_global_window

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PDone:
        if self.reify_windows:
            pcoll = pcoll | "ReifyWindows" >> ParDo(_ReifyTimestampWindow())
        if self.use_global_window:
            pcoll = pcoll | "WindowIntoGlobal" >> WindowInto(GlobalWindows())
        # The sentinel makes the matcher run once even when the input is empty.
        sentinel = pcoll.pipeline | "Sentinel" >> Create([_SENTINEL])
        if not self.use_global_window:
            sentinel = sentinel | "WindowSentinel" >> WindowInto(pcoll.windowing.windowfn)
        _ = (
            (sentinel, pcoll)
            | "Flatten" >> Flatten()
            | "ToVoidKey" >> Map(_void_key)
            | "Group" >> GroupByKey()
            | "Match" >> ParDo(_Match(self.matcher))
        )
        return pvalue.PDone(pcoll.pipeline)


def assert_that(
    actual: pvalue.PCollection,
    matcher: Callable[[list], Any],
    label: str = "assert_that",
    reify_windows: bool = False,
    use_global_window: bool = True,
) -> pvalue.PDone:
    """Check, when the pipeline runs, that ``matcher(list of elements)`` does not raise."""
    if not isinstance(actual, pvalue.PCollection):
        msg = f"assert_that takes a PCollection, not {actual!r}"
        raise TypeError(msg)
    if not callable(matcher):
        msg = f"assert_that: the matcher must be callable (equal_to([...]), ...), not {matcher!r}"
        raise TypeError(msg)
    return actual | label >> _AssertThat(matcher, reify_windows, use_global_window)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.testing.util")
