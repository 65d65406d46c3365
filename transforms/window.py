"""Beam's path ``apache_beam.transforms.window``: re-exports ``sparkbeam.window``."""

from sparkbeam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp
from sparkbeam.window import (
    BoundedWindow,
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    NonMergingWindowFn,
    Sessions,
    SlidingWindows,
    TimestampCombiner,
    TimestampedValue,
    WindowFn,
)
from sparkbeam.windowing import Windowing

__all__ = [
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "BoundedWindow",
    "Duration",
    "FixedWindows",
    "GlobalWindow",
    "GlobalWindows",
    "IntervalWindow",
    "NonMergingWindowFn",
    "Sessions",
    "SlidingWindows",
    "Timestamp",
    "TimestampCombiner",
    "TimestampedValue",
    "WindowFn",
    "Windowing",
]
