"""Beam's path ``apache_beam.transforms.userstate``: state and timers for DoFns
(defined in ``sparkbeam.userstate``)."""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.userstate import (
    AccumulatingRuntimeState,
    BagRuntimeState,
    BagStateSpec,
    BaseTimer,
    CombiningValueRuntimeState,
    CombiningValueStateSpec,
    OrderedListRuntimeState,
    OrderedListStateSpec,
    ReadModifyWriteRuntimeState,
    ReadModifyWriteStateSpec,
    RuntimeState,
    SetRuntimeState,
    SetStateSpec,
    StateSpec,
    TimeDomain,
    TimerSpec,
    get_dofn_specs,
    is_stateful_dofn,
    on_timer,
    validate_stateful_dofn,
)

__all__ = [
    "AccumulatingRuntimeState",
    "BagRuntimeState",
    "BagStateSpec",
    "BaseTimer",
    "CombiningValueRuntimeState",
    "CombiningValueStateSpec",
    "OrderedListRuntimeState",
    "OrderedListStateSpec",
    "ReadModifyWriteRuntimeState",
    "ReadModifyWriteStateSpec",
    "RuntimeState",
    "SetRuntimeState",
    "SetStateSpec",
    "StateSpec",
    "TimeDomain",
    "TimerSpec",
    "get_dofn_specs",
    "is_stateful_dofn",
    "on_timer",
    "validate_stateful_dofn",
]

# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.userstate")
