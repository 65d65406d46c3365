"""What the grouping-engine tests share: a one-key driver with explicit watermarks and a ManualClock."""

from __future__ import annotations

from sparkbeam.combine import CombineFn
from sparkbeam.runners.core.grouping.grouping import GroupingStats, build_grouping_engine
from sparkbeam.runners.core.loop.clock import ManualClock
from sparkbeam.runners.core.lowering.ops import GroupOp
from sparkbeam.trigger import (
    AccumulationMode,
    DefaultTrigger,
)
from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import PaneInfoTiming, WindowedValue
from sparkbeam.window import (
    FixedWindows,
    Sessions,
    WindowFn,
)
from sparkbeam.windowing import Windowing

S = 1_000_000
MIN = MIN_TIMESTAMP.micros
MAX = MAX_TIMESTAMP.micros
EARLY, ON_TIME, LATE = PaneInfoTiming.EARLY, PaneInfoTiming.ON_TIME, PaneInfoTiming.LATE
DISCARDING, ACCUMULATING = AccumulationMode.DISCARDING, AccumulationMode.ACCUMULATING


class SumFn(CombineFn):
    def create_accumulator(self):
        return 0

    def add_input(self, accumulator, element):
        return accumulator + element

    def merge_accumulators(self, accumulators):
        return sum(accumulators)

    def extract_output(self, accumulator):
        return accumulator


class Key:
    """One key's state in an engine, with a watermark and a clock that tests move."""

    def __init__(self, windowing: Windowing, **engine_options) -> None:
        self.engine = build_grouping_engine(windowing, **engine_options)
        self.window_fn = windowing.windowfn
        self.state = self.engine.new_key_state()
        self.stats = GroupingStats()
        self.clock = ManualClock()
        self.input_watermark = MIN
        self.output_watermark = MIN

    def add(self, *seconds: float, values=None) -> list[WindowedValue]:
        """Elements at these times (value = the time in seconds unless ``values``)."""
        elements = []
        for ix, second in enumerate(seconds):
            micros = round(second * S)
            windows = tuple(self.window_fn.assign(WindowFn.AssignContext(second)))
            value = second if values is None else values[ix]
            elements.append(WindowedValue(value, micros, windows))
        return self.engine.add_elements(
            self.state,
            "k",
            elements,
            input_watermark=self.input_watermark,
            output_watermark=self.output_watermark,
            now=self.clock.now_micros(),
            stats=self.stats,
        )

    def watermark(self, seconds: float, *, output: float | None = None) -> list[WindowedValue]:
        """Move the input watermark (and the output watermark, to ``output`` or along)."""
        self.input_watermark = round(seconds * S)
        self.output_watermark = self.input_watermark if output is None else round(output * S)
        return self.fire()

    def fire(self) -> list[WindowedValue]:
        return self.engine.fire_timers(
            self.state,
            "k",
            input_watermark=self.input_watermark,
            now=self.clock.now_micros(),
            stats=self.stats,
        )

    def hold(self) -> int | None:
        hold = self.engine.earliest_hold(self.state)
        return None if hold is None else hold[0]


def fixed(size=10, trigger=None, **options) -> Windowing:
    return Windowing(FixedWindows(size), trigger or DefaultTrigger(), **options)


def summary(panes: list[WindowedValue]) -> list[tuple]:
    """(window start s, values, timestamp µs, timing, index, nonspeculative, last) per pane."""
    return [
        (
            int(p.windows[0].start),
            p.value[1],
            p.timestamp_micros,
            p.pane_info.timing,
            p.pane_info.index,
            p.pane_info.nonspeculative_index,
            p.pane_info.is_last,
        )
        for p in panes
    ]


def sessions(trigger=None, **options) -> Windowing:
    return Windowing(Sessions(10), trigger or DefaultTrigger(), **options)


def run_batch(windowing: Windowing, *seconds: float, **options) -> list[WindowedValue]:
    key = Key(windowing, batch=True, **options)
    panes = key.add(*seconds)
    key.clock.set(MAX)
    key.input_watermark = MAX
    panes += key.fire()
    assert key.engine.is_empty(key.state)
    return panes


class CountingAccumulator:
    """Stands in for a Spark accumulator: what was added, summed."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, amount: int) -> None:
        self.total += amount


def sum_op(combine_fn=None, combiner=None) -> GroupOp:
    """The GroupOp of a ``"Sum"`` grouping in fixed 10-second windows (a combine when
    ``combine_fn`` is given), stamping its panes by ``combiner`` (end of window by default)."""
    options = {} if combiner is None else {"timestamp_combiner": combiner}
    windowing = Windowing(FixedWindows(10), **options)
    return GroupOp(label="Sum", location="here.py:1", inputs=(1,), outputs=(2,), windowing=windowing, combine_fn=combine_fn)
