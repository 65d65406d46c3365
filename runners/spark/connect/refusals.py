"""What the Spark Connect backend does not run yet, or cannot, refused before the run.

Each refusal names the transform (its label and where it was applied) or the option, says
"not yet under Spark Connect" (or, for what Connect's API cannot do soundly, why), and
what to do instead: run on a classic Spark session.
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


def refuse_what_connect_cannot_run(plan: StagePlan, mode: RunMode, settings: RunSettings) -> None:
    """Raise ``UnsupportedError`` for the first thing of the run the Connect backend does
    not run yet (see the module docs)."""
    for name, option, why in _OPTIONS:
        if getattr(settings, name):
            msg = f"{option} is not yet under Spark Connect ({why}); drop it, or {_INSTEAD}"
            raise UnsupportedError(msg)
    # Every real source's stream runs (``stream_intake.py``): its query on the server, a watched
    # folder listed and read by the server's Spark on any file system it has (hdfs://...).
    # Its checkpoint directory cannot be on such a file system (README, "Running on Spark Connect").
    checkpoint_dir = settings.checkpoint_dir if mode is RunMode.STREAMING else None
    if checkpoint_dir is not None and commits.local_path(commits.absolute(checkpoint_dir)) is None:
        msg = (
            f"--checkpoint_dir={checkpoint_dir}: under Spark Connect a stream's checkpoint directory must be a "
            "local path or file:// URL as the server sees it (on another machine the client reaches it through the server). Its "
            "lease (one run at a time: an "
            "atomic create-if-absent), manifests (an atomic rename), journal and log listing are the client's, which has "
            "no Hadoop file system, and its keyed state and write-ahead log are written by the server's Python tasks, "
            "which have none either; Connect's DataFrame reads and writes, the client's only way to the server's file "
            f"systems, offer neither atomic step. Give a local directory, or {_INSTEAD}"
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
