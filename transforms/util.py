"""Beam's path ``apache_beam.transforms.util``: utility transforms, with Beam's names.

Each is a composite of the primitives (``ParDo``, ``GroupByKey``, ``Flatten``,
``WindowInto``); the implementations live in private modules by kind:

- element-wise (``_element_wise``): ``Keys``, ``Values``, ``KvSwap``, ``WithKeys``,
  ``ToString``, ``Reify``, ``Regex``, ``LogElements``, ``Tee`` (and ``Partition``, which
  Beam keeps in ``core``: ``sparkbeam.Partition``);
- grouping (``_grouping``): ``CoGroupByKey``, ``Distinct``/``RemoveDuplicates``,
  ``Reshuffle``, ``ReshufflePerKey``, ``WaitOn``;
- event-time order per key (``_event_time_sort``): ``SortByEventTime`` (sparkbeam's own);
- stateful batching (``_stateful_batching``): ``GroupIntoBatches`` (and ``.WithShardedKey``);
- batching within a bundle (``_batching``): ``BatchElements``, ``SortAndBatchElements``.

>>> import sparkbeam as beam
>>> with beam.Pipeline() as p:                                   # doctest: +SKIP
...     emails = p | "E" >> beam.Create([("amy", "amy@x.org")])
...     phones = p | "P" >> beam.Create([("amy", "555-1234"), ("bob", "555-9876")])
...     joined = {"emails": emails, "phones": phones} | beam.CoGroupByKey()

Beam's encrypted grouping (``GroupByEncryptedKey`` and its ``Secret`` classes) is not
supported: naming it raises ``NotImplementedError`` (``sparkbeam.beam_surface``).
"""

from __future__ import annotations

from sparkbeam.beam_surface import module_getattr
from sparkbeam.transforms._batching import BatchElements, SortAndBatchElements
from sparkbeam.transforms._element_wise import (
    Keys,
    KvSwap,
    LogElements,
    Regex,
    Reify,
    Tee,
    ToString,
    Values,
    WithKeys,
)
from sparkbeam.transforms._event_time_sort import SortByEventTime
from sparkbeam.transforms._grouping import (
    CoGroupByKey,
    Distinct,
    RemoveDuplicates,
    Reshuffle,
    ReshufflePerKey,
    WaitOn,
)
from sparkbeam.transforms._stateful_batching import GroupIntoBatches
from sparkbeam.utils.sharded_key import ShardedKey

__all__ = [
    "BatchElements",
    "CoGroupByKey",
    "Distinct",
    "GroupIntoBatches",
    "Keys",
    "KvSwap",
    "LogElements",
    "Regex",
    "Reify",
    "RemoveDuplicates",
    "Reshuffle",
    "ReshufflePerKey",
    "ShardedKey",
    "SortAndBatchElements",
    "SortByEventTime",
    "Tee",
    "ToString",
    "Values",
    "WaitOn",
    "WithKeys",
]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.util")
