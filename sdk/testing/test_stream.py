"""``TestStream``: a scripted unbounded source of elements, watermark moves and clock moves.

Each event is one step of the streaming run, and a step runs to quiescence before the
next, so a test sees exactly which panes each event causes.

>>> stream = (TestStream()
...           .add_elements([TimestampedValue("a", 1), TimestampedValue("b", 2)])
...           .advance_watermark_to(10)
...           .advance_processing_time(5)
...           .advance_watermark_to_infinity())
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from sparkbeam import pvalue
from sparkbeam.beam_surface import module_getattr
from sparkbeam.ptransform import PTransform
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import TimestampedValue

__all__ = ["ElementEvent", "ProcessingTimeEvent", "TestStream", "WatermarkEvent"]


@attrs.frozen
class ElementEvent:
    """Elements that arrive (each a ``TimestampedValue``) on output ``tag``."""

    timestamped_values: tuple[TimestampedValue, ...] = attrs.field(converter=tuple)
    tag: str | None = None


@attrs.frozen
class WatermarkEvent:
    """The watermark of output ``tag`` moves to ``new_watermark``."""

    new_watermark: Timestamp = attrs.field(converter=Timestamp.of)  # type: ignore[misc]  # mypy's attrs plugin cannot read classmethod converters
    tag: str | None = None


@attrs.frozen
class ProcessingTimeEvent:
    """The processing-time clock moves forward by ``advance_by``."""

    advance_by: Duration = attrs.field(converter=Duration.of)  # type: ignore[misc]  # mypy's attrs plugin cannot read classmethod converters


class TestStream(PTransform):
    """An unbounded source that replays a script of events, one event per step."""

    __test__ = False  # not a pytest test class
    is_primitive = True

    def __init__(
        self,
        coder: Any = None,
        events: Iterable[Any] | None = None,
        output_tags: Iterable[str | None] | None = None,
        endpoint: Any = None,
    ) -> None:
        super().__init__()
        if endpoint is not None:
            msg = "TestStream(endpoint=...) (a TestStreamService) is not supported by sparkbeam"
            raise NotImplementedError(msg)
        if coder is not None and not (callable(getattr(coder, "encode", None)) and callable(getattr(coder, "decode", None))):
            msg = f"TestStream: coder must be a Coder (with encode and decode), got {coder!r}"
            raise TypeError(msg)
        # As Beam's portable runners, which send a TestStream's elements encoded: each element
        # is what the coder gives back after encoding it.
        self.coder = coder
        self.output_tags: list[str | None] = list(dict.fromkeys(output_tags or ()))
        self.watermarks: dict[str | None, Timestamp] = {}
        self._events: list[Any] = []
        for event in events or ():
            self._add(event)

    @property
    def events(self) -> tuple[Any, ...]:
        return tuple(self._events)

    def _declare(self, tag: str | None) -> None:
        if tag not in self.output_tags:
            self.output_tags.append(tag)
        self.watermarks.setdefault(tag, MIN_TIMESTAMP)

    def _add(self, event: Any) -> None:
        if isinstance(event, ElementEvent):
            self._declare(event.tag)
            if self.coder is not None:
                coder = self.coder
                event = ElementEvent(
                    [TimestampedValue(coder.decode(coder.encode(tv.value)), tv.timestamp) for tv in event.timestamped_values],
                    event.tag,
                )
            for tv in event.timestamped_values:
                micros = tv.timestamp_micros
                if not MIN_TIMESTAMP.micros <= micros < MAX_TIMESTAMP.micros:
                    msg = (
                        f"TestStream: element {tv.value!r} has timestamp {tv.timestamp!r}, outside "
                        f"[MIN_TIMESTAMP, MAX_TIMESTAMP)"
                    )
                    raise ValueError(msg)
        elif isinstance(event, WatermarkEvent):
            self._declare(event.tag)
            current = self.watermarks[event.tag]
            if event.new_watermark.micros <= current.micros:
                where = "" if event.tag is None else f" of output {event.tag!r}"
                msg = (
                    f"TestStream: the watermark{where} must move forward, but "
                    f"advance_watermark_to({event.new_watermark!r}) follows {current!r}"
                )
                raise ValueError(msg)
            self.watermarks[event.tag] = event.new_watermark
        elif isinstance(event, ProcessingTimeEvent):
            if event.advance_by.micros <= 0:
                msg = f"TestStream: advance_processing_time needs a positive duration, got {event.advance_by!r}"
                raise ValueError(msg)
        else:
            msg = f"TestStream: unknown event {event!r}"
            raise TypeError(msg)
        self._events.append(event)

    def add_elements(
        self, elements: Iterable[Any], tag: str | None = None, event_timestamp: Any = None
    ) -> TestStream:
        """Elements arriving in one step; plain values are stamped ``event_timestamp``
        or, without it, the output's current watermark."""
        self._declare(tag)
        stamped = []
        for element in elements:
            if isinstance(element, TimestampedValue):
                stamped.append(element)
            elif isinstance(element, WindowedValue):
                stamped.append(TimestampedValue(element.value, element.timestamp))
            else:
                when = self.watermarks[tag] if event_timestamp is None else event_timestamp
                try:
                    stamped.append(TimestampedValue(element, when))
                except TypeError as error:
                    msg = f"TestStream.add_elements: {error}"
                    raise TypeError(msg) from None
        self._add(ElementEvent(stamped, tag))
        return self

    def advance_watermark_to(self, new_watermark: Any, tag: str | None = None) -> TestStream:
        self._add(WatermarkEvent(new_watermark, tag))
        return self

    def advance_watermark_to_infinity(self, tag: str | None = None) -> TestStream:
        return self.advance_watermark_to(MAX_TIMESTAMP, tag)

    def advance_processing_time(self, advance_by: Any) -> TestStream:
        self._add(ProcessingTimeEvent(advance_by))
        return self

    def expand(self, pbegin: pvalue.PBegin) -> Any:
        if not isinstance(pbegin, pvalue.PBegin):
            msg = "TestStream is a root transform: apply it to the pipeline (p | TestStream()...)"
            raise TypeError(msg)
        tags = self.output_tags or [None]
        if tags == [None]:
            return pvalue.PCollection(pbegin.pipeline, is_bounded=False)
        return {
            tag: pvalue.PCollection(pbegin.pipeline, is_bounded=False, tag=tag) for tag in tags
        }


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.testing.test_stream")
