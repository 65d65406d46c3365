"""Spark failures back into the user's own exceptions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sparkbeam.runners.core.errors import rebuild_user_error

__all__ = ["user_errors"]


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Re-raise a failure of user code inside a Spark job as the user's exception.

    Spark reports a Python worker's exception as text inside a Py4J error; the worker put
    the pickled original there (``UserCodeError``), so the user sees their exception, with
    a note naming the transform and the line that applied it, not a Py4J trace.
    """
    try:
        yield
    except Exception as failure:
        original = rebuild_user_error(str(failure))
        if original is None:
            raise
        raise original from None
