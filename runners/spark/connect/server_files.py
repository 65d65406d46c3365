"""A stream's directories on a Spark Connect server of another machine, reached through it.

A stream of real sources keeps its write-ahead log, journal, checkpoints, lease and its
sinks' owner marks in directories that the server's tasks write as their local files
(``stream_intake.py``, ``state_files.py``, ``writes.py``) and that the client lists, reads
and writes between steps (``intake.py``, ``checkpoints.py``, ``streaming.py``,
``lease.py``, ``output_owners.py``, all through ``sparkbeam.io.commits``). With a server
on this machine both reach them as the same local files. With a server elsewhere (a
remote Connect server, Databricks' serverless or shared compute, where the directory is a
path of the server's such as ``/dbfs/...`` or ``/Volumes/...``) the client cannot, so:

- ``ServerFileSystem`` is a ``sparkbeam.io.filesystem.FileSystem`` whose every operation is
  one small job on the server: a one-row frame whose ``mapInArrow`` task runs the
  operations there with ``sparkbeam.io.commits`` on the plain path (so with its atomic
  renames, fsyncs, create-if-absent by hard link and private modes), and answers in Arrow
  columns of booleans, numbers, strings and bytes. Nothing is unpickled on the client: the
  answers are data, and what a file holds comes back as bytes for the caller to parse (the
  JSON files as data, the sealed ones checked with the checkpoint key first). Operations
  that go together run in one job (``write_bytes``: written, synced and renamed there;
  ``commit_directory``: both renames and the removal), and within ``commits.batched``
  those that answer nothing (writes, removals) wait for the next that answers something,
  or the block's end, and go in its job (a heartbeat written and the one before removed;
  a source's drop threshold written and the log listed).
- ``commits.serve`` routes the plain paths under the stream's directories (the checkpoint
  directory, or a temporary one made on the server, and each file sink's folder) to it,
  for this process only: the server's tasks are handed the very same paths and write them
  as local files. So no path is rewritten anywhere, and the journal, manifests and log
  name the paths the server sees.

``server_is_elsewhere`` and ``server_sees_client_files`` decide: a server named by a host
of another machine, or one that cannot read a file the client has just written in its own
temporary folder (a tunnel to another machine, a container), gets this; a server on this
machine keeps direct file access, which costs no job per operation.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import posixpath
import secrets
import tempfile
import threading
from collections.abc import Iterable, Iterator
from typing import IO, Any

from sparkbeam.io import commits
from sparkbeam.io.filesystem import CompressionTypes, FileMetadata, FileSystem, compressed_stream
from sparkbeam.runners.spark.connect.session import ConnectTarget, host_port, made_active

__all__ = ["ServerFileSystem", "server_is_elsewhere", "server_sees_client_files"]

#: what each operation answers, one row per operation (``_answer``)
ANSWER = "error string, flag boolean, names array<string>, numbers array<double>, data binary"
#: the errors that come back as themselves (any other as a RuntimeError naming it)
_ERRORS: dict[str, type[OSError]] = {
    cls.__name__: cls
    for cls in (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError, OSError)
}


def server_is_elsewhere(target: ConnectTarget) -> bool:
    """Whether ``target`` names a server on a host other than this machine's loopback (known
    before the server is reached; a session the user made is asked, ``server_sees_client_files``)."""
    if target.url is None:
        return False
    host, _ = host_port(target.url)
    return host not in ("localhost", "127.0.0.1", "::1")


def server_sees_client_files(session: Any) -> bool:
    """Whether the server's Python workers read, at the same path, a file this process has
    just written with a random token (one job): they then share this machine's files."""
    token = secrets.token_hex(16)
    descriptor, path = tempfile.mkstemp(prefix="sparkbeam-probe-")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token)
        os.chmod(path, 0o644)  # the server's workers may run as another user of this machine
        try:
            found = ServerFileSystem(session).run(("read_bytes", path))[0]
        except OSError:
            return False
        return found["data"] == token.encode()
    finally:
        os.remove(path)


# -- on the server ------------------------------------------------------------------------


def _stat(path: str) -> dict[str, Any]:
    found = os.stat(path)
    return {"numbers": [float(found.st_size), found.st_mtime]}


def _walk(directory: str) -> dict[str, Any]:
    names, numbers = [], []
    for folder, _, files in os.walk(directory):
        for name in files:
            found = os.stat(os.path.join(folder, name))
            names.append(os.path.join(folder, name))
            numbers += [float(found.st_size), found.st_mtime]
    return {"names": names, "numbers": numbers}


#: the operations a job runs: each takes plain arguments and answers a dict of ``ANSWER``'s columns
_OPERATIONS: dict[str, Any] = {
    "exists": lambda path: {"flag": commits.exists(path)},
    "is_directory": lambda path: {"flag": commits.is_directory(path)},
    "stat": _stat,
    "walk": _walk,
    "list_names": lambda path: {"names": commits.list_names(path)},
    "read_bytes": lambda path: {"data": commits.read_bytes(path)},
    "write_bytes": lambda path, data, private: commits.write_bytes(path, data, private=private),
    "makedirs": lambda path, private: commits.makedirs(path, private=private),
    "remove": lambda path, missing_ok: commits.remove(path, missing_ok=missing_ok),
    "create_new": lambda path, data: {"flag": commits.create_new(path, data)},
    "commit": lambda temporary, final: commits.commit(temporary, final),
    "commit_directory": lambda new_dir, final_dir: commits.commit_directory(new_dir, final_dir),
    "mkdtemp": lambda prefix: {"names": [tempfile.mkdtemp(prefix=prefix)]},
}


def _answer(operation: tuple[Any, ...]) -> dict[str, Any]:
    name, *arguments = operation
    try:
        answered = _OPERATIONS[name](*arguments) or {}
    except OSError as error:
        code = error.errno if error.errno is not None else 0
        said = error.strerror or str(error)
        return {"error": f"{type(error).__name__}\n{code}\n{error.filename or ''}\n{said}"}
    except Exception as error:
        return {"error": f"{type(error).__name__}\n0\n\n{error}"}
    return {"error": None, **answered}


def serve_operations(operations: tuple[tuple[Any, ...], ...], batches: Iterable[Any]) -> Iterator[Any]:
    """The job's task: the operations in order, up to the first that fails (those after it
    are not run: they build on it), one row each."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("error", pa.string()),
            ("flag", pa.bool_()),
            ("names", pa.list_(pa.string())),
            ("numbers", pa.list_(pa.float64())),
            ("data", pa.binary()),
        ]
    )
    for batch in batches:
        if batch.num_rows == 0:
            continue
        rows = []
        for operation in operations:
            rows.append(_answer(operation))
            if rows[-1]["error"] is not None:
                break
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


# -- on the client ------------------------------------------------------------------------


def _raised(error: str, operation: tuple[Any, ...]) -> Exception:
    kind, code, filename, said = error.split("\n", 3)
    cls = _ERRORS.get(kind)
    if cls is not None:
        return cls(int(code) or errno.EIO, f"{said} (on the Spark Connect server)", filename or operation[1])
    return RuntimeError(f"{operation[0]} of {operation[1]} on the Spark Connect server failed: {kind}: {said}")


class _Upload(io.BytesIO):
    """``create``'s stream: its bytes written to the server's file whole when it is closed."""

    def __init__(self, files: ServerFileSystem, path: str) -> None:
        super().__init__()
        self._files = files
        self._path = path

    def close(self) -> None:
        if not self.closed:
            self._files.write_bytes(self._path, self.getvalue())
        super().close()


class ServerFileSystem(FileSystem):
    """The server's own files, each operation a job on it (see the module docs)."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        #: how many jobs this file system ran (its cost: one round trip each)
        self.jobs = 0
        self._lock = threading.Lock()
        self._waiting = threading.local()  # per thread: the operations ``batch`` holds back

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Within it (this thread), operations that answer nothing wait and run in the job
        of the next one that answers something, or in one job at the end (if the block
        did not fail): ``commits.batched``."""
        if getattr(self._waiting, "operations", None) is not None:
            yield  # within an outer batch: that one sends them
            return
        self._waiting.operations = []
        try:
            yield
        except BaseException:
            self._waiting.operations = None
            raise
        waiting, self._waiting.operations = self._waiting.operations, None
        if waiting:
            self.run(*waiting)

    def _later(self, *operation: Any) -> None:
        waiting = getattr(self._waiting, "operations", None)
        if waiting is None:
            self.run(tuple(operation))
        else:
            waiting.append(tuple(operation))

    def run(self, *operations: tuple[Any, ...]) -> list[dict[str, Any]]:
        """Run ``operations`` in one job on the server, in order (after any a batch holds
        back); their answers, or the first error raised as the server met it (a
        FileNotFoundError as such)."""
        waiting = getattr(self._waiting, "operations", None)
        if waiting:
            self._waiting.operations = []
            return self.run(*waiting, *operations)[len(waiting):]
        task = functools.partial(serve_operations, tuple(operations))
        with made_active(self.session):
            answers = self.session.range(0, 1, 1, 1).mapInArrow(task, ANSWER).toArrow().to_pylist()
        with self._lock:
            self.jobs += 1
        for operation, answer in zip(operations, answers):
            if answer["error"] is not None:
                raise _raised(answer["error"], operation)
        if len(answers) != len(operations):
            msg = f"the Spark Connect server answered {len(answers)} of {len(operations)} file operations"
            raise RuntimeError(msg)
        return answers

    def _one(self, *operation: Any) -> dict[str, Any]:
        return self.run(tuple(operation))[0]

    # -- what ``commits`` calls, each one job
    def exists(self, path: str) -> bool:
        return bool(self._one("exists", path)["flag"])

    def exists_all(self, paths: list[str]) -> list[bool]:
        return [bool(answer["flag"]) for answer in self.run(*(("exists", path) for path in paths))]

    def is_directory(self, path: str) -> bool:
        return bool(self._one("is_directory", path)["flag"])

    def list_names(self, path: str) -> list[str]:
        return list(self._one("list_names", path)["names"])

    def read_bytes(self, path: str) -> bytes:
        return bytes(self._one("read_bytes", path)["data"])

    def write_bytes(self, path: str, data: bytes, *, private: bool = False) -> None:
        self._later("write_bytes", path, bytes(data), private)

    def makedirs(self, path: str, private: bool = False) -> None:
        self._later("makedirs", path, private)

    def remove_tree(self, path: str, *, missing_ok: bool = False) -> None:
        self._later("remove", path, missing_ok)

    def create_new(self, path: str, data: bytes) -> bool:
        return bool(self._one("create_new", path, bytes(data))["flag"])

    def replace(self, source: str, destination: str) -> None:
        self._later("commit", source, destination)

    def commit_directory(self, new_dir: str | None, final_dir: str) -> None:
        self._later("commit_directory", new_dir, final_dir)

    def mkdtemp(self, prefix: str) -> str:
        """A new private directory in the server's temporary folder."""
        return str(self._one("mkdtemp", prefix)["names"][0])

    # -- Beam's FileSystem
    def join(self, basepath: str, *paths: str) -> str:
        return posixpath.join(basepath, *paths)

    def split(self, path: str) -> tuple[str, str]:
        return posixpath.split(path)

    def mkdirs(self, path: str) -> None:
        if self.exists(path):
            msg = f"Path {path} already exists."
            raise OSError(msg)
        self.makedirs(path)

    def has_dirs(self) -> bool:
        return True

    def _list(self, dir_or_prefix: str) -> Iterator[FileMetadata]:
        found = self._one("walk", dir_or_prefix.rstrip("/") or "/")
        numbers = found["numbers"]
        for index, path in enumerate(found["names"]):
            yield FileMetadata(path, int(numbers[2 * index]), numbers[2 * index + 1])

    def create(self, path: str, mime_type: str = "application/octet-stream", compression_type: Any = CompressionTypes.AUTO) -> IO[bytes]:
        raw = _Upload(self, path)
        return compressed_stream(raw, "wb", FileSystem._get_compression_type(path, compression_type), path)

    def open(self, path: str, mime_type: str = "application/octet-stream", compression_type: Any = CompressionTypes.AUTO) -> IO[bytes]:
        raw = io.BytesIO(self.read_bytes(path))
        return compressed_stream(raw, "rb", FileSystem._get_compression_type(path, compression_type), path)

    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        for source, destination in zip(source_file_names, destination_file_names):
            self.write_bytes(destination, self.read_bytes(source))

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        self.run(*(("commit", source, destination) for source, destination in zip(source_file_names, destination_file_names)))

    def delete(self, paths: list[str]) -> None:
        self.run(*(("remove", path, False) for path in paths))

    def size(self, path: str) -> int:
        return int(self._one("stat", path)["numbers"][0])

    def last_updated(self, path: str) -> float:
        return float(self._one("stat", path)["numbers"][1])

    def metadata(self, path: str) -> FileMetadata:
        size, modified = self._one("stat", path)["numbers"]
        return FileMetadata(path, int(size), modified)


def serve_stream_directories(files: ServerFileSystem, plan: Any, checkpoint_dir: str | None) -> list[Any]:
    """Route the stream's directories through ``files`` in this process: the checkpoint
    directory (a temporary one is made on the server by ``ConnectStreamRun``) and each file
    sink's folder (its owner mark and step folders, ``output_owners.py``). What stops it."""
    from sparkbeam.runners.spark import sinks

    directories = [] if checkpoint_dir is None else [checkpoint_dir]
    for stage in plan.stages:
        for op in stage.sinks:
            if sinks.writes_files(op):
                directories.append(sinks.prefix_directory(sinks.step_prefix(op)))
    return [commits.serve(directory, files) for directory in dict.fromkeys(directories)]
