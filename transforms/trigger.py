"""Beam's path ``apache_beam.transforms.trigger``: every trigger spec and ``AccumulationMode``."""

from sparkbeam.beam_surface import module_getattr
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


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.trigger")
