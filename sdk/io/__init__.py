"""Sources and sinks with Beam's names (``sparkbeam.io.ReadFromText``, ``WriteToText``, ...)."""

from sparkbeam.io.textio import ReadFromText, WriteToText

__all__ = ["ReadFromText", "WriteToText"]
