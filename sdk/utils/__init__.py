"""Time and windowed-value types (``sparkbeam.utils.timestamp``, ``sparkbeam.utils.windowed_value``)."""

from sparkbeam.beam_surface import module_getattr

# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.utils")
