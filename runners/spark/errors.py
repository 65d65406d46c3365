"""Spark failures back into the user's own exceptions, short enough to read.

A failure of user code inside a Spark job reaches the user as their exception, with notes
naming the transform, the line that applied it, the element, the frames of their code on
the executor, and the file holding Spark's log (``spark_log.py``). Its traceback keeps
only the user's frames and the call that ran the pipeline: the engine's frames between
them say nothing about the user's code. ``--verbose_errors`` keeps everything, the Py4J
error chained.

Failures of sparkbeam itself on an executor are shortened the same way: the worker's
Python exception, with Spark's log for the rest. So is a user's failure whose payload is
missing or not signed with the run's key (``runners/core/lowering/errors.py``): nothing in Spark's
error text is unpickled unless the run's own executors signed it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from sparkbeam.errors import hide_engine_frames
from sparkbeam.runners.core.lowering.errors import (
    UserCodeError,
    add_note,
    rebuild_user_error,
    user_error_of,
)
from sparkbeam.runners.spark.spark_log import current_log

__all__ = ["SparkTaskError", "user_errors"]

#: The last line of a Python worker's traceback inside Spark's error text.
_WORKER_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit|Interrupt)): (.*)$", re.MULTILINE)


class SparkTaskError(RuntimeError):
    """A Spark task failed outside user code (in sparkbeam or Spark); the message has the
    Python worker's exception, Spark's log the rest."""


@contextlib.contextmanager
def user_errors(key: bytes) -> Iterator[None]:
    """Re-raise a failure inside a Spark job as the user's exception.

    Spark reports a Python worker's exception as text inside a Py4J error; the worker put
    the pickled original there (``UserCodeError``), signed with the run's ``key``, so the
    user sees their exception, with a note naming the transform and the line that applied
    it, not a Py4J trace. A stage the driver ran itself raises its ``UserCodeError`` here
    as it is.
    """
    try:
        yield
    except Exception as failure:
        log = current_log()
        if isinstance(failure, UserCodeError):
            original: BaseException | None = user_error_of(failure)
        else:
            original = rebuild_user_error(str(failure), key)
        if original is None:
            original = _worker_failure(failure)
            if original is None or log.verbose:
                raise
        note = log.note()
        if note is not None:
            add_note(original, note)
        if log.verbose:
            raise original from failure
        raise hide_engine_frames(original) from None


def _worker_failure(failure: Exception) -> SparkTaskError | None:
    """A short error for a Python worker's failure that is not the user's, or None if the
    failure did not come from a Python worker."""
    text = str(failure)
    if "PythonException" not in text and type(failure).__name__ != "PythonException":
        return None
    found = _WORKER_EXCEPTION.findall(text)
    if not found:
        return None
    kind, message = found[-1]
    msg = f"a Spark task failed: {kind}: {message}"
    return SparkTaskError(msg)
