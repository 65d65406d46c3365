"""Pipeline options, from command-line flags or keywords, with Beam's names and views.

>>> opts = PipelineOptions(["--streaming", "--spark_master=local[2]"])
>>> opts.view_as(StandardOptions).streaming
True

An unknown flag is an error (Beam only warns): a misspelt ``--streamin`` must not
silently run a batch pipeline. Beam flags that have no meaning on Spark are accepted
and listed in ``IGNORED_BEAM_OPTIONS``. ``--help`` (or ``-h``) among the flags prints
every option, grouped, with its default, and exits; ``display_data()`` gives the
settings in effect.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import IO, Any

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


def _positive_float(text: Any) -> float:
    value = float(text)
    if not value > 0:  # NaN too
        msg = f"expected a positive number, got {text!r}"
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
    group: str = "standard"  # where --help lists it (_GROUPS)
    metavar: str | None = None  # --help's name for the value (default: the name's last word)
    default_text: str | None = None  # --help's words for the default, when its value says little


_OPTIONS: dict[str, _Option] = {}

#: --help's sections, in order: option group -> title
_GROUPS = {
    "standard": "Standard options",
    "spark": "Spark options",
    "streaming": "Streaming options (unbounded sources, --streaming)",
    "beam": "Accepted for compatibility with Beam (no effect on Spark)",
}

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
        flags = list(flags or [])
        if "--help" in flags or "-h" in flags:
            print(self.format_help(), end="")
            raise SystemExit(0)
        values: dict[str, Any] = {}
        for name, value in kwargs.items():
            _set(values, name, value, source="keyword")
        for name, value in _parse_flags(flags):
            _set(values, name, value, source="flag")
        object.__setattr__(self, "_values", values)

    @staticmethod
    def format_help(width: int | None = None) -> str:
        """Every option, grouped (standard, Spark, streaming, Beam's accepted ones), with its
        meaning and default: what ``--help`` prints."""
        width = width or min(100, shutil.get_terminal_size((100, 24)).columns)
        out = [
            "sparkbeam pipeline options (--name=value or --name value; a flag is --name or --no_name):",
        ]
        for group, title in _GROUPS.items():
            out += ["", f"{title}:"]
            for option in _OPTIONS.values():
                if option.group != group:
                    continue
                if option.is_flag:
                    usage = f"--[no_]{option.name}"
                else:
                    usage = f"--{option.name} {option.metavar or option.name.split('_')[-1].upper()}"
                text = f"{option.help} (default: {_describe_default(option)})"
                out.append(f"  {usage}")
                out += textwrap.wrap(
                    text, width, initial_indent=" " * 6, subsequent_indent=" " * 6, break_on_hyphens=False
                )
        return "\n".join(out) + "\n"

    @classmethod
    def print_help(cls, file: IO[str] | None = None) -> None:
        print(cls.format_help(), end="", file=file or sys.stdout)

    def display_data(self) -> dict[str, Any]:
        """The settings in effect, option by option: those given, and every default (Beam's
        lists only those given)."""
        return self.get_all_options()

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


def _describe_default(option: _Option) -> str:
    if option.default_text is not None:
        return option.default_text
    if option.is_flag:
        return "on" if option.default else "off"
    if option.repeated:
        return "none"
    return "none" if option.default is None else str(option.default)


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
        _Option("runner", str, None, "the runner; Beam's local runner names (DirectRunner, ...) map to SparkRunner",
                default_text="SparkRunner"),
        _Option("streaming", _to_bool, False,
                "run as a stream of steps (micro-batches) even when every input is bounded", is_flag=True),
    )


class SparkRunnerOptions(PipelineOptions):
    _names = _define(
        _Option("spark_master", str, None,
                "Spark master URL (spark://host:7077, local-cluster[2,1,1024], ...)", group="spark",
                metavar="MASTER",
                default_text="the master spark-submit was given, else an embedded local[*] Spark that the runner starts"),
        _Option("spark_remote", str, None,
                "a Spark Connect server (sc://host:port): the pipeline runs through Spark Connect "
                "(pip install 'sparkbeam[connect]'); Spark's SPARK_REMOTE does the same",
                group="spark", metavar="URL",
                default_text="SPARK_REMOTE, else none (a classic session)"),
        _Option("spark_conf", str, (), "an extra Spark setting (repeatable)", repeated=True,
                group="spark", metavar="KEY=VALUE"),
        _Option("state_partitions", _positive_int, None, "partitions of keyed state and shuffles",
                group="spark", default_text="Spark's default parallelism"),
        _Option("overlapping_window_rule", _to_bool, True,
                "stamp panes of overlapping (sliding) windows no earlier than the end of the previous "
                "window; --no_overlapping_window_rule gives current Beam's timestamps", is_flag=True),
        _Option("sql_plans", _to_bool, True,
                "run batch aggregations of schema'd elements (Select, GroupBy.aggregate_field with "
                "count, sum, mean, min, max) as Spark SQL plans; --no_sql_plans keeps the general path",
                is_flag=True),
        _Option("checkpoint_dir", str, None,
                "where a real stream keeps its write-ahead log, journal and checkpoints; a run "
                "started again with it resumes", group="streaming",
                default_text="a temporary directory, removed at the end"),
        _Option("checkpoint_key_file", str, None,
                "the key (64 hex digits, mode 0600) that authenticates what a stream reads back "
                "from --checkpoint_dir, the same wherever it resumes", group="streaming", metavar="PATH",
                default_text="$SPARKBEAM_CHECKPOINT_KEY_FILE, else ~/.config/sparkbeam/checkpoint-key"),
        _Option("file_urls_through_hadoop", _to_bool, False,
                "serve file:// URLs (checkpoints, write-ahead logs, committing output, matching "
                "inputs on the driver) through Hadoop's FileSystem API, as hdfs://, s3a:// and "
                "gs:// always are; plain paths stay with Python's os", is_flag=True, group="spark"),
        _Option("overwrite_output", _to_bool, False,
                "let a stream delete the step folders (prefix-step-N/) of another run under its "
                "file sinks' prefixes before its first step, instead of refusing to start",
                is_flag=True, group="streaming"),
        _Option("checkpoint_interval", _positive_int, 10, "write a checkpoint every N steps",
                group="streaming", metavar="N"),
        _Option("step_interval", _non_negative_float, 1.0,
                "seconds between micro-batches of a real (unbounded) stream", group="streaming",
                metavar="SECONDS"),
        _Option("max_steps", _positive_int, None, "stop a streaming run after N steps", group="streaming",
                metavar="N", default_text="no limit"),
        _Option("block_on_run", _to_bool, True,
                "run() waits for the end of the run (as Beam Java's --blockOnRun); with "
                "--no_block_on_run it returns a RUNNING result at once, to wait for with "
                "wait_until_finish(duration) or stop with cancel()", is_flag=True),
        _Option("timeline_log", str, None,
                "append every stage's watermarks to this file as JSON lines, step by step, "
                "to follow a running stream; it keeps the history that memory does not",
                group="streaming", metavar="PATH"),
        _Option("timeline_retention_steps", _positive_int, DEFAULT_TIMELINE_RETENTION_STEPS,
                "in a stream, keep the watermark timeline and captured emissions of only the "
                "last N steps in memory and in checkpoints (the full history goes to "
                "--timeline_log and to sparkbeam.capture(pcoll, log=path))", group="streaming",
                metavar="N"),
        _Option("available_now", _to_bool, False,
                "read what real sources hold when the run starts (on an existing checkpoint, what "
                "arrived since its last run), as a stream of steps with checkpoints, then finish "
                "(Spark's Trigger.AvailableNow)", is_flag=True,
                group="streaming"),
        _Option("keep_open", _to_bool, False,
                "with --available_now: when the sources hold nothing more, stop at a checkpoint "
                "without draining, as Spark's Trigger.AvailableNow stops (watermarks stay where "
                "the events put them; open windows, pending timers and state wait in "
                "--checkpoint_dir for the next run); without it the run drains, firing every "
                "window", is_flag=True, group="streaming"),
        _Option("quiet", _to_bool, False,
                "no progress line while a run goes on (a live line on a terminal, a log line "
                "otherwise)", is_flag=True),
        _Option("verbose_errors", _to_bool, False,
                "print Spark's and Py4J's log and full traces on the terminal instead of a "
                "short error that names the log file", is_flag=True),
        _Option("spark_log", str, None,
                "file for Spark's own log (log4j) when the runner starts Spark; a failed run "
                "names it", group="spark", metavar="PATH",
                default_text="a new file in <tmp>/sparkbeam-<uid>/logs, a folder only you can read"),
        _Option("spark_log_max_age_days", _positive_float, 7.0,
                "remove sparkbeam's own Spark log files (those in <tmp>/sparkbeam-<uid>/logs, "
                "not a --spark_log file) last written more than N days ago, when a run starts",
                group="spark", metavar="DAYS"),
    )


class TypeOptions(PipelineOptions):
    _names = _define(
        _Option("allow_unsafe_triggers", _to_bool, False,
                "accepted for Beam compatibility: sparkbeam counts data a finished trigger drops",
                is_flag=True, group="beam"),
        _Option("pipeline_type_check", _to_bool, True,
                "check declared element types when the pipeline is built (--no_pipeline_type_check "
                "turns the checks off)", is_flag=True, group="beam"),
        _Option("runtime_type_check", _to_bool, False,
                "not supported: setting it is refused (types are checked at construction)", is_flag=True, group="beam"),
        _Option("performance_runtime_type_check", _to_bool, False,
                "not supported: setting it is refused (types are checked at construction)", is_flag=True, group="beam"),
    )


class SetupOptions(PipelineOptions):
    _names = _define(
        _Option("save_main_session", _to_bool, False,
                "accepted for Beam compatibility: functions are shipped with cloudpickle", is_flag=True,
                group="beam"),
        _Option("setup_file", str, None,
                "the setup.py or pyproject.toml of a project to install, with its dependencies, "
                "for the executors (see the README's 'Running on a cluster')", group="spark",
                metavar="PATH"),
        _Option("requirements_file", str, None,
                "a pip requirements file whose packages are installed for the executors", group="spark",
                metavar="PATH"),
    )


class DebugOptions(PipelineOptions):
    _names = _define(_Option("experiments", str, (), "free-form experiment names (repeatable)", repeated=True,
                                   metavar="NAME"))


class DirectOptions(PipelineOptions):
    _names = _define(
        _Option("direct_num_workers", int, 1, "accepted for Beam compatibility", group="beam"),
        _Option("direct_running_mode", str, "in_memory", "accepted for Beam compatibility", group="beam"),
    )


class GoogleCloudOptions(PipelineOptions):
    _names = _define(
        _Option("job_name", str, None, "a name for the run (used as the Spark application name)"),
        _Option("temp_location", str, None, "accepted for Beam compatibility", group="beam"),
        _Option("project", str, None, "accepted for Beam compatibility", group="beam"),
    )


IGNORED_BEAM_OPTIONS = (
    "allow_unsafe_triggers", "save_main_session",
    "direct_num_workers", "direct_running_mode",
    "temp_location", "project",
)


# Beam's names this module lacks say they are not supported (sparkbeam.beam_surface).
__getattr__ = module_getattr(__name__, "apache_beam.options.pipeline_options")
