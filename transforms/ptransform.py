"""Beam's path ``apache_beam.transforms.ptransform``."""

from sparkbeam.ptransform import PTransform, label_from_callable, ptransform_fn

__all__ = ["PTransform", "label_from_callable", "ptransform_fn"]
