"""Pipeline options, from command-line flags or keywords, with Beam's names and views.

>>> opts = PipelineOptions(["--streaming", "--spark_master=local[2]"])
>>> opts.view_as(StandardOptions).streaming
True

An unknown flag is an error (Beam only warns): a misspelt ``--streamin`` must not
silently run a batch pipeline. Beam flags that have no meaning on Spark are accepted
and listed in ``IGNORED_BEAM_OPTIONS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from sparkbeam.beam_surface import module_getattr

__all__ = [
    "DEFAULT_TIMELINE_RETENTION_STEPS",
    "DebugOptions",
    "DirectOptions",
    "GoogleCloudOptions",
    "PipelineOptions",
    "SetupOptions",
    "SparkRunnerOptions",
    "StandardOptions",
    "TypeOptions",
]


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"true", "1", "yes", "on"}:
        return True
    if lowered in {"false", "0", "no", "off"}:
        return False
    msg = f"expected true or false, got {text!r}"
    raise ValueError(msg)


def _to_bool(value: Any) -> bool:
    return value if isinstance(value, bool) else _parse_bool(str(value))


def _positive_int(text: Any) -> int:
    value = int(text)
    if value < 1:
        msg = f"expected a positive integer, got {text!r}"
        raise ValueError(msg)
    return value


def _non_negative_float(text: Any) -> float:
    value = float(text)
    if value < 0:
        msg = f"expected a non-negative number, got {text!r}"
        raise ValueError(msg)
    return value


@attrs.frozen
class _Option:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    is_flag: bool = False  # a bare --name means True
    repeated: bool = False  # --name may be given several times; values collect in a list


_OPTIONS: dict[str, _Option] = {}

#: Steps of timeline and captured emissions a stream keeps in memory (--timeline_retention_steps).
DEFAULT_TIMELINE_RETENTION_STEPS = 1000


def _define(*options: _Option) -> tuple[str, ...]:
    for option in options:
        _OPTIONS[option.name] = option
    return tuple(option.name for option in options)


class PipelineOptions:
    """All options of a pipeline. ``view_as(SomeOptions)`` gives a typed view of the same values."""

    _names: tuple[str, ...] = ()

    def __init__(self, flags: Sequence[str] | None = None, **kwargs: Any) -> None:
        values: dict[str, Any] = {}
        for name, value in kwargs.items():
            _set(values, name, value, source="keyword")
        for name, value in _parse_flags(list(flags or [])):
            _set(values, name, value, source="flag")
        object.__setattr__(self, "_values", values)

    @classmethod
    def from_dictionary(cls, options: dict[str, Any]) -> PipelineOptions:
        return cls(**options)

    def view_as(self, cls: type[PipelineOptions]) -> Any:
        view = object.__new__(cls)
        object.__setattr__(view, "_values", self._values)
        return view

    def get_all_options(
        self,
        drop_default: bool = False,
        add_extra_args_fn: Callable[..., Any] | None = None,
        retain_unknown_options: bool = False,
        display_warnings: bool = False,
        current_only: bool = False,
    ) -> dict[str, Any]:
        """Every option's value (``drop_default``: only those set; ``current_only``: only
        this view's). Unknown options are errors when given, so none are retained."""
        if add_extra_args_fn is not None:
            msg = "PipelineOptions.get_all_options(add_extra_args_fn=) is not supported by sparkbeam: options are not argparse-based"
            raise NotImplementedError(msg)
        names = type(self)._names if current_only and type(self)._names else tuple(_OPTIONS)
        if drop_default:
            return {name: value for name, value in self._values.items() if name in names}
        everything = {name: _default(_OPTIONS[name]) for name in names}
        everything.update((name, value) for name, value in self._values.items() if name in names)
        return everything

    def __getattr__(self, name: str) -> Any:
        option = _OPTIONS.get(name)
        if option is None:
            raise AttributeError(f"no pipeline option named {name!r}")
        return self._values.get(name, _default(option))

    def __setattr__(self, name: str, value: Any) -> None:
        _set(self._values, name, value, source="attribute")

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self._values.items()))
        return f"{type(self).__name__}({shown})"


def _default(option: _Option) -> Any:
    return list(option.default) if option.repeated else option.default


def _set(values: dict[str, Any], name: str, value: Any, *, source: str) -> None:
    option = _OPTIONS.get(name)
    if option is None:
        msg = f"unknown pipeline option {name!r} (given as a {source}); known options: {', '.join(sorted(_OPTIONS))}"
        raise ValueError(msg)
    try:
        if value is None:
            parsed = None
        elif option.repeated:
            items = value if isinstance(value, (list, tuple)) else [value]
            parsed = [*values.get(name, []), *(option.parse(item) for item in items)]
        else:
            parsed = option.parse(value)
    except (TypeError, ValueError) as error:
        msg = f"pipeline option {name!r}: {error}"
        raise ValueError(msg) from None
    values[name] = parsed


def _parse_flags(flags: list[str]) -> list[tuple[str, Any]]:
    parsed: list[tuple[str, Any]] = []
    index = 0
    while index < len(flags):
        flag = flags[index]
        index += 1
        if not flag.startswith("--"):
            msg = f"unexpected argument {flag!r}: pipeline options look like --name=value"
            raise ValueError(msg)
        name, has_value, value = flag[2:].partition("=")
        name = name.replace("-", "_")
        negated = name.startswith("no_") and name[3:] in _OPTIONS and _OPTIONS[name[3:]].is_flag
        if negated and not has_value:
            parsed.append((name[3:], False))
            continue
        option = _OPTIONS.get(name)
        if option is None:
            msg = f"unknown pipeline option --{name}; known options: {', '.join(sorted(_OPTIONS))}"
            raise ValueError(msg)
        if not has_value:
            if option.is_flag:
                parsed.append((name, True))
                continue
            if index >= len(flags) or flags[index].startswith("--"):
                msg = f"pipeline option --{name} needs a value"
                raise ValueError(msg)
            value = flags[index]
            index += 1
        parsed.append((name, _parse_bool(value) if option.is_flag else value))
    return parsed


class StandardOptions(PipelineOptions):
    _names = _define(
        _Option("runner", str, None, "SparkRunner (the default); Beam's local runner names map to it"),
        _Option("streaming", _to_bool, False,
                "run as a stream of steps (micro-batches) even when every input is bounded", is_flag=True),
    )


class SparkRunnerOptions(PipelineOptions):
    _names = _define(
        _Option("spark_master", str, "local[*]",
                "Spark master URL; the default starts an embedded local[*] Spark"),
        _Option("spark_conf", str, (), "extra Spark setting key=value (repeatable)", repeated=True),
        _Option("state_partitions", _positive_int, None,
                "partitions of keyed state and shuffles (default: Spark's default parallelism)"),
        _Option("overlapping_window_rule", _to_bool, True,
                "stamp panes of overlapping (sliding) windows no earlier than the end of the previous "
                "window; --no_overlapping_window_rule gives current Beam's timestamps", is_flag=True),
        _Option("checkpoint_dir", str, None, "directory for streaming checkpoints"),
        _Option("checkpoint_interval", _positive_int, 10, "write a checkpoint every N steps"),
        _Option("step_interval", _non_negative_float, 1.0,
                "seconds between micro-batches of a real (unbounded) stream"),
        _Option("max_steps", _positive_int, None, "stop a streaming run after N steps"),
        _Option("block_on_run", _to_bool, True,
                "run() waits for the end of the run (as Beam Java's --blockOnRun); with "
                "--no_block_on_run it returns a RUNNING result at once, to wait for with "
                "wait_until_finish(duration) or stop with cancel()", is_flag=True),
        _Option("timeline_log", str, None,
                "append every stage's watermarks to this file as JSON lines, step by step, "
                "to follow a running stream; it keeps the history that memory does not"),
        _Option("timeline_retention_steps", _positive_int, DEFAULT_TIMELINE_RETENTION_STEPS,
                "in a stream, keep the watermark timeline and captured emissions of only the "
                "last N steps in memory and in checkpoints (the full history goes to "
                "--timeline_log and to sparkbeam.capture(pcoll, log=path))"),
        _Option("available_now", _to_bool, False,
                "read what real sources hold when the run starts, as a stream of steps with "
                "checkpoints, then finish (Spark's Trigger.AvailableNow)", is_flag=True),
    )


class TypeOptions(PipelineOptions):
    _names = _define(
        _Option("allow_unsafe_triggers", _to_bool, False,
                "accepted for Beam compatibility: sparkbeam counts data a finished trigger drops",
                is_flag=True),
        _Option("pipeline_type_check", _to_bool, True,
                "check declared element types when the pipeline is built (--no_pipeline_type_check "
                "turns the checks off)", is_flag=True),
        _Option("runtime_type_check", _to_bool, False,
                "not supported: setting it is refused (types are checked at construction)", is_flag=True),
        _Option("performance_runtime_type_check", _to_bool, False,
                "not supported: setting it is refused (types are checked at construction)", is_flag=True),
    )


class SetupOptions(PipelineOptions):
    _names = _define(
        _Option("save_main_session", _to_bool, False,
                "accepted for Beam compatibility: functions are shipped with cloudpickle", is_flag=True),
        _Option("setup_file", str, None,
                "the setup.py or pyproject.toml of a project to install, with its dependencies, "
                "for the executors (see the README's 'Running on a cluster')"),
        _Option("requirements_file", str, None,
                "a pip requirements file whose packages are installed for the executors"),
    )


class DebugOptions(PipelineOptions):
    _names = _define(_Option("experiments", str, (), "free-form experiment names", repeated=True))


class DirectOptions(PipelineOptions):
    _names = _define(
        _Option("direct_num_workers", int, 1, "accepted for Beam compatibility"),
        _Option("direct_running_mode", str, "in_memory", "accepted for Beam compatibility"),
    )


class GoogleCloudOptions(PipelineOptions):
    _names = _define(
        _Option("job_name", str, None, "a name for the run (used as the Spark application name)"),
        _Option("temp_location", str, None, "accepted for Beam compatibility"),
        _Option("project", str, None, "accepted for Beam compatibility"),
    )


IGNORED_BEAM_OPTIONS = (
    "allow_unsafe_triggers", "save_main_session",
    "direct_num_workers", "direct_running_mode",
    "temp_location", "project",
)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.options.pipeline_options")
