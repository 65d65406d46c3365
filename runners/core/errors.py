"""Errors that name the user's transform: at planning time, and for exceptions raised by user code.

An exception raised inside a user's DoFn or CombineFn reaches the user as *their*
exception, with a note naming the transform's label and where it was applied. On Spark the
exception crosses a process boundary inside Spark's own error, so it is shipped as a
pickled payload between markers and rebuilt on the driver (``rebuild_user_error``).
"""

from __future__ import annotations

import base64
import pickle
import re
from typing import Any

__all__ = [
    "TransformError",
    "UnsupportedError",
    "UserCodeError",
    "add_transform_note",
    "rebuild_user_error",
]

_MARKER = re.compile(r"\[\[sparkbeam-user-error:([A-Za-z0-9+/=]+)\]\]")


class UnsupportedError(NotImplementedError):
    """A transform or setting the runner cannot honour; the message names the transform."""


class TransformError(ValueError):
    """Bad input detected by the runner (not by user code); the message names the transform."""


class UserCodeError(Exception):
    """Raised on a worker when user code fails; carries the original exception to the driver."""

    def __init__(self, label: str, location: str, error: BaseException, element: Any = None) -> None:
        self.label = label
        self.location = location
        self.error = error
        payload = _dumps((label, location, error, _short_repr(element)))
        super().__init__(
            f"{type(error).__name__}: {error} (in transform '{label}', applied at {location})"
            f" [[sparkbeam-user-error:{payload}]]"
        )

    def __reduce__(self):
        return (UserCodeError, (self.label, self.location, self.error))


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
            label, location, error, element = value
            data = pickle.dumps((label, location, RuntimeError(f"{type(error).__name__}: {error}"), element))
    return base64.b64encode(data).decode("ascii")


def add_transform_note(error: BaseException, label: str, location: str, element: str | None = None) -> BaseException:
    if f"'{label}' (applied at {location})" in str(error):
        return error  # the message already names the transform (the runner's own errors do)
    note = f"in transform '{label}' (applied at {location})"
    if element is not None:
        note += f" while processing {element}"
    notes = getattr(error, "__notes__", None)
    if notes is None or note not in notes:
        if hasattr(error, "add_note"):
            error.add_note(note)
        else:  # Python 3.10: keep the note where 3.11's traceback would show it
            error.__notes__ = [*(notes or []), note]  # type: ignore[attr-defined]
            error.args = (f"{error.args[0] if error.args else ''} [{note}]", *error.args[1:])
    return error


def rebuild_user_error(text: str) -> BaseException | None:
    """The user's exception from the text of a Spark failure, or None if there is none in it."""
    match = _MARKER.search(text)
    if match is None:
        return None
    try:
        label, location, error, element = pickle.loads(base64.b64decode(match.group(1)))
    except Exception:
        return None
    return add_transform_note(error, label, location, element)
