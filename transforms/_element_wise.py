"""Element-wise utilities: each is one ``Map``, ``FlatMap`` or ``ParDo`` over the input.

``Keys``, ``Values``, ``KvSwap``, ``WithKeys``, ``ToString``, ``Reify``, ``Regex``,
``LogElements``, ``Tee`` and ``Partition`` (with ``PartitionFn``), with Beam's names and
behaviour. Public through ``sparkbeam.transforms.util`` and ``sparkbeam``.
"""

from __future__ import annotations

import logging
import numbers
import re
from collections.abc import Callable, Iterable
from typing import Any

from sparkbeam import pvalue
from sparkbeam.core import DoFn, FlatMap, Map, ParDo
from sparkbeam.ptransform import PTransform, label_from_callable, ptransform_fn
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import with_input_types, with_output_types
from sparkbeam.window import TimestampedValue

__all__ = [
    "Keys",
    "KvSwap",
    "LogElements",
    "Partition",
    "PartitionFn",
    "Regex",
    "Reify",
    "Tee",
    "ToString",
    "Values",
    "WithKeys",
]

_LOGGER = logging.getLogger(__name__)


def _here(pcoll: pvalue.PValue) -> tuple[str, str]:
    """The label and user location of the transform being expanded."""
    node = pcoll.pipeline.current_transform()
    return node.full_label, str(node.location)


def _split_pair(label: str, element: Any) -> tuple[Any, Any]:
    try:
        key, value = element
    except (TypeError, ValueError):
        msg = f"{label} expects (key, value) pairs, got {element!r}"
        raise TypeError(msg) from None
    return key, value


def _key_of(element: Any) -> Any:
    return _split_pair("Keys", element)[0]


def _value_of(element: Any) -> Any:
    return _split_pair("Values", element)[1]


def _swapped(element: Any) -> tuple:
    key, value = _split_pair("KvSwap", element)
    return (value, key)


_K = typehints.TypeVariable("K")
_V = typehints.TypeVariable("V")


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(_K)
@ptransform_fn
def Keys(pcoll: pvalue.PCollection) -> pvalue.PCollection:
    """The key of each (key, value) pair: ``("a", 1) -> "a"``.

    >>> p | beam.Create([("a", 1)]) | beam.Keys()                  # doctest: +SKIP
    """
    return pcoll | "Keys" >> Map(_key_of)


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(_V)
@ptransform_fn
def Values(pcoll: pvalue.PCollection) -> pvalue.PCollection:
    """The value of each (key, value) pair: ``("a", 1) -> 1``.

    >>> p | beam.Create([("a", 1)]) | beam.Values()                # doctest: +SKIP
    """
    return pcoll | "Values" >> Map(_value_of)


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(typehints.Tuple[_V, _K])
@ptransform_fn
def KvSwap(pcoll: pvalue.PCollection) -> pvalue.PCollection:
    """Each (key, value) pair swapped: ``("a", 1) -> (1, "a")``.

    >>> p | beam.Create([("a", 1)]) | beam.KvSwap()                # doctest: +SKIP
    """
    return pcoll | "KvSwap" >> Map(_swapped)


@ptransform_fn
def WithKeys(pcoll: pvalue.PCollection, k: Any, *args: Any, **kwargs: Any) -> pvalue.PCollection:
    """Each element paired with a key: a constant ``k``, or ``k(element, *args, **kwargs)``.

    The extra arguments may be side inputs (``beam.pvalue.AsDict(...)``).

    >>> p | beam.Create(["apple", "fig"]) | beam.WithKeys(len)     # doctest: +SKIP
    (5, "apple"), (3, "fig")
    """
    if callable(k):
        return pcoll | Map(_KeyedBy(k), *args, **kwargs)
    return pcoll | Map(_KeyedBy(None, constant=k))


class _KeyedBy:
    """``element -> (key, element)``; a class rather than a closure so it pickles small."""

    def __init__(self, fn: Callable | None, constant: Any = None) -> None:
        self.fn = fn
        self.constant = constant

    def default_label(self) -> str:
        return label_from_callable(self.fn) if self.fn is not None else "constant"

    def __call__(self, element: Any, *args: Any, **kwargs: Any) -> tuple:
        if self.fn is None:
            return (self.constant, element)
        return (self.fn(element, *args, **kwargs), element)


def _joined(delimiter: str) -> Callable[[Iterable[Any]], str]:
    def join(items: Iterable[Any]) -> str:
        return delimiter.join(str(item) for item in items)

    return join


class ToString:
    """Elements as strings: ``ToString.Element()``, ``ToString.Iterables(delimiter)``, ``ToString.Kvs(delimiter)``.

    >>> p | beam.Create([("a", 1)]) | beam.ToString.Kvs()          # doctest: +SKIP
    "a,1"
    """

    @staticmethod
    def Element() -> PTransform:
        """``str(element)``."""
        return "ElementToString" >> Map(str)

    @staticmethod
    def Iterables(delimiter: str | None = None) -> PTransform:
        """The items of each iterable element joined by ``delimiter`` (``","``), no trailing one."""
        return "IterablesToString" >> Map(_joined("," if delimiter is None else delimiter))

    # A (key, value) pair is an iterable of two items, so Kvs is the same transform.
    Kvs = Iterables


class Reify:
    """An element's timestamp or window made explicit in its value.

    ``Reify.Window()`` gives ``(element, timestamp, window)``; ``Reify.TimestampInValue()``
    gives ``(key, TimestampedValue(value, timestamp))``; ``Reify.WindowInValue()`` gives
    ``(key, (value, timestamp, window))``. ``Reify.Timestamp()`` emits each element with
    its own timestamp, as Beam's does. Timestamps are unchanged; as in Beam, the outputs
    that carry a timestamp are windowed again from it by the input's window fn, so after a
    ``Sessions`` grouping an element lands in a new session at its pane's timestamp.

    >>> p | beam.Create([1]) | beam.Reify.Window()                 # doctest: +SKIP
    (1, Timestamp(-9223372036854.775), GlobalWindow)
    """

    class Timestamp(PTransform):
        """Each element as ``TimestampedValue(element, timestamp)``, which a DoFn's output unwraps."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | FlatMap(_reify_timestamp)

    class Window(PTransform):
        """Each element as ``(element, timestamp, window)``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | FlatMap(_reify_window)

    class TimestampInValue(PTransform):
        """Each ``(key, value)`` as ``(key, TimestampedValue(value, timestamp))``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | FlatMap(_reify_timestamp_in_value)

    class WindowInValue(PTransform):
        """Each ``(key, value)`` as ``(key, (value, timestamp, window))``."""

        def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
            return pcoll | FlatMap(_reify_window_in_value)


def _reify_timestamp(element: Any, timestamp: Any = DoFn.TimestampParam) -> list:
    return [TimestampedValue(element, timestamp)]


def _reify_window(element: Any, timestamp: Any = DoFn.TimestampParam, window: Any = DoFn.WindowParam) -> list:
    return [TimestampedValue((element, timestamp, window), timestamp)]


def _reify_timestamp_in_value(element: Any, timestamp: Any = DoFn.TimestampParam) -> list:
    key, value = _split_pair("Reify.TimestampInValue", element)
    return [(key, TimestampedValue(value, timestamp))]


def _reify_window_in_value(element: Any, timestamp: Any = DoFn.TimestampParam, window: Any = DoFn.WindowParam) -> list:
    key, value = _split_pair("Reify.WindowInValue", element)
    return [TimestampedValue((key, (value, timestamp, window)), timestamp)]


class Regex:
    """Regular expressions over string elements (``regex`` is a string or a compiled pattern).

    ``matches`` / ``all_matches`` / ``matches_kv`` match at the start of the string;
    ``find`` / ``find_all`` / ``find_kv`` search anywhere; ``replace_all``,
    ``replace_first`` and ``split`` rewrite. ``group`` is a group number or name.

    >>> p | beam.Create(["a1", "b22"]) | beam.Regex.find(r"\\d+")    # doctest: +SKIP
    "1", "22"
    """

    ALL = "__regex_all_groups"

    @staticmethod
    def _compiled(regex: str | re.Pattern) -> re.Pattern:
        return re.compile(regex) if isinstance(regex, str) else regex

    @staticmethod
    @ptransform_fn
    def matches(pcoll: pvalue.PCollection, regex: Any, group: int | str = 0) -> pvalue.PCollection:
        """``group`` of each element whose start matches (add ``$`` to match it whole)."""
        pattern = Regex._compiled(regex)

        def match(element: str) -> list:
            found = pattern.match(element)
            return [found.group(group)] if found else []

        return pcoll | FlatMap(match)

    @staticmethod
    @ptransform_fn
    def all_matches(pcoll: pvalue.PCollection, regex: Any) -> pvalue.PCollection:
        """``[group 0, group 1, ... the last group that took part]`` of each matching element."""
        pattern = Regex._compiled(regex)

        def match(element: str) -> list:
            found = pattern.match(element)
            if not found:
                return []
            last = found.lastindex or 0
            return [[found.group(index) for index in range(last + 1)]]

        return pcoll | FlatMap(match)

    @staticmethod
    @ptransform_fn
    def matches_kv(pcoll: pvalue.PCollection, regex: Any, keyGroup: int | str, valueGroup: int | str = 0) -> pvalue.PCollection:
        """``(keyGroup, valueGroup)`` of each element whose start matches."""
        pattern = Regex._compiled(regex)

        def match(element: str) -> list:
            found = pattern.match(element)
            return [(found.group(keyGroup), found.group(valueGroup))] if found else []

        return pcoll | FlatMap(match)

    @staticmethod
    @ptransform_fn
    def find(pcoll: pvalue.PCollection, regex: Any, group: int | str = 0) -> pvalue.PCollection:
        """``group`` of the first match anywhere in each element."""
        pattern = Regex._compiled(regex)

        def search(element: str) -> list:
            found = pattern.search(element)
            return [found.group(group)] if found else []

        return pcoll | FlatMap(search)

    @staticmethod
    @ptransform_fn
    def find_all(pcoll: pvalue.PCollection, regex: Any, group: int | str = 0, outputEmpty: bool = True) -> pvalue.PCollection:
        """One list per element of ``group`` of every match; ``group=Regex.ALL`` gives
        ``(whole match, first group)`` pairs. ``outputEmpty=False`` drops empty matches."""
        pattern = Regex._compiled(regex)

        def search_all(element: str) -> list:
            found = pattern.finditer(element)
            if group == Regex.ALL:
                return [[(m.group(), m.groups()[0]) for m in found if outputEmpty or m.groups()[0]]]
            return [[m.group(group) for m in found if outputEmpty or m.group(group)]]

        return pcoll | FlatMap(search_all)

    @staticmethod
    @ptransform_fn
    def find_kv(pcoll: pvalue.PCollection, regex: Any, keyGroup: int | str, valueGroup: int | str = 0) -> pvalue.PCollection:
        """``(keyGroup, valueGroup)`` of every match anywhere in each element."""
        pattern = Regex._compiled(regex)

        def search_all(element: str) -> list:
            return [(m.group(keyGroup), m.group(valueGroup)) for m in pattern.finditer(element)]

        return pcoll | FlatMap(search_all)

    @staticmethod
    @ptransform_fn
    def replace_all(pcoll: pvalue.PCollection, regex: Any, replacement: str) -> pvalue.PCollection:
        """Each element with every match replaced (``\\1`` refers to a group)."""
        pattern = Regex._compiled(regex)
        return pcoll | Map(lambda element: pattern.sub(replacement, element))

    @staticmethod
    @ptransform_fn
    def replace_first(pcoll: pvalue.PCollection, regex: Any, replacement: str) -> pvalue.PCollection:
        """Each element with its first match replaced."""
        pattern = Regex._compiled(regex)
        return pcoll | Map(lambda element: pattern.sub(replacement, element, count=1))

    @staticmethod
    @ptransform_fn
    def split(pcoll: pvalue.PCollection, regex: Any, outputEmpty: bool = False) -> pvalue.PCollection:
        """Each element split on the pattern, as a list; empty pieces dropped unless ``outputEmpty``."""
        pattern = Regex._compiled(regex)
        keep_empty = bool(outputEmpty)

        def split(element: str) -> list:
            pieces = pattern.split(element)
            return [pieces if keep_empty else [piece for piece in pieces if piece]]

        return pcoll | FlatMap(split)


class LogElements(PTransform):
    """Prints (or logs at ``level``) each element, optionally with its timestamp, window and
    pane, and passes it on unchanged.

    >>> p | beam.Create([1]) | beam.LogElements(prefix="seen: ")   # doctest: +SKIP
    """

    def __init__(
        self,
        label: str | None = None,
        prefix: str = "",
        with_timestamp: bool = False,
        with_window: bool = False,
        level: int | None = None,
        with_pane_info: bool = False,
        use_epoch_time: bool = False,
    ) -> None:
        super().__init__(label)
        self._fn = _LogElementsFn(prefix, with_timestamp, with_window, level, with_pane_info, use_epoch_time)

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        return pcoll | ParDo(self._fn)


class _LogElementsFn(DoFn):
    def __init__(self, prefix: str, with_timestamp: bool, with_window: bool, level: int | None, with_pane_info: bool, use_epoch_time: bool) -> None:
        self.prefix = prefix
        self.with_timestamp = with_timestamp
        self.with_window = with_window
        self.level = level
        self.with_pane_info = with_pane_info
        self.use_epoch_time = use_epoch_time

    def _time(self, timestamp: Any) -> Any:
        return timestamp.seconds() if self.use_epoch_time else timestamp.to_rfc3339()

    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam, window: Any = DoFn.WindowParam, pane_info: Any = DoFn.PaneInfoParam) -> Iterable[Any]:
        line = f"{self.prefix}{element}"
        if self.with_timestamp:
            line += f", timestamp={self._time(timestamp)!r}"
        if self.with_window:
            line += f", window(start={self._time(window.start)}, end={self._time(window.end)})"
        if self.with_pane_info:
            line += f", pane_info={pane_info!r}"
        if self.level is None:
            print(line)
        else:
            _LOGGER.log(self.level, line)
        yield element


class Tee(PTransform):
    """Applies each consumer (a transform, or a function of the PCollection) to the input
    and returns the input, to branch off without breaking a chain.

    >>> pcoll | beam.Tee(beam.Map(print)) | beam.Map(str)          # doctest: +SKIP
    """

    def __init__(self, *consumers: PTransform | Callable[[pvalue.PCollection], Any]) -> None:
        super().__init__()
        self._consumers = consumers

    def expand(self, pcoll: pvalue.PCollection) -> pvalue.PCollection:
        for index, consumer in enumerate(self._consumers):
            if isinstance(consumer, PTransform):
                pcoll | consumer
            elif callable(consumer):
                pcoll | f"Tee[{index}]" >> ptransform_fn(consumer)()
            else:
                msg = f"Tee takes transforms or functions of a PCollection, not {consumer!r}"
                raise TypeError(msg)
        return pcoll


# -- Partition ----------------------------------------------------------------------------------


class PartitionFn:
    """Says which partition an element goes to: override ``partition_for``."""

    def default_label(self) -> str:
        return type(self).__name__

    def partition_for(self, element: Any, num_partitions: int, *args: Any, **kwargs: Any) -> int:
        """An int in ``[0, num_partitions)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement partition_for()")


class _CallablePartitionFn(PartitionFn):
    def __init__(self, fn: Callable) -> None:
        self._fn = fn

    def default_label(self) -> str:
        return label_from_callable(self._fn)

    def partition_for(self, element: Any, num_partitions: int, *args: Any, **kwargs: Any) -> int:
        return self._fn(element, num_partitions, *args, **kwargs)


class _PartitionDoFn(DoFn):
    """Sends each element to the output tagged with its partition's number."""

    def __init__(self, partition_fn: PartitionFn, n: int, label: str, location: str) -> None:
        self.partition_fn = partition_fn
        self.n = n
        self.label = label
        self.location = location

    def default_label(self) -> str:
        return f"ApplyPartitionFn({self.partition_fn.default_label()})"

    def process(self, element: Any, *args: Any, **kwargs: Any) -> Iterable[Any]:
        index = self.partition_fn.partition_for(element, self.n, *args, **kwargs)
        # Booleans are ints in Python, but a partition fn returning one is a bug.
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= index < self.n:
            msg = (
                f"Partition '{self.label}' (applied at {self.location}): the partition function "
                f"returned {index!r} for the element {element!r}; it must return an int in "
                f"[0, {self.n})"
            )
            raise ValueError(msg)
        yield pvalue.TaggedOutput(str(int(index)), element)


class Partition(PTransform):
    """Splits a PCollection into ``n`` by ``fn(element, n, *args, **kwargs)``, an int in ``[0, n)``.

    The result is a tuple of ``n`` PCollections; ``fn`` may be a ``PartitionFn``, and the
    extra arguments may be side inputs.

    >>> evens, odds = p | beam.Create([1, 2, 3]) | beam.Partition(lambda x, n: x % n, 2)  # doctest: +SKIP
    """

    def __init__(self, fn: PartitionFn | Callable, n: int, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        if isinstance(fn, type) and issubclass(fn, PartitionFn):
            msg = f"Partition takes a PartitionFn instance: write Partition({fn.__name__}(), ...)"
            raise TypeError(msg)
        if not isinstance(fn, PartitionFn):
            if not callable(fn):
                msg = f"Partition takes a PartitionFn or a function (element, n) -> int, not {fn!r}"
                raise TypeError(msg)
            fn = _CallablePartitionFn(fn)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            msg = f"Partition: the number of partitions must be a positive int, got {n!r}"
            raise ValueError(msg)
        self.fn = fn
        self.n = n
        self.args = args
        self.kwargs = kwargs

    def default_label(self) -> str:
        return f"Partition({self.fn.default_label()})"

    def expand(self, pcoll: pvalue.PCollection) -> tuple:
        label, location = _here(pcoll)
        tags = [str(index) for index in range(self.n)]
        outputs = pcoll | "ApplyPartitionFn" >> ParDo(
            _PartitionDoFn(self.fn, self.n, label, location), *self.args, **self.kwargs
        ).with_outputs(*tags)
        return tuple(outputs[tag] for tag in tags)
