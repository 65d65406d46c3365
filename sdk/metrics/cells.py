"""What a metric accumulates, and what a query returns (Beam's ``apache_beam.metrics.cells``).

Each kind of metric has a data value that combines associatively, so that updates made on
many workers, in any order, sum to one value: an int for a counter, ``DistributionData``,
``GaugeData`` (the latest by time wins), a frozenset of strings for a string set,
``BoundedTrieData`` for a bounded trie. Queries
return ``DistributionResult`` and ``GaugeResult`` around them, as Beam's do.

>>> DistributionData.singleton(3).combine(DistributionData.singleton(5)).get_result()
DistributionResult(sum=8, count=2, min=3, max=5, mean=4.0)
"""

from __future__ import annotations

import attrs

from sparkbeam.beam_surface import module_getattr
from sparkbeam.metrics._bounded_trie import BoundedTrieData

__all__ = ["BoundedTrieData", "DistributionData", "DistributionResult", "GaugeData", "GaugeResult"]

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


@attrs.frozen
class DistributionData:
    """Sum, count, min and max of the integers a distribution was updated with."""

    sum: int
    count: int
    min: int
    max: int

    @staticmethod
    def identity_element() -> DistributionData:
        return DistributionData(0, 0, _INT64_MAX, _INT64_MIN)

    @staticmethod
    def singleton(value: int) -> DistributionData:
        return DistributionData(value, 1, value, value)

    def combine(self, other: DistributionData) -> DistributionData:
        return DistributionData(
            self.sum + other.sum, self.count + other.count, min(self.min, other.min), max(self.max, other.max)
        )

    def get_result(self) -> DistributionResult:
        return DistributionResult(self)


@attrs.frozen
class GaugeData:
    """A gauge's value and when it was set (seconds since the epoch, as Beam's)."""

    value: int
    timestamp: float = 0.0

    @staticmethod
    def identity_element() -> GaugeData:
        return GaugeData(0, 0.0)

    def combine(self, other: GaugeData) -> GaugeData:
        # The latest value wins, whichever worker set it (Beam's rule).
        return other if other.timestamp > self.timestamp else self

    def get_result(self) -> GaugeResult:
        return GaugeResult(self)


@attrs.frozen(repr=False)
class DistributionResult:
    """A distribution as a query returns it: ``sum``, ``count``, ``min``, ``max``, ``mean``."""

    data: DistributionData

    @property
    def sum(self) -> int:
        return self.data.sum

    @property
    def count(self) -> int:
        return self.data.count

    @property
    def min(self) -> int | None:
        return self.data.min if self.data.count else None

    @property
    def max(self) -> int | None:
        return self.data.max if self.data.count else None

    @property
    def mean(self) -> float | None:
        return self.data.sum / self.data.count if self.data.count else None

    def __repr__(self) -> str:
        return (
            f"DistributionResult(sum={self.sum}, count={self.count}, min={self.min}, max={self.max}, mean={self.mean})"
        )


@attrs.frozen(repr=False)
class GaugeResult:
    """A gauge as a query returns it: ``value`` and ``timestamp``."""

    data: GaugeData

    @property
    def value(self) -> int:
        return self.data.value

    @property
    def timestamp(self) -> float:
        return self.data.timestamp

    def __repr__(self) -> str:
        return f"<GaugeResult(value={self.value}, timestamp={self.timestamp})>"

# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.metrics.cells")
