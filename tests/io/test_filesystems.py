"""FileSystems on local files, beside apache_beam's own FileSystems on the same files; the
registry by scheme, and a registered file system serving sparkbeam's file transforms."""

from __future__ import annotations

import gzip
import io
import os

import pytest

import sparkbeam as beam
from sparkbeam.io.filesystem import (
    BeamIOError,
    CompressionTypes,
    FileMetadata,
    FileSystem,
    MatchResult,
)
from sparkbeam.io.filesystems import FileSystems
from sparkbeam.runners.core.loop.memory import run_in_memory

PATTERNS = ["*.txt", "**.txt", "*", "sub/", "sub/*.txt", "a?.txt", "[ab]*.txt", "[!a]*", "missing/*", "a1.txt", "sub", "nothing.txt"]


@pytest.fixture
def tree(tmp_path):
    for name, text in {
        "a1.txt": "one\n",
        "b2.txt": "two\ntwo\n",
        "c.csv": "x,y\n",
        ".hidden.txt": "h\n",
        "sub/d.txt": "deep\n",
        "sub/deeper/e.txt": "deeper\n",
    }.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def beam_filesystems():
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems

    return BeamFileSystems


def as_set(results):
    return [(result.pattern, sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in result.metadata_list)) for result in results]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_match_finds_what_beams_match_finds(tree, pattern):
    full = os.path.join(str(tree), pattern)
    ours = FileSystems.match([full])
    assert all(isinstance(r, MatchResult) and all(isinstance(m, FileMetadata) for m in r.metadata_list) for r in ours)
    assert as_set(ours) == as_set(beam_filesystems().match([full]))


def test_match_with_limits_and_several_patterns(tree):
    patterns = [os.path.join(str(tree), "*.txt"), os.path.join(str(tree), "**")]
    (first, second) = FileSystems.match(patterns, [1, None])
    assert len(first.metadata_list) == 1
    assert len(second.metadata_list) == 6
    with pytest.raises(ValueError, match="2 patterns but 1 limits"):
        FileSystems.match(patterns, [1])
    with pytest.raises(TypeError, match="list of patterns"):
        FileSystems.match(patterns[0])


def test_a_relative_pattern_without_folder_matches_in_the_current_folder(tree, monkeypatch):
    monkeypatch.chdir(tree)
    (result,) = FileSystems.match(["*.txt"])
    assert sorted(m.path for m in result.metadata_list) == [".hidden.txt", "a1.txt", "b2.txt"]


@pytest.mark.parametrize("compression", ["gzip", "bzip2", "deflate", "uncompressed"])
def test_compressed_files_we_write_beam_reads_and_back(tmp_path, compression):
    from apache_beam.io.filesystem import CompressionTypes as BeamCompression

    data = b"".join(b"line %d\n" % i for i in range(5000))
    ours = str(tmp_path / f"ours.{compression}")
    with FileSystems.create(ours, compression_type=compression) as handle:
        handle.write(data)
    with beam_filesystems().open(ours, compression_type=compression) as handle:
        assert handle.read() == data
    theirs = str(tmp_path / f"theirs.{compression}")
    with beam_filesystems().create(theirs, compression_type=getattr(BeamCompression, compression.upper())) as handle:
        handle.write(data)
    with FileSystems.open(theirs, compression_type=compression) as handle:
        assert handle.read() == data
        assert isinstance(handle, io.IOBase)


def test_auto_compression_follows_the_extension(tmp_path):
    path = str(tmp_path / "x.txt.gz")
    with FileSystems.create(path) as handle:
        handle.write(b"hello\n")
    with open(path, "rb") as raw:
        assert gzip.decompress(raw.read()) == b"hello\n"
    with FileSystems.open(path) as handle:
        assert list(handle) == [b"hello\n"]
    with pytest.raises(TypeError, match="compression_type"):
        FileSystems.open(path, compression_type="snappy")


def test_file_operations_as_in_beam(tree):
    root = str(tree)
    source, copied, moved = (os.path.join(root, name) for name in ("a1.txt", "copy.txt", "moved.txt"))
    FileSystems.copy([source], [copied])
    FileSystems.rename([copied], [moved])
    assert not FileSystems.exists(copied) and FileSystems.exists(moved)
    assert FileSystems.size(moved) == 4 == FileSystems.metadata(moved).size_in_bytes
    assert FileSystems.last_updated(moved) == FileSystems.metadata(moved).last_updated_in_seconds
    assert FileSystems.checksum(moved) == beam_filesystems().checksum(moved) == "4"
    assert FileSystems.join(root, "x", "y.txt") == beam_filesystems().join(root, "x", "y.txt")
    assert FileSystems.split(moved) == beam_filesystems().split(moved)
    FileSystems.mkdirs(os.path.join(root, "new", "deep"))
    with pytest.raises(IOError):
        FileSystems.mkdirs(os.path.join(root, "new", "deep"))  # exists already, as Beam says
    FileSystems.delete([moved, os.path.join(root, "sub")])
    assert not FileSystems.exists(moved) and not FileSystems.exists(os.path.join(root, "sub"))
    with pytest.raises(BeamIOError, match="No files found to delete"):
        FileSystems.delete([moved])
    with pytest.raises(BeamIOError, match="instead of list"):
        FileSystems.delete(moved)
    with pytest.raises(BeamIOError, match="Rename operation failed"):
        FileSystems.rename([moved], [copied])
    with pytest.raises(ValueError, match="1 source paths but 2 destination"):
        FileSystems.copy([source], [copied, moved])


def test_file_urls_are_local_paths(tree):
    url = "file://" + os.path.join(str(tree), "*.txt")
    (result,) = FileSystems.match([url])
    assert sorted(os.path.basename(m.path) for m in result.metadata_list) == [".hidden.txt", "a1.txt", "b2.txt"]
    with FileSystems.open("file://" + os.path.join(str(tree), "a1.txt")) as handle:
        assert handle.read() == b"one\n"


def test_an_unknown_scheme_is_refused_naming_it():
    # Schemes nothing serves (hdfs, s3a, gs... are served by Hadoop's API once the Spark
    # runner is loaded: tests/runners/test_hadoop_filesystem.py).
    for operation in (lambda: FileSystems.open("nosuchfs://namenode/logs/a.txt"), lambda: FileSystems.match(["otherfs://b/*.csv"])):
        with pytest.raises(ValueError, match=r"no file system is registered for the '(nosuchfs|otherfs)' scheme"):
            operation()
    with pytest.raises(ValueError, match="'nosuchfs' scheme"):
        beam.io.ReadFromCsv("nosuchfs://bucket/x.csv")
    with pytest.raises(ValueError, match="cannot be replaced"):
        FileSystems.register("file", lambda options: None)
    with pytest.raises(ValueError, match="no '://'"):
        FileSystems.register("hdfs://", lambda options: None)


class MemoryFileSystem(FileSystem):
    """A file system in a dict, registered for ``mem://`` (as a cluster file system would be)."""

    files: dict[str, bytes] = {}

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/"), *paths])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        return [FileMetadata(path, len(data)) for path, data in self.files.items() if path.startswith(dir_or_prefix)]

    def create(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        files = self.files

        class Closing(io.BytesIO):
            def close(self):
                files[path] = self.getvalue()
                super().close()

        return Closing()

    def open(self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO):
        return io.BytesIO(self.files[path])

    def copy(self, sources, destinations):
        for source, destination in zip(sources, destinations):
            self.files[destination] = self.files[source]

    def rename(self, sources, destinations):
        for source, destination in zip(sources, destinations):
            self.files[destination] = self.files.pop(source)

    def delete(self, paths):
        for path in paths:
            self.files.pop(path)

    def exists(self, path):
        return path in self.files

    def size(self, path):
        return len(self.files[path])

    def last_updated(self, path):
        return 0.0

    def metadata(self, path):
        return FileMetadata(path, len(self.files[path]))


def test_a_registered_file_system_serves_its_scheme_to_every_file_transform():
    FileSystems.register("mem", MemoryFileSystem)
    try:
        MemoryFileSystem.files.clear()
        MemoryFileSystem.files.update({"mem://logs/a.txt": b"a1\na2\n", "mem://logs/b.txt": b"b1\n", "mem://other/c.txt": b"c\n"})
        assert sorted(m.path for m in FileSystems.match(["mem://logs/*.txt"])[0].metadata_list) == ["mem://logs/a.txt", "mem://logs/b.txt"]
        p = beam.Pipeline()
        lines = beam.capture(p | beam.Create(["mem://logs/*"]) | beam.io.ReadAllFromText(with_filename=True))
        files = beam.capture(
            p | beam.io.fileio.MatchFiles("mem://other/*") | beam.io.fileio.ReadMatches() | beam.Map(lambda f: f.read_utf8())
        )
        result = run_in_memory(p)
        assert sorted(e.value for e in result.emissions(lines)) == [
            ("mem://logs/a.txt", "a1"), ("mem://logs/a.txt", "a2"), ("mem://logs/b.txt", "b1")
        ]
        assert [e.value for e in result.emissions(files)] == ["c\n"]
    finally:
        FileSystems.unregister("mem")
    with pytest.raises(ValueError, match="'mem' scheme"):
        FileSystems.open("mem://logs/a.txt")


def test_a_file_system_subclass_with_a_scheme_is_found_without_registering():
    class Discovered(MemoryFileSystem):
        @classmethod
        def scheme(cls):
            return "disc"

    MemoryFileSystem.files["disc://x"] = b"found"
    try:
        with FileSystems.open("disc://x") as handle:
            assert handle.read() == b"found"
        assert "disc" in FileSystems.registered_schemes()
    finally:
        MemoryFileSystem.files.pop("disc://x")
        FileSystems._instances.pop("disc", None)


def test_beam_names_this_module_lacks_say_so():
    from sparkbeam.io import filesystem

    with pytest.raises(NotImplementedError, match="CompressedFile"):
        filesystem.CompressedFile  # noqa: B018
