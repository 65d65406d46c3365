"""``DoFn``: the per-element function of a ``ParDo``, with Beam's lifecycle and parameters.

>>> class SplitWords(DoFn):
...     def process(self, line, timestamp=DoFn.TimestampParam):
...         for word in line.split():
...             yield TimestampedValue(word, timestamp)
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["DoFn", "DoFnParam"]


@attrs.frozen
class DoFnParam:
    """A default value that asks the runner to pass something other than the element."""

    name: str

    def __repr__(self) -> str:
        return self.name


class DoFn:
    """Processes elements one at a time.

    Lifecycle, as in Beam: ``setup`` once per instance, ``start_bundle`` and
    ``finish_bundle`` around each bundle (a Spark partition of one step), ``process`` per
    element, ``teardown`` at the end. ``process`` may return or yield values,
    ``TimestampedValue``, ``TaggedOutput`` or ``WindowedValue``; a value keeps the input's
    timestamp, windows and pane, a ``TimestampedValue`` is windowed again from its new
    timestamp by the input's window fn (as in Beam's Python SDK). It asks for the element's
    timestamp, window or pane with the defaults ``DoFn.TimestampParam``,
    ``DoFn.WindowParam`` and ``DoFn.PaneInfoParam``.
    """

    ElementParam = DoFnParam("ElementParam")
    TimestampParam = DoFnParam("TimestampParam")
    WindowParam = DoFnParam("WindowParam")
    PaneInfoParam = DoFnParam("PaneInfoParam")
    # Recognised so that a DoFn using them gets a clear "not supported" error.
    SideInputParam = DoFnParam("SideInputParam")
    KeyParam = DoFnParam("KeyParam")
    BundleFinalizerParam = DoFnParam("BundleFinalizerParam")
    WatermarkEstimatorParam = DoFnParam("WatermarkEstimatorParam")

    @staticmethod
    def StateParam(spec: Any) -> DoFnParam:
        return DoFnParam(f"StateParam({spec!r})")

    @staticmethod
    def TimerParam(spec: Any) -> DoFnParam:
        return DoFnParam(f"TimerParam({spec!r})")

    @staticmethod
    def RestrictionParam(provider: Any = None) -> DoFnParam:
        return DoFnParam("RestrictionParam")

    def default_label(self) -> str:
        return type(self).__name__

    def setup(self) -> None:
        pass

    def start_bundle(self) -> None:
        pass

    def process(self, element: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement process()")

    def finish_bundle(self) -> Any:
        pass

    def teardown(self) -> None:
        pass


SUPPORTED_PARAMS = frozenset(
    {DoFn.ElementParam, DoFn.TimestampParam, DoFn.WindowParam, DoFn.PaneInfoParam}
)
