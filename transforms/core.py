"""Beam's path ``apache_beam.transforms.core``: the primitives, ParDo family and combining."""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.combine import CombineFn, CombineGlobally, CombinePerKey, CombineValues
from sparkbeam.core import (
    Create,
    DoFn,
    Filter,
    FlatMap,
    FlatMapTuple,
    Flatten,
    FlattenWith,
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
    "FlattenWith",
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


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.core")
