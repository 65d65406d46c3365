"""Beam's path ``apache_beam.transforms.window``: re-exports ``sparkbeam.window``."""

from sparkbeam.beam_surface import module_getattr
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


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.window")
