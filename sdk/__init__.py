"""sparkbeam: Apache Beam's Python SDK model, run on Apache Spark.

Write ``import sparkbeam as beam`` and build pipelines as in Beam::

    import sparkbeam as beam
    from sparkbeam import window

    with beam.Pipeline() as p:
        (p
         | beam.Create([("a", 1, 10.0), ("b", 2, 70.0)])
         | beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))
         | beam.WindowInto(window.FixedWindows(60))
         | beam.CombinePerKey(sum)
         | beam.Map(print))

This package (the SDK) never imports pyspark; the Spark runner is loaded when a
pipeline runs.
"""

import importlib
import importlib.util
from typing import Any

from sparkbeam import (
    coders,
    io,
    pvalue,
    transforms,
    typehints,
    window,
)
from sparkbeam.beam_surface import install_module_finder, module_getattr
from sparkbeam.combine import (
    CombineFn,
    CombineGlobally,
    CombinePerKey,
    CombineValues,
)
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
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.pipeline import Pipeline, capture
from sparkbeam.ptransform import PTransform, ptransform_fn
from sparkbeam.pvalue import PCollection, TaggedOutput
from sparkbeam.row import Row
from sparkbeam.runner import PipelineResult, PipelineState
from sparkbeam.schemas import GroupBy, Select
from sparkbeam.transforms import (  # Beam's transform library, as apache_beam exports it
    ApproximateQuantiles,
    ApproximateUnique,
    BatchElements,
    CoGroupByKey,
    Distinct,
    GroupIntoBatches,
    Keys,
    KvSwap,
    LogElements,
    Partition,
    PartitionFn,
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
    combiners,
    trigger,
)
from sparkbeam.utils.timestamp import Duration, Timestamp
from sparkbeam.window import TimestampedValue

__version__ = "0.1.0"


def _spark_runner() -> Any:
    """``sparkbeam.SparkRunner``, loaded when asked for (the SDK never imports a runner).

    With apache_beam installed it is the runner of ``runners/beam``, which is also one of
    Beam's runners: ``--runner=sparkbeam.SparkRunner`` on a Beam pipeline's command line,
    or ``beam.Pipeline(runner=sparkbeam.SparkRunner())``. Without it, the Spark runner alone.
    """
    try:
        has_beam = importlib.util.find_spec("apache_beam") is not None
    except (ImportError, ValueError):
        has_beam = False
    module = "sparkbeam.runners.beam.runner" if has_beam else "sparkbeam.runners.spark.runner"
    return importlib.import_module(module).SparkRunner

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
    "GroupBy",
    "GroupByKey",
    "Impulse",
    "Map",
    "MapTuple",
    "PCollection",
    "PTransform",
    "ParDo",
    "Pipeline",
    "PipelineOptions",
    "PipelineResult",
    "PipelineState",
    "Row",
    "Select",
    "SparkRunner",
    "TaggedOutput",
    "Timestamp",
    "TimestampedValue",
    "WindowInto",
    "capture",
    "coders",
    "io",
    "ptransform_fn",
    "pvalue",
    "transforms",
    "trigger",
    "typehints",
    "window",
]

# Beam's transform library (combiners, util and stats), as apache_beam exports it.
__all__ += [
    "ApproximateQuantiles",
    "ApproximateUnique",
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
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
_missing_beam_name = module_getattr(__name__, "apache_beam")


def __getattr__(name: str) -> Any:
    if name == "SparkRunner":
        return _spark_runner()
    return _missing_beam_name(name)


# ... and so do imports of Beam's modules that sparkbeam lacks (import sparkbeam.io.gcp).
install_module_finder()
