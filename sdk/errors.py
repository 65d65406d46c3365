"""Where in the user's code a transform was applied, and errors that say so."""

from __future__ import annotations

import sys

import attrs

__all__ = ["PipelineConstructionError", "UserCodeError", "UserLocation", "caller_location"]


@attrs.frozen
class UserLocation:
    """The user's file and line that applied a transform."""

    filename: str
    lineno: int

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


_UNKNOWN = UserLocation("<unknown>", 0)


def caller_location() -> UserLocation:
    """The innermost stack frame outside sparkbeam (and outside Python's own machinery)."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "sparkbeam" or module.startswith(("sparkbeam.", "importlib", "contextlib"))):
            return UserLocation(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back  # type: ignore[assignment]
    return _UNKNOWN


class PipelineConstructionError(ValueError):
    """A pipeline that cannot run as written; the message names the transform to fix."""


class UserCodeError(Exception):
    """Wraps nothing: marks the note added to a user's exception raised inside a transform."""


def describe(label: str, location: UserLocation | None) -> str:
    where = f" (applied at {location})" if location and location.lineno else ""
    return f"'{label}'{where}"
