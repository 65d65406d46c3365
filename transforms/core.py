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
from sparkbeam.schemas import GroupBy, Select
from sparkbeam.transforms._element_wise import Partition, PartitionFn
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
    "GroupBy",
    "GroupByKey",
    "Impulse",
    "Map",
    "MapTuple",
    "ParDo",
    "Partition",
    "PartitionFn",
    "Select",
    "WindowInto",
    "Windowing",
]
