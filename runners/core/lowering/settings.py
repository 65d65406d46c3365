"""A run's settings: one frozen, typed value built once from the pipeline options.

The runner reads its options once, here (``RunSettings.from_options``), and checks each
value where it is read: a value of the wrong type or out of range is refused naming the
option (``--state_partitions``) and what it takes. Past that point no code reads a
string-keyed dict of options: it reads ``settings.state_partitions``, which mypy checks.
``RunMode`` says whether a run is one batch step or a stream of steps.

>>> settings = RunSettings.from_options({"state_partitions": 4, "streaming": True})
>>> settings.state_partitions, settings.checkpoint_interval
(4, 10)
>>> RunSettings.from_options({"checkpoint_interval": 0})
Traceback (most recent call last):
...
ValueError: pipeline option --checkpoint_interval: expected a positive integer, got 0
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

__all__ = ["RunMode", "RunSettings"]


class RunMode(enum.Enum):
    """One step from -inf to +inf (bounded input), or a stream of steps."""

    BATCH = "batch"
    STREAMING = "streaming"

    @property
    def is_batch(self) -> bool:
        return self is RunMode.BATCH


def _problem(option: str, expected: str, value: Any) -> ValueError:
    return ValueError(f"pipeline option --{option}: expected {expected}, got {value!r}")


def _flag(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _problem(option, "true or false", value)
    return value


def _text(option: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _problem(option, "a string", value)
    return value


def _count(option: str, value: Any, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _problem(option, "a positive integer", value)
    return value


def _seconds(option: str, value: Any, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0 or (positive and value == 0):
        raise _problem(option, "a positive number" if positive else "a non-negative number", value)
    return float(value)


#: Spark Connect's connection string: sc://host[:port][/;name=value;...] (Spark's own
#: client parses the parameters; a user or token there may be a secret, so never shown)
_REMOTE = re.compile(r"sc://(\[[0-9A-Fa-f:.]+\]|[^/:;\[\]\s]+)(:[0-9]{1,5})?(/(;[^;=/\s]+=[^;\s]*)*)?")


def _remote(option: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _problem(option, "a Spark Connect URL sc://host:port", value)
    if not _REMOTE.fullmatch(value):
        # Its parameters may hold a token: only what precedes them is shown.
        shown = value.split(";", 1)[0] + (";..." if ";" in value else "")
        msg = f"pipeline option --{option}: expected a Spark Connect URL sc://host:port (optionally /;name=value...), got {shown!r}"
        raise ValueError(msg)
    return value


def _texts(option: str, value: Any) -> tuple[str, ...]:
    items = tuple(value or ())
    if not all(isinstance(item, str) for item in items):
        raise _problem(option, "strings", value)
    return items


#: each setting: its option's name -> how its value is checked and converted
_READERS: dict[str, Callable[[str, Any], Any]] = {
    "streaming": _flag,
    "spark_master": _text,
    "spark_remote": _remote,
    "spark_conf": _texts,
    "state_partitions": lambda option, value: _count(option, value, optional=True),
    "overlapping_window_rule": _flag,
    "sql_plans": _flag,
    "checkpoint_dir": _text,
    "checkpoint_key_file": _text,
    "file_urls_through_hadoop": _flag,
    "overwrite_output": _flag,
    "checkpoint_interval": _count,
    "step_interval": lambda option, value: _seconds(option, value, positive=False),
    "max_steps": lambda option, value: _count(option, value, optional=True),
    "block_on_run": _flag,
    "timeline_log": _text,
    "timeline_retention_steps": _count,
    "available_now": _flag,
    "keep_open": _flag,
    "quiet": _flag,
    "verbose_errors": _flag,
    "spark_log": _text,
    "spark_log_max_age_days": lambda option, value: _seconds(option, value, positive=True),
    "requirements_file": _text,
    "setup_file": _text,
    "job_name": _text,
}


@attrs.frozen(kw_only=True)
class RunSettings:
    """What a run of sparkbeam's runner is told by its options (``--help`` says what each
    does). Build it with ``from_options``; the defaults are the options' own."""

    streaming: bool = False
    spark_master: str | None = None
    #: a Spark Connect server (sc://host:port): the run goes through Spark Connect
    spark_remote: str | None = None
    spark_conf: tuple[str, ...] = ()
    state_partitions: int | None = None
    overlapping_window_rule: bool = True
    sql_plans: bool = True
    checkpoint_dir: str | None = None
    checkpoint_key_file: str | None = None
    file_urls_through_hadoop: bool = False
    overwrite_output: bool = False
    checkpoint_interval: int = 10
    step_interval: float = 1.0
    max_steps: int | None = None
    block_on_run: bool = True
    timeline_log: str | None = None
    timeline_retention_steps: int = 1000
    available_now: bool = False
    keep_open: bool = False
    quiet: bool = False
    verbose_errors: bool = False
    spark_log: str | None = None
    spark_log_max_age_days: float = 7.0
    requirements_file: str | None = None
    setup_file: str | None = None
    job_name: str | None = None

    @classmethod
    def from_options(cls, options: Any) -> RunSettings:
        """The settings of ``options``: a ``PipelineOptions``, or the mapping its
        ``get_all_options()`` gives (options it does not name keep their defaults; names
        that are not the runner's settings are not read)."""
        values: Mapping[str, Any] = options if isinstance(options, Mapping) else options.get_all_options()
        chosen = {name: read(name, values[name]) for name, read in _READERS.items() if name in values}
        settings = cls(**chosen)
        settings.check_together()
        return settings

    def check_together(self) -> None:
        """Refuse settings that make no sense together, naming the options."""
        if self.spark_remote and self.spark_master:
            msg = "--spark_remote and --spark_master both name where Spark runs: give one (a Connect server has its own master)"
            raise ValueError(msg)
        if self.keep_open and not self.available_now:
            msg = "--keep_open stops a run when its sources hold nothing more: give --available_now as well"
            raise ValueError(msg)
        if self.keep_open and not self.checkpoint_dir:
            msg = "--keep_open leaves open windows, timers and state for the next run in the checkpoint: give --checkpoint_dir=DIR"
            raise ValueError(msg)

    def mode(self, *, unbounded_input: bool) -> RunMode:
        """A stream when ``--streaming`` asks for one or some input never ends."""
        return RunMode.STREAMING if self.streaming or unbounded_input else RunMode.BATCH
