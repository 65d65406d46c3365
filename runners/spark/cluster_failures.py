"""A run stopped by its cluster, told in a few lines: the cause and how to resume.

Spark reports an executor lost for good, a master that gave up on the application, a file
the run needs that has gone (a checkpoint store lost or unreachable) or a task that kept
failing for a reason of Spark's, as a ``Py4JJavaError`` whose text is Spark's whole chain of
Java exceptions, 100 to 300 lines of them. None of those is the pipeline's fault, and the
user's next move is the same for all: fix the cluster (or the store), then run again on the
checkpoint directory. ``cluster_failure`` turns such an error into a
``ClusterFailureError`` saying exactly that; a failure of the user's code never reaches it
(``errors.user_errors`` gives the user's own exception first).

>>> error = cluster_failure(RuntimeError("An error occurred while calling o1.collect.\\n"
...     "java.io.FileNotFoundException: File file:/ck/sources/0/wal/0000000003/part-00000 does not exist"),
...     checkpoint_dir="/ck", resume_step=6, java=True)
>>> print(error)
the run stopped: a file it needs is gone: file:/ck/sources/0/wal/0000000003/part-00000, in --checkpoint_dir=/ck (removed, or the file system lost it). This is the cluster's failure, not the pipeline's; once it is fixed, run again with --checkpoint_dir=/ck to resume at step 6 from its last checkpoint
"""

from __future__ import annotations

import re

__all__ = ["ClusterFailureError", "cluster_failure", "is_spark_failure"]


class ClusterFailureError(RuntimeError):
    """The run stopped for a reason of the cluster's (executors, master, file system), not
    the pipeline's; the message names the cause and how to resume."""


_MISSING_FILE = re.compile(r"FileNotFoundException: (?:File )?(\S+?)(?: does not exist| \(No such file or directory\))")
_TASK_FAILED = re.compile(r"Task \S+ in stage \S+ failed (\d+) times?[^:]*: (?:Lost task [^:]*: )?(.*)")
_SPARK_GONE = (
    "SparkContext was shut down",
    "Cannot call methods on a stopped SparkContext",
    "All masters are unresponsive",
    "Master removed our application",
    "Answer from Java side is empty",
    "Error while receiving",
    "An error occurred while trying to connect to the Java server",
)
_UNREACHABLE = re.compile(
    r"((?:java\.net\.)?(?:ConnectException|UnknownHostException|NoRouteToHostException|SocketTimeoutException)[^\n]*"
    r"|(?:java\.nio\.file\.)?AccessDeniedException[^\n]*|Permission denied[^\n]*|No FileSystem for scheme[^\n]*)"
)


def is_spark_failure(failure: BaseException) -> bool:
    """Whether ``failure`` came out of Spark's JVM or the Py4J link to it (not Python code)."""
    names = {kind.__name__ for kind in type(failure).__mro__}
    return bool(names & {"Py4JError", "Py4JJavaError", "Py4JNetworkError"})


def _cause(text: str) -> str:
    """The cause, in a line, from Spark's error text."""
    missing = _MISSING_FILE.search(text)
    if missing:
        return f"a file it needs is gone: {missing.group(1)}"
    if any(marker in text for marker in _SPARK_GONE):
        return "Spark stopped under it (the cluster's master gave up on the application, or Spark's JVM died)"
    if "No space left on device" in text:
        return (
            "a local disk of Spark's is full (No space left on device): the executors' local directories (spark.local.dir, "
            "SPARK_LOCAL_DIRS or the cluster manager's) hold the keyed state that does not fit in memory and the shuffles' "
            "files; give them more room, or the executors more memory"
        )
    unreachable = _UNREACHABLE.search(text)
    if unreachable:
        return f"a file system it writes to cannot be reached: {unreachable.group(1).strip()[:300]}"
    failed = _TASK_FAILED.search(text)
    if failed:
        times, reason = failed.groups()
        if "ExecutorLostFailure" in reason:
            return f"executors were lost faster than Spark replaced them (a task lost its executor {times} times; are any executors left?)"
        return f"a task failed {times} times for a reason of Spark's: {reason.strip()[:300]}"
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    found = [line for line in lines if "Exception:" in line or "Error:" in line]
    return f"Spark failed: {(found[-1] if found else lines[0] if lines else repr(text))[:300]}"


def cluster_failure(
    failure: BaseException, *, checkpoint_dir: str | None, resume_step: int | None, java: bool | None = None
) -> ClusterFailureError | None:
    """``failure`` told as a ``ClusterFailureError`` if it came from Spark (``java``: said
    by the caller, else ``is_spark_failure``), or None. ``checkpoint_dir``: the run's own
    checkpoint directory, if it has one; ``resume_step``: the step its newest checkpoint
    resumes at, if known."""
    if not (is_spark_failure(failure) if java is None else java):
        return None
    text = str(failure)
    if "PythonException" in text:
        return None  # Python code failed (the user's, or a refusal of sparkbeam's): its own error says why
    cause = _cause(text)
    if checkpoint_dir is not None and checkpoint_dir in cause:
        cause += f", in --checkpoint_dir={checkpoint_dir} (removed, or the file system lost it)"
    if checkpoint_dir is not None:
        at = f" at step {resume_step}" if resume_step is not None else ""
        resume = f"run again with --checkpoint_dir={checkpoint_dir} to resume{at} from its last checkpoint"
    else:
        resume = "run it again (a stream given --checkpoint_dir resumes where it stopped)"
    msg = f"the run stopped: {cause}. This is the cluster's failure, not the pipeline's; once it is fixed, {resume}"
    return ClusterFailureError(msg)
