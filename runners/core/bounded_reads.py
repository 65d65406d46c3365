"""``Read(BoundedSource)`` in the engine: split on the driver, each bundle read where it runs.

The driver splits the source into bundles of about ``size / parallelism`` bytes
(``sparkbeam.io.iobase.split_source``); each backend reads every bundle as one unit of
parallel work (on Spark, one partition per bundle). A failure in the user's source
(``split``, ``get_range_tracker``, ``read``) names the transform and where it was applied.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparkbeam.io.iobase import SourceBundle, read_bundle, split_source
from sparkbeam.runners.core.errors import UserCodeError, add_transform_note
from sparkbeam.runners.core.ops import BoundedSourceReadOp
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["read_bundles", "split_for"]


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
    for bundle in bundles:
        try:
            yield from read_bundle(bundle)
        except Exception as error:
            raise UserCodeError(op.label, op.location, error, bundle) from error
