"""Beam's path ``apache_beam.transforms.core``: the primitives, ParDo family and combining,
and the names Beam's module re-exports from elsewhere (``PTransform``, the window fns,
``TimestampedValue``, the type-hint decorators...), which code written against Beam reaches
through it (``beam.transforms.core.PTransform``)."""

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
from sparkbeam.ptransform import PTransform
from sparkbeam.schemas import GroupBy, Select
from sparkbeam.transforms._element_wise import Partition, PartitionFn
from sparkbeam.transforms.userstate import StateSpec, TimerSpec
from sparkbeam.transforms.window import GlobalWindows, SlidingWindows, TimestampCombiner, WindowFn
from sparkbeam.typehints import (
    TypeCheckError,
    TypeConstraint,
    WithTypeHints,
    with_input_types,
    with_output_types,
)
from sparkbeam.utils.timestamp import Duration
from sparkbeam.window import TimestampedValue
from sparkbeam.windowing import Windowing

__all__ = [
    "CombineFn",
    "CombineGlobally",
    "CombinePerKey",
    "CombineValues",
    "Create",
    "DoFn",
    "Duration",
    "Filter",
    "FlatMap",
    "FlatMapTuple",
    "Flatten",
    "FlattenWith",
    "GlobalWindows",
    "GroupBy",
    "GroupByKey",
    "Impulse",
    "Map",
    "MapTuple",
    "PTransform",
    "ParDo",
    "Partition",
    "PartitionFn",
    "Select",
    "SlidingWindows",
    "StateSpec",
    "TimerSpec",
    "TimestampCombiner",
    "TimestampedValue",
    "TypeCheckError",
    "TypeConstraint",
    "WindowFn",
    "WindowInto",
    "Windowing",
    "WithTypeHints",
    "with_input_types",
    "with_output_types",
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.core")
