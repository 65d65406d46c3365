"""Beam's path ``apache_beam.transforms.core``: the primitives, ParDo family and combining."""

from sparkbeam.combine import CombineFn, CombineGlobally, CombinePerKey, CombineValues
from sparkbeam.core import (
    Create,
    DoFn,
    Filter,
    FlatMap,
    FlatMapTuple,
    Flatten,
    GroupByKey,
    Impulse,
    Map,
    MapTuple,
    ParDo,
    WindowInto,
)
from sparkbeam.windowing import Windowing

__all__ = [
    "CombineFn",
    "CombineGlobally",
    "CombinePerKey",
    "CombineValues",
    "Create",
    "DoFn",
    "Filter",
    "FlatMap",
    "FlatMapTuple",
    "Flatten",
    "GroupByKey",
    "Impulse",
    "Map",
    "MapTuple",
    "ParDo",
    "WindowInto",
    "Windowing",
]
