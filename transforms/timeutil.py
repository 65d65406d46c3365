"""Beam's path ``apache_beam.transforms.timeutil``: ``TimeDomain`` (defined in
``sparkbeam.userstate``)."""

from sparkbeam.beam_surface import module_getattr
from sparkbeam.userstate import TimeDomain

__all__ = ["TimeDomain"]

__getattr__ = module_getattr(__name__, "apache_beam.transforms.timeutil")
