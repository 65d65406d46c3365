"""Errors that name the user's transform: at planning time, and for exceptions raised by user code.

An exception raised inside a user's DoFn or CombineFn reaches the user as *their*
exception, with a note naming the transform's label and where it was applied. On Spark the
exception crosses a process boundary inside Spark's own error text, so it is shipped as a
pickled payload between markers and rebuilt on the driver (``rebuild_user_error``), with
the frames of the user's own code that the worker saw (the traceback itself does not
survive the trip) shown in a note.

That text also holds the user's exception message, which often quotes the record that
failed (``invalid literal for int() with base 10: '<line>'``): a record can hold something
that looks like a marker. So a payload carries an HMAC-SHA256 under the run's secret key,
which the driver made and shipped to the executors with the stage's functions
(``sign_payloads_with`` tells this module where the running task's key is); the driver
unpickles only a payload whose MAC verifies, and any other marker stays text. Where no
key is known, the error carries no payload at all and the driver reports its text.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import linecache
import os
import pickle
import re
import traceback
from collections.abc import Callable
from typing import Any

__all__ = [
    "TransformError",
    "UnsupportedError",
    "UserCodeError",
    "add_note",
    "add_transform_note",
    "format_frames",
    "rebuild_user_error",
    "sign_payloads_with",
    "user_error_of",
    "user_frames",
]

#: A payload and its MAC (64 hex digits); neither part can hold the other's separator.
_MARKER = re.compile(r"\[\[sparkbeam-user-error:([A-Za-z0-9+/=]+):([0-9a-f]{64})\]\]")
#: What the MAC covers before the payload: a MAC made for something else never matches.
_MAC_CONTEXT = b"sparkbeam-user-error\0"

#: At most this many of the user's innermost frames travel with an error from a worker.
_MAX_USER_FRAMES = 8


class UnsupportedError(NotImplementedError):
    """A transform or setting the runner cannot honour; the message names the transform."""


class TransformError(ValueError):
    """Bad input detected by the runner (not by user code); the message names the transform."""


def _no_key() -> bytes | None:
    return None


#: Where the key of the task running in this process is (``sign_payloads_with``).
_payload_key: Callable[[], bytes | None] = _no_key


def sign_payloads_with(key_of_running_task: Callable[[], bytes | None]) -> None:
    """Have ``UserCodeError`` sign its payload with ``key_of_running_task()`` (the run's key
    while a task of it runs in this process, else None: no payload)."""
    global _payload_key
    _payload_key = key_of_running_task


def _mac(key: bytes, payload: str) -> str:
    return hmac.new(key, _MAC_CONTEXT + payload.encode("ascii"), hashlib.sha256).hexdigest()


class UserCodeError(Exception):
    """Raised on a worker when user code fails; carries the original exception to the driver,
    with the frames of the user's code it went through (``frames``: file, line, function).

    Its text names the transform; made into text where a task's key is known (Spark's
    worker formats it as the task fails), it ends with the signed payload too."""

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
        self.element = _short_repr(element)
        self.frames = frames if frames is not None else user_frames(error)
        self._signed: tuple[bytes, str] | None = None
        super().__init__(f"{type(error).__name__}: {error} (in transform '{label}', applied at {location})")

    def __str__(self) -> str:
        key = _payload_key()
        return self.signed_text(key) if key is not None else super().__str__()

    def signed_text(self, key: bytes) -> str:
        """Its text with its payload signed with ``key``: what ``__str__`` gives while a
        task that knows the run's key runs here, for a backend whose tasks carry the key
        themselves (Spark Connect's, ``runners/spark/connect/tasks.py``)."""
        text = super().__str__()
        if self._signed is None or self._signed[0] != key:
            # Pickled when made into text, not when raised: an error caught and handled
            # (as the in-memory backend does) costs no pickling.
            payload = _dumps((self.label, self.location, self.error, self.element, self.frames))
            self._signed = (key, f" [[sparkbeam-user-error:{payload}:{_mac(key, payload)}]]")
        return text + self._signed[1]

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


def rebuild_user_error(text: str, key: bytes) -> BaseException | None:
    """The user's exception from the text of a Spark failure, or None if there is none in
    it: with a note naming the transform, its line and the element, and one with the
    frames of the user's code it was raised in on the worker.

    Only a payload signed with ``key`` (the run's) is unpickled: every other marker in the
    text, such as one a record held and the user's message quotes, is left as text."""
    for match in _MARKER.finditer(text):
        payload, mac = match.groups()
        if not hmac.compare_digest(_mac(key, payload).encode("ascii"), mac.encode("ascii")):
            continue
        try:
            label, location, error, element, frames = pickle.loads(base64.b64decode(payload))
        except Exception:
            return None
        return _with_notes(error, label, location, element, frames)
    return None


def user_error_of(failure: UserCodeError) -> BaseException:
    """The user's exception of a ``UserCodeError`` raised in this process (a stage run by
    the driver), with the notes ``rebuild_user_error`` adds to one from a worker."""
    return _with_notes(failure.error, failure.label, failure.location, failure.element, failure.frames)


def _with_notes(
    error: BaseException, label: str, location: str, element: str | None, frames: tuple[tuple[str, int, str], ...]
) -> BaseException:
    add_transform_note(error, label, location, element)
    if frames:
        add_note(error, "Raised on a Spark executor, in this code (most recent call last):\n" + format_frames(frames))
    return error
