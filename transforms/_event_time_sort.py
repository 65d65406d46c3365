"""``SortByEventTime``: each key's elements in event-time order, emitted once the watermark
has passed them (RisingWave's emit-on-window-close sort, Flink's time-sorted input).

A stateful DoFn (sparkbeam's own transform; Beam has none of this name): each key's
elements wait in ordered-list state, and one event-time timer stands at the earliest
buffered timestamp. When the stage's input watermark reaches it, the elements at that
time leave and the timer moves to the next buffered timestamp; since a timer that is
already due fires in the same step, everything the watermark has passed leaves in one
step, in order. The pending timer holds the output watermark at the earliest buffered
element, so what arrives on time leaves on time. Public through ``sparkbeam.transforms.util``.
"""

# ruff: noqa: B008 (DoFn.StateParam(SPEC) as a default is Beam's idiom)
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sparkbeam import pvalue
from sparkbeam.coders import PickleCoder
from sparkbeam.core import DoFn, ParDo
from sparkbeam.metrics import Metrics
from sparkbeam.ptransform import PTransform
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import with_input_types, with_output_types
from sparkbeam.userstate import (
    OrderedListStateSpec,
    ReadModifyWriteStateSpec,
    TimeDomain,
    TimerSpec,
    on_timer,
)
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

__all__ = ["SortByEventTime"]

_K = typehints.TypeVariable("K")
_V = typehints.TypeVariable("V")

#: the counter of late elements: ``result.metrics().query(MetricsFilter().with_name(LATE_COUNTER))``
LATE_COUNTER = "late_elements"


class _SortByEventTimeDoFn(DoFn):
    BUFFER = OrderedListStateSpec("buffer", PickleCoder())
    # The timestamp the timer is set for (None: no timer), and the latest timestamp emitted.
    NEXT = ReadModifyWriteStateSpec("next", PickleCoder())
    EMITTED = ReadModifyWriteStateSpec("emitted", PickleCoder())
    RELEASE = TimerSpec("release", TimeDomain.WATERMARK)

    def __init__(self, late_tag: str | None) -> None:
        self.late_tag = late_tag

    def setup(self) -> None:
        self.late = Metrics.counter("SortByEventTime", LATE_COUNTER)

    def process(
        self,
        element: Any,
        timestamp: Any = DoFn.TimestampParam,
        buffer: Any = DoFn.StateParam(BUFFER),
        next_release: Any = DoFn.StateParam(NEXT),
        emitted: Any = DoFn.StateParam(EMITTED),
        release: Any = DoFn.TimerParam(RELEASE),
    ) -> Iterator[Any]:
        micros = timestamp.micros
        emitted_micros = emitted.read()
        if emitted_micros is not None and micros < emitted_micros:
            # A later element of this key has left already: in order, this one cannot.
            self.late.inc()
            if self.late_tag is not None:
                yield pvalue.TaggedOutput(self.late_tag, element)
            return
        buffer.add((timestamp, element[1]))
        scheduled = next_release.read()
        if scheduled is None or micros < scheduled:
            release.set(timestamp)
            next_release.write(micros)

    @on_timer(RELEASE)
    def on_release(
        self,
        key: Any = DoFn.KeyParam,
        fired_at: Any = DoFn.TimestampParam,
        buffer: Any = DoFn.StateParam(BUFFER),
        next_release: Any = DoFn.StateParam(NEXT),
        emitted: Any = DoFn.StateParam(EMITTED),
        release: Any = DoFn.TimerParam(RELEASE),
    ) -> Iterator[tuple[Any, Any]]:
        # Output is stamped with the timer's time, which is these elements' own timestamp.
        until = Timestamp.from_micros(fired_at.micros + 1)
        for _, value in buffer.read_range(MIN_TIMESTAMP, until):
            yield key, value
        buffer.clear_range(MIN_TIMESTAMP, until)
        emitted.write(fired_at.micros)
        following = next(iter(buffer.read_range(until, MAX_TIMESTAMP)), None)
        if following is None:
            next_release.clear()
        else:
            release.set(following[0])
            next_release.write(following[0].micros)


@with_input_types(typehints.Tuple[_K, _V])
@with_output_types(typehints.Tuple[_K, _V])
class SortByEventTime(PTransform):
    """``(key, value)`` pairs out per key in event-time order, each once the input
    watermark has passed its timestamp (and stamped with it), per key and window.

    An element is *late* when an element of its key (and window) with a later timestamp has
    already left, so that it cannot leave in order: it is dropped and counted in the
    ``SortByEventTime``/``late_elements`` counter, or, with ``late_tag``, sent to that output
    instead (the result is then ``DoOutputsTuple``: ``result.sorted`` and ``result[late_tag]``).
    Elements whose window has expired are dropped and counted by the runner, as for any
    stateful DoFn. An element behind the watermark on arrival but still in order for its key
    leaves at once with its own timestamp (a DoFn cannot read the watermark, so per-key
    order decides lateness). A key keeps the timestamp of its last emitted element in state.

    >>> sorted_events = events | beam.transforms.util.SortByEventTime()       # doctest: +SKIP
    >>> result = events | SortByEventTime(late_tag="late")                   # doctest: +SKIP
    >>> result.sorted, result.late                                           # doctest: +SKIP
    """

    def __init__(self, late_tag: str | None = None) -> None:
        super().__init__()
        if late_tag is not None and (not isinstance(late_tag, str) or not late_tag or late_tag == "sorted"):
            msg = f"SortByEventTime: late_tag must be a non-empty string other than 'sorted', got {late_tag!r}"
            raise ValueError(msg)
        self.late_tag = late_tag

    def expand(self, pcoll: pvalue.PCollection) -> Any:
        sort = ParDo(_SortByEventTimeDoFn(self.late_tag))
        if self.late_tag is not None:
            sort = sort.with_outputs(self.late_tag, main="sorted")
        return pcoll | "Sort" >> sort
