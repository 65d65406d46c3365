"""A class-data-sharing archive of Spark's JVM classes, for the JVMs the tests start.

Every Spark JVM (a driver, an executor, a standalone master or worker) spends seconds of CPU
at its start loading and verifying the same ten thousand classes from the same jars. The
suite starts about fifty of them (the jobs it runs as processes, clusters, notebook kernels,
the two sessions), on a two-core machine. The JDK can map those classes, already parsed and
verified, from an archive written once (CDS, ``-XX:SharedArchiveFile``): measured here, a
stream job as the recovery tests run it used 34 s of CPU with the archive and 42 s without.

    python tools/jvm_archive.py          # build it ahead (tests/conftest.py does when missing)

The archive is written by one short run (a Spark session on ``local[2]``, a batch pipeline
and a file stream), with ``-XX:ArchiveClassesAtExit``, into
``$SPARKBEAM_CDS_CACHE`` or ``$XDG_CACHE_HOME/sparkbeam/cds`` (``~/.cache/...``): a folder of
this user's closed to others (0700, checked on every use: a class archive another user could
write would run as code in our JVMs). Its name holds a hash of the JDK and of PySpark's jars
with their folder: the JDK checks the class path's entries by path, size and time at every
start and silently runs without the archive where they differ, so each virtual environment
builds its own (``.ci/run``'s new one too: about 30 s of a quiet machine, once per
environment), and an archive whose environment is gone is removed when the next is built.
(The tests no longer put a ``spark-defaults.conf`` on the class path for the same reason: a
non-empty configuration folder there turns sharing off.) Nothing of this is for users' runs:
the library never sets JVM options.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import private_cache
from tools.private_cache import private_folder

__all__ = ["archive_options", "build_archive", "cached_archive"]

#: options that keep the JDK quiet about sharing (a mismatch is not an error: it runs
#: without the archive), so that no test reading a JVM's output sees them
QUIET = "-Xlog:cds*=off,class+path*=off"

_JOB = """
import os, sys, tempfile
from pyspark.sql import SparkSession
from pyspark import SparkContext
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions
work = sys.argv[1]
with beam.Pipeline() as p:
    (p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.CombinePerKey(sum)
       | beam.Map(str) | beam.io.WriteToText(os.path.join(work, "batch")))
os.makedirs(os.path.join(work, "in"))
with open(os.path.join(work, "in", "f.txt"), "w") as handle:
    handle.write("a,1\\nb,2\\n")
options = PipelineOptions(available_now=True, step_interval=0.1, checkpoint_dir=os.path.join(work, "ck"))
with beam.Pipeline(options=options) as p:
    (p | beam.io.ReadFromTextStream(os.path.join(work, "in"), timestamp=lambda line: int(line.split(",")[1]))
       | beam.Map(lambda line: (line.split(",")[0], 1)) | beam.CombinePerKey(sum)
       | beam.Map(str) | beam.io.WriteToText(os.path.join(work, "stream")))
spark.stop()
gateway = SparkContext._gateway
# The archive is written as the JVM exits: close its stdin (it exits then) and wait for it.
gateway.proc.stdin.close()
gateway.proc.wait(timeout=300)
"""


def cache_root() -> Path:
    return private_cache.cache_root("SPARKBEAM_CDS_CACHE", "cds")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else (shutil.which("java") or "java")


def _jars_folder() -> Path:
    import pyspark

    return (Path(pyspark.__file__).parent / "jars").resolve()


def _key() -> str:
    """A hash of what the archive depends on: the JDK (its version output and path),
    PySpark's version and its jars (their folder, names and sizes: the JDK checks the
    class path's entries by path, so each environment's PySpark needs its own archive)."""
    import pyspark

    digest = hashlib.sha256()
    java = _java()
    version = subprocess.run(
        [java, "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    digest.update(
        f"{os.path.realpath(shutil.which(java) or java)}\n{version.stderr}\n{pyspark.__version__}\n".encode()
    )
    jars = _jars_folder()
    digest.update(f"{jars}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"{jar.name} {jar.stat().st_size}\n".encode())
    return digest.hexdigest()[:20]


def cached_archive() -> Path:
    """Where the archive for this JDK and PySpark is (or will be)."""
    return (
        private_folder(cache_root(), "the JVM class archive cache", "SPARKBEAM_CDS_CACHE")
        / f"spark-{_key()}.jsa"
    )


def build_archive(*, timeout: float = 600) -> Path | None:
    """The archive, built by one short Spark run if it is not cached; None (with the reason
    on stderr) if the JDK could not write one: the tests then run without it."""
    target = cached_archive()
    if target.exists():
        return target
    partial = target.with_name(f".{target.name}.{os.getpid()}")  # concurrent builds do not mix
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")
    }
    env["SPARK_SUBMIT_OPTS"] = f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial} {QUIET}"
    env["PYSPARK_PYTHON"] = sys.executable
    work = tempfile.mkdtemp(prefix="sparkbeam-cds-")
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _JOB, work],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0 or not partial.exists():
            print(
                f"sparkbeam tests: no JVM class archive ({done.returncode}): {done.stderr[-1500:]}",
                file=sys.stderr,
            )
            return None
        os.replace(partial, target)
        target.with_suffix(".jars").write_text(str(_jars_folder()))
        _remove_orphans(target.parent)
    except subprocess.TimeoutExpired:
        print(
            f"sparkbeam tests: building the JVM class archive took over {timeout:.0f} s; running without",
            file=sys.stderr,
        )
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if partial.exists():
            partial.unlink()
    print(
        f"sparkbeam tests: JVM class archive {target} built in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    return target


def _remove_orphans(folder: Path) -> None:
    """Archives whose PySpark is gone (a removed virtual environment: ``.ci/run`` makes a
    new one each run): about 170 MB each, of no use to anything."""
    for jars_file in folder.glob("spark-*.jars"):
        with contextlib.suppress(OSError):
            if not Path(jars_file.read_text().strip()).is_dir():
                jars_file.with_suffix(".jsa").unlink(missing_ok=True)
                jars_file.unlink()


def archive_options(archive: Path | None) -> str:
    """The JVM options that use ``archive`` (none without one)."""
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive is not None else ""


if __name__ == "__main__":
    built = build_archive()
    print(built if built is not None else "not built")
    sys.exit(0 if built is not None else 1)
