"""Beam's transform library (``sparkbeam.transforms``), built from the SDK's primitives.

Beam's module paths work here too: ``sparkbeam.transforms.window``,
``sparkbeam.transforms.trigger``, ``sparkbeam.transforms.core``, ...
"""

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
from sparkbeam.ptransform import PTransform, ptransform_fn
from sparkbeam.schemas import GroupBy, Select
from sparkbeam.transforms import (
    combiners,
    core,
    ptransform,
    stats,
    timeutil,
    trigger,
    userstate,
    util,
    window,
)
from sparkbeam.transforms._element_wise import Partition, PartitionFn
from sparkbeam.transforms.stats import ApproximateQuantiles, ApproximateUnique
from sparkbeam.transforms.util import (
    BatchElements,
    CoGroupByKey,
    Distinct,
    GroupIntoBatches,
    Keys,
    KvSwap,
    LogElements,
    Regex,
    Reify,
    RemoveDuplicates,
    Reshuffle,
    SortAndBatchElements,
    Tee,
    ToString,
    Values,
    WaitOn,
    WithKeys,
)

__all__ = [
    "ApproximateQuantiles",
    "ApproximateUnique",
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
    "PTransform",
    "ParDo",
    "Select",
    "WindowInto",
    "core",
    "ptransform",
    "ptransform_fn",
    "stats",
    "trigger",
    "window",
]

# Beam's transform library (combiners and util), as apache_beam.transforms exports it.
__all__ += [
    "BatchElements",
    "CoGroupByKey",
    "Distinct",
    "GroupIntoBatches",
    "Keys",
    "KvSwap",
    "LogElements",
    "Partition",
    "PartitionFn",
    "Regex",
    "Reify",
    "RemoveDuplicates",
    "Reshuffle",
    "SortAndBatchElements",
    "Tee",
    "ToString",
    "Values",
    "WaitOn",
    "WithKeys",
    "combiners",
    "timeutil",
    "userstate",
    "util",
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms")
