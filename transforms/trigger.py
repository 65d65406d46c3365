"""Beam's path ``apache_beam.transforms.trigger``: every trigger spec and ``AccumulationMode``."""

from sparkbeam.trigger import (
    AccumulationMode,
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DefaultTrigger,
    Never,
    OrFinally,
    Repeatedly,
    TriggerFn,
    _AfterSynchronizedProcessingTime,
    _Never,
)

__all__ = [
    "AccumulationMode",
    "AfterAll",
    "AfterAny",
    "AfterCount",
    "AfterEach",
    "AfterProcessingTime",
    "AfterWatermark",
    "Always",
    "DefaultTrigger",
    "Never",
    "OrFinally",
    "Repeatedly",
    "TriggerFn",
    "_AfterSynchronizedProcessingTime",
    "_Never",
]
