"""Beam's transform library (``sparkbeam.transforms``), built from the SDK's primitives.

Beam's module paths work here too: ``sparkbeam.transforms.window``,
``sparkbeam.transforms.trigger``, ``sparkbeam.transforms.core``, ...
"""

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
from sparkbeam.ptransform import PTransform, ptransform_fn
from sparkbeam.transforms import core, ptransform, trigger, window

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
    "PTransform",
    "ParDo",
    "WindowInto",
    "core",
    "ptransform",
    "ptransform_fn",
    "trigger",
    "window",
]
