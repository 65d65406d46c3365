"""Where in the user's code a transform was applied, and errors that say so."""

from __future__ import annotations

import ast
import contextlib
import functools
import itertools
import linecache
import sys
from types import FrameType

import attrs

__all__ = [
    "PipelineConstructionError",
    "UserCodeError",
    "UserLocation",
    "caller_location",
    "engine_frames_hidden",
    "hide_engine_frames",
]


@attrs.frozen
class UserLocation:
    """The user's file and line that applied a transform."""

    filename: str
    lineno: int

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


_UNKNOWN = UserLocation("<unknown>", 0)


def caller_location() -> UserLocation:
    """The innermost stack frame outside sparkbeam (and outside Python's own machinery),
    at the line where the transform being applied is written: in a chain spanning lines,
    ``p | Create(...) | "Parse" >> Map(parse)``, the line of ``"Parse" >> Map(parse)``,
    not the line where the statement starts."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "sparkbeam" or module.startswith(("sparkbeam.", "importlib", "contextlib"))):
            return UserLocation(frame.f_code.co_filename, _applying_line(frame))
        frame = frame.f_back  # type: ignore[assignment]
    return _UNKNOWN


def _applying_line(frame: FrameType) -> int:
    """The line of the operand being applied by the frame's current instruction (the right
    side of ``|``, the argument of ``.apply(...)``); the frame's line when the source or
    the instruction's position is unknown (Python 3.10, code without source)."""
    positions_of = getattr(frame.f_code, "co_positions", None)
    if positions_of is None:
        return frame.f_lineno
    try:
        positions = next(itertools.islice(positions_of(), frame.f_lasti // 2, None))
    except StopIteration:
        return frame.f_lineno
    lines = linecache.getlines(frame.f_code.co_filename, frame.f_globals)
    if None in positions or not lines:
        return frame.f_lineno
    return _operand_lines(frame.f_code.co_filename, "".join(lines)).get(positions, frame.f_lineno)


@functools.lru_cache(maxsize=32)
def _operand_lines(filename: str, source: str) -> dict[tuple[int, int, int, int], int]:
    """For each ``a | b`` and call in a source: its position -> the line where ``b`` (the
    call's first argument) starts."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return {}
    found: dict[tuple[int, int, int, int], int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            operand: ast.expr = node.right
        elif isinstance(node, ast.Call) and node.args:
            operand = node.args[0]
        else:
            continue
        key = (node.lineno, node.end_lineno or node.lineno, node.col_offset, node.end_col_offset or 0)
        found[key] = operand.lineno
    return found


class PipelineConstructionError(ValueError):
    """A pipeline that cannot run as written; the message names the transform to fix."""


class UserCodeError(Exception):
    """Wraps nothing: marks the note added to a user's exception raised inside a transform."""


#: Set on an exception of the user's whose traceback, as it leaves ``run()``, should show
#: the user's frames only: the frames of the engine it crossed say nothing to them.
_HIDE_ENGINE_FRAMES = "_sparkbeam_hide_engine_frames"


def hide_engine_frames(error: BaseException) -> BaseException:
    """Mark a failure of user code that the runner rebuilt (its notes say where it was
    raised), so that ``run()`` raises it without the engine's frames."""
    with contextlib.suppress(AttributeError):  # an exception type without a __dict__
        setattr(error, _HIDE_ENGINE_FRAMES, True)
    return error


def engine_frames_hidden(error: BaseException) -> bool:
    """Whether ``run()`` should raise this exception without its traceback so far."""
    return bool(getattr(error, _HIDE_ENGINE_FRAMES, False))


def describe(label: str, location: UserLocation | None) -> str:
    where = f" (applied at {location})" if location and location.lineno else ""
    return f"'{label}'{where}"
