"""Time and windowed-value types (``sparkbeam.utils.timestamp``, ``sparkbeam.utils.windowed_value``)."""
