"""Beam's path ``apache_beam.transforms.ptransform``."""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.ptransform import PTransform, label_from_callable, ptransform_fn

__all__ = ["PTransform", "label_from_callable", "ptransform_fn"]


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.transforms.ptransform")
