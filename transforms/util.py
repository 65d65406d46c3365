"""Beam's path ``apache_beam.transforms.util``: utility transforms, with Beam's names.

Each is a composite of the primitives (``ParDo``, ``GroupByKey``, ``Flatten``,
``WindowInto``); the implementations live in private modules by kind:

- element-wise (``_element_wise``): ``Keys``, ``Values``, ``KvSwap``, ``WithKeys``,
  ``ToString``, ``Reify``, ``Regex``, ``LogElements``, ``Tee`` (and ``Partition``, which
  Beam keeps in ``core``: ``sparkbeam.Partition``);
- grouping (``_grouping``): ``CoGroupByKey``, ``Distinct``/``RemoveDuplicates``,
  ``Reshuffle``, ``ReshufflePerKey``, ``GroupIntoBatches``, ``WaitOn``;
- batching within a bundle (``_batching``): ``BatchElements``, ``SortAndBatchElements``.

>>> import sparkbeam as beam
>>> with beam.Pipeline() as p:                                   # doctest: +SKIP
...     emails = p | "E" >> beam.Create([("amy", "amy@x.org")])
...     phones = p | "P" >> beam.Create([("amy", "555-1234"), ("bob", "555-9876")])
...     joined = {"emails": emails, "phones": phones} | beam.CoGroupByKey()

Beam's encrypted grouping (``GroupByEncryptedKey`` and its ``Secret`` classes) is not
supported: using it raises ``NotImplementedError`` naming it.
"""

from __future__ import annotations

from typing import Any, NoReturn

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
from sparkbeam.transforms._grouping import (
    CoGroupByKey,
    Distinct,
    GroupIntoBatches,
    RemoveDuplicates,
    Reshuffle,
    ReshufflePerKey,
    WaitOn,
)

__all__ = [
    "BatchElements",
    "CoGroupByKey",
    "Distinct",
    "GcpHsmGeneratedSecret",
    "GcpSecret",
    "GroupByEncryptedKey",
    "GroupIntoBatches",
    "Keys",
    "KvSwap",
    "LogElements",
    "Regex",
    "Reify",
    "RemoveDuplicates",
    "Reshuffle",
    "ReshufflePerKey",
    "Secret",
    "SortAndBatchElements",
    "Tee",
    "ToString",
    "Values",
    "WaitOn",
    "WithKeys",
]

class _NotSupported:
    """A Beam name that sparkbeam does not implement: constructing it says so."""

    _beam_name = ""
    _why = ""

    def __init__(self, *args: Any, **kwargs: Any) -> NoReturn:
        msg = f"apache_beam.transforms.util.{self._beam_name} is not supported by sparkbeam: {self._why}"
        raise NotImplementedError(msg)


def _not_supported(name: str, why: str) -> type:
    return type(name, (_NotSupported,), {"_beam_name": name, "_why": why, "__doc__": f"Not supported: {why}"})


_ENCRYPTION = "encrypted grouping (GroupByEncryptedKey and its secrets) is not implemented; use GroupByKey"
GroupByEncryptedKey = _not_supported("GroupByEncryptedKey", _ENCRYPTION)
Secret = _not_supported("Secret", _ENCRYPTION)
GcpSecret = _not_supported("GcpSecret", _ENCRYPTION)
GcpHsmGeneratedSecret = _not_supported("GcpHsmGeneratedSecret", _ENCRYPTION)
