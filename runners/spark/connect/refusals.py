"""What the Spark Connect backend does not run yet, refused before the run.

Each refusal names the transform (its label and where it was applied) or the option, says
"not yet under Spark Connect", and what to do instead: run on a classic Spark session.
What is refused is read off the backend's registrations (``CONNECT.sources``, its
strategies) and the plan, never kept as a list of its own.
"""

from __future__ import annotations

from sparkbeam.io import commits
from sparkbeam.runners.core.elements.execution import Role, keyed_strategy, kind_of
from sparkbeam.runners.core.lowering.errors import UnsupportedError
from sparkbeam.runners.core.lowering.ops import Op, WriteTextOp
from sparkbeam.runners.core.lowering.settings import RunMode, RunSettings
from sparkbeam.runners.core.plan.plan import StagePlan
from sparkbeam.runners.spark.connect.backend import CONNECT
from sparkbeam.runners.spark.sinks import step_files

__all__ = ["refuse_what_connect_cannot_run"]

_INSTEAD = "run it on a classic Spark session (without --spark_remote or SPARK_REMOTE)"

#: options a Connect run cannot honour yet: (setting, why)
_OPTIONS = (
    ("file_urls_through_hadoop", "--file_urls_through_hadoop", "the client has no Hadoop file system"),
)


def _where(op: Op) -> str:
    return f"'{op.label}' (applied at {op.location})"


#: the real sources a Connect run reads (``stream_intake.py``): a watched folder of files;
#: Kafka (checked through the server before the first step, ``kafka.py``); Spark's ``rate``
#: and ``socket`` sources, whose queries run on the server as a classic run's on its driver
#: (a socket's host is reached from the server, which a stream needs on this machine)
_FILE_FORMATS = ("text", "csv", "json", "parquet")
_SERVER_FORMATS = ("kafka", "rate", "socket")


def _refuse_stream_source(op: Op) -> None:
    """A real source Connect does not read yet: a folder that is not the server's own (a
    URL of another file system), or a format it has no query for."""
    spec = getattr(op, "spec", None)
    form = getattr(spec, "format", None)
    path = getattr(spec, "path", None)
    if form in _SERVER_FORMATS:
        return
    if form not in _FILE_FORMATS or path is None:
        msg = (
            f"{_where(op)}: a stream of a {form} source is not yet under Spark Connect, which reads watched "
            f"folders of files ({', '.join(_FILE_FORMATS)}), {', '.join(_SERVER_FORMATS)} as streams; {_INSTEAD}"
        )
        raise UnsupportedError(msg)
    if "://" in path and not path.startswith("file:"):
        msg = (
            f"{_where(op)}: a stream of {path!r} is not yet under Spark Connect, which watches the server's local "
            f"folders (a path or file://); {_INSTEAD}"
        )
        raise UnsupportedError(msg)


def refuse_what_connect_cannot_run(plan: StagePlan, mode: RunMode, settings: RunSettings) -> None:
    """Raise ``UnsupportedError`` for the first thing of the run the Connect backend does
    not run yet (see the module docs)."""
    for name, option, why in _OPTIONS:
        if getattr(settings, name):
            msg = f"{option} is not yet under Spark Connect ({why}); drop it, or {_INSTEAD}"
            raise UnsupportedError(msg)
    if mode is RunMode.STREAMING:
        for stage in plan.stages:
            head = stage.head
            if head is not None and kind_of(head).role is Role.SOURCE and kind_of(head).endless:
                _refuse_stream_source(head)
        if settings.checkpoint_dir is not None and commits.local_path(commits.absolute(settings.checkpoint_dir)) is None:
            msg = (
                f"--checkpoint_dir={settings.checkpoint_dir}: a stream's checkpoints under Spark Connect are written by "
                "the client (journal, manifests, lease) and by the server's Python tasks (keyed state, write-ahead log) "
                "as local files of this machine, so the directory must be a local path or file:// URL (not yet hdfs://, "
                f"s3a://...); give a local directory, or {_INSTEAD}"
            )
            raise UnsupportedError(msg)
    for stage in plan.stages:
        head = stage.head
        if head is not None:
            kind = kind_of(head)
            if kind.role is Role.SOURCE and not CONNECT.sources.serves(head):
                msg = f"{_where(head)}: {type(head).__name__} is not yet under Spark Connect (it reads {', '.join(CONNECT.sources.names())}); {_INSTEAD}"
                raise UnsupportedError(msg)
            if kind.role is Role.GROUPING and keyed_strategy(kind) not in CONNECT.strategies:
                what = "a stateful DoFn" if kind.user_state else type(head).__name__
                msg = f"{_where(head)}: {what} is not yet under Spark Connect; {_INSTEAD}"
                raise UnsupportedError(msg)
        for sink in stage.sinks:
            if not CONNECT.sinks.serves(sink):
                msg = (
                    f"{_where(sink)}: {type(sink).__name__} (a sink) is not yet under Spark Connect (it writes "
                    f"{', '.join(CONNECT.sinks.names())}); capture the output instead, or {_INSTEAD}"
                )
                raise UnsupportedError(msg)
            files = None if isinstance(sink, WriteTextOp) else step_files(sink)
            if files is None and not isinstance(sink, WriteTextOp):
                continue  # a sink of no files (Kafka): its brokers are checked through the server
            prefix = sink.sink.file_path_prefix if files is None else files.prefix
            if "://" in prefix and not prefix.startswith("file://"):
                what = "WriteToText" if isinstance(sink, WriteTextOp) else "a file sink"
                msg = (
                    f"{_where(sink)}: {what} to {prefix!r} is not yet under Spark Connect, which writes the server's "
                    f"local files (a path or file://) with its Python workers; {_INSTEAD}"
                )
                raise UnsupportedError(msg)
