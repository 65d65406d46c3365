"""Errors that name the user's transform: at planning time, and for exceptions raised by user code.

An exception raised inside a user's DoFn or CombineFn reaches the user as *their*
exception, with a note naming the transform's label and where it was applied. On Spark the
exception crosses a process boundary inside Spark's own error, so it is shipped as a
pickled payload between markers and rebuilt on the driver (``rebuild_user_error``), with
the frames of the user's own code that the worker saw (the traceback itself does not
survive the trip) shown in a note.
"""

from __future__ import annotations

import base64
import functools
import linecache
import os
import pickle
import re
import traceback
from typing import Any

__all__ = [
    "TransformError",
    "UnsupportedError",
    "UserCodeError",
    "add_note",
    "add_transform_note",
    "format_frames",
    "rebuild_user_error",
    "user_frames",
]

_MARKER = re.compile(r"\[\[sparkbeam-user-error:([A-Za-z0-9+/=]+)\]\]")

#: At most this many of the user's innermost frames travel with an error from a worker.
_MAX_USER_FRAMES = 8


class UnsupportedError(NotImplementedError):
    """A transform or setting the runner cannot honour; the message names the transform."""


class TransformError(ValueError):
    """Bad input detected by the runner (not by user code); the message names the transform."""


class UserCodeError(Exception):
    """Raised on a worker when user code fails; carries the original exception to the driver,
    with the frames of the user's code it went through (``frames``: file, line, function)."""

    def __init__(
        self,
        label: str,
        location: str,
        error: BaseException,
        element: Any = None,
        frames: tuple[tuple[str, int, str], ...] | None = None,
    ) -> None:
        self.label = label
        self.location = location
        self.error = error
        self.frames = frames if frames is not None else user_frames(error)
        payload = _dumps((label, location, error, _short_repr(element), self.frames))
        super().__init__(
            f"{type(error).__name__}: {error} (in transform '{label}', applied at {location})"
            f" [[sparkbeam-user-error:{payload}]]"
        )

    def __reduce__(self):
        return (UserCodeError, (self.label, self.location, self.error, None, self.frames))


@functools.lru_cache(maxsize=1)
def _package_roots() -> tuple[str, ...]:
    """Folders of code that is not the user's: sparkbeam's packages (three folders in a
    source checkout, one when installed), PySpark and Py4J."""
    import importlib

    roots = []
    for name in ("sparkbeam", "sparkbeam.transforms", "sparkbeam.runners", "pyspark", "py4j"):
        try:
            module_file = importlib.import_module(name).__file__
        except ImportError:
            continue
        if module_file is not None:
            roots.append(os.path.dirname(os.path.abspath(module_file)) + os.sep)
    return tuple(roots)


def user_frames(error: BaseException) -> tuple[tuple[str, int, str], ...]:
    """(file, line, function) of the frames an exception went through outside sparkbeam,
    PySpark and Py4J, innermost last: the user's functions, and what they called."""
    roots = _package_roots()
    frames = [
        (frame.filename, frame.lineno or 0, frame.name)
        for frame in traceback.extract_tb(error.__traceback__)
        if not os.path.abspath(frame.filename).startswith(roots)
    ]
    return tuple(frames[-_MAX_USER_FRAMES:])


def format_frames(frames: tuple[tuple[str, int, str], ...]) -> str:
    """Frames as a traceback prints them, with the source line where this machine has it."""
    lines = []
    for filename, lineno, name in frames:
        lines.append(f'  File "{filename}", line {lineno}, in {name}')
        source = linecache.getline(filename, lineno).strip()
        if source:
            lines.append(f"    {source}")
    return "\n".join(lines)


def _short_repr(element: Any, limit: int = 200) -> str | None:
    if element is None:
        return None
    try:
        text = repr(element)
    except Exception:  # a user object whose repr fails must not hide the real error
        text = f"<{type(element).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dumps(value: Any) -> str:
    try:
        import cloudpickle  # shipped with pyspark as pyspark.cloudpickle; plain pickle otherwise

        data = cloudpickle.dumps(value)
    except Exception:
        try:
            data = pickle.dumps(value)
        except Exception:
            label, location, error, element, frames = value
            data = pickle.dumps((label, location, RuntimeError(f"{type(error).__name__}: {error}"), element, frames))
    return base64.b64encode(data).decode("ascii")


def add_transform_note(error: BaseException, label: str, location: str, element: str | None = None) -> BaseException:
    if f"'{label}' (applied at {location})" in str(error):
        return error  # the message already names the transform (the runner's own errors do)
    note = f"in transform '{label}' (applied at {location})"
    if element is not None:
        note += f" while processing {element}"
    add_note(error, note)
    return error


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, once, on every Python sparkbeam supports."""
    notes = getattr(error, "__notes__", None)
    if notes is not None and note in notes:
        return
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10: keep the note where 3.11's traceback would show it
        error.__notes__ = [*(notes or []), note]  # type: ignore[attr-defined]
        error.args = (f"{error.args[0] if error.args else ''} [{note}]", *error.args[1:])


def rebuild_user_error(text: str) -> BaseException | None:
    """The user's exception from the text of a Spark failure, or None if there is none in
    it: with a note naming the transform, its line and the element, and one with the
    frames of the user's code it was raised in on the worker."""
    match = _MARKER.search(text)
    if match is None:
        return None
    try:
        label, location, error, element, frames = pickle.loads(base64.b64decode(match.group(1)))
    except Exception:
        return None
    add_transform_note(error, label, location, element)
    if frames:
        add_note(error, "Raised on a Spark executor, in this code (most recent call last):\n" + format_frames(frames))
    return error
