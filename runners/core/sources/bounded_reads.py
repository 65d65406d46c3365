"""``Read(BoundedSource)`` in the engine: split on the driver, each bundle read where it runs.

The driver splits the source into bundles of about ``size / parallelism`` bytes
(``sparkbeam.io.iobase.split_source``); each backend reads every bundle as one unit of
parallel work (on Spark, one partition per bundle). A failure in the user's source
(``split``, ``get_range_tracker``, ``read``) names the transform and where it was applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain, islice
from typing import Any

from sparkbeam.io.iobase import SourceBundle, read_bundle, read_bundle_values, split_source
from sparkbeam.runners.core.lowering.errors import UserCodeError, add_transform_note
from sparkbeam.runners.core.lowering.ops import BoundedSourceReadOp
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["read_bundle_values_of", "read_bundles", "split_for"]


def split_for(op: BoundedSourceReadOp, parallelism: int) -> list[SourceBundle]:
    """The op's source split into bundles for ``parallelism`` readers (on the driver)."""
    where = f"'{op.label}' (applied at {op.location})"
    try:
        return split_source(op.source, parallelism, where)
    except (ValueError, TypeError) as error:
        if where in str(error):
            raise
        raise add_transform_note(error, op.label, op.location) from None


def read_bundles(op: BoundedSourceReadOp, bundles: list[SourceBundle]) -> Iterator[WindowedValue]:
    """The elements of ``bundles``; a failure of the source's code is a ``UserCodeError``."""
    return chain.from_iterable(_named_failures(op, bundles, read_bundle))


def read_bundle_values_of(op: BoundedSourceReadOp, bundles: list[SourceBundle]) -> Iterator[Any]:
    """``read_bundles`` for a source that ``yields_plain_values``: the elements' values alone
    (each in the global window at the minimum timestamp with an unknown pane)."""
    return chain.from_iterable(_named_failures(op, bundles, read_bundle_values))


#: items pulled from a bundle's reading at a time: the reader takes them with no Python
#: frame resumed per item
_CHUNK = 256


def _named_failures(op: BoundedSourceReadOp, bundles: list[SourceBundle], read: Callable[[SourceBundle], Iterator[Any]]) -> Iterator[list[Any]]:
    """What ``read`` reads of each bundle, a list at a time; a failure is a ``UserCodeError``."""
    for bundle in bundles:
        try:
            items = read(bundle)
            while True:
                chunk = list(islice(items, _CHUNK))
                yield chunk
                if len(chunk) < _CHUNK:
                    break
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, bundle) from error
