"""Jars from Maven Central for the tests and benchmarks, fetched by Maven and cached per user.

The services sparkbeam is tested against and measured beside are JVM programs published on
Maven Central: Spark's Kafka connector and a Kafka broker, Hadoop's S3 connector, Beam's job
servers. Nothing of them is committed or needed by the README's main example; a test or a
benchmark asks for a set of coordinates and gets the jars (with their dependencies)::

    from tools.maven_jars import fetch
    jars = fetch(["org.apache.kafka:kafka-clients:4.1.0"])          # [Path, ...]

    python tools/maven_jars.py org.apache.kafka:kafka-clients:4.1.0   # prints a classpath

Maven resolves them (``mvn dependency:copy-dependencies`` on a throw-away POM, with the
machine's own Maven settings, so a mirror configured there is used) into
``$SPARKBEAM_MAVEN_CACHE`` or ``$XDG_CACHE_HOME/sparkbeam/maven`` (``~/.cache/...``): one
folder per set of coordinates, named by their hash, complete once its ``.complete`` file
exists (written last). A clean machine fetches again; a cached set is reused. Jars are code:
the cache is the user's own (0700, checked on every use), never a shared temporary folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import private_cache
from tools.private_cache import private_folder

__all__ = ["MavenFetchError", "cache_root", "fetch"]

_COMPLETE = ".complete"


class MavenFetchError(RuntimeError):
    """Maven could not resolve the coordinates (the message has Maven's own last lines)."""


def cache_root() -> Path:
    return private_cache.cache_root("SPARKBEAM_MAVEN_CACHE", "maven")


def _private(folder: Path) -> Path:
    """``folder`` created 0700 if missing; refused unless it is a directory of this user's
    that no one else can write (another user's jars would run in our JVMs)."""
    return private_folder(folder, "the Maven jar cache", "SPARKBEAM_MAVEN_CACHE", MavenFetchError)


def _parse(coordinate: str) -> dict[str, str]:
    """``group:artifact:version`` or ``group:artifact:classifier:version``."""
    parts = coordinate.split(":")
    if len(parts) == 3:
        group, artifact, version = parts
        return {"groupId": group, "artifactId": artifact, "version": version}
    if len(parts) == 4:
        group, artifact, classifier, version = parts
        return {"groupId": group, "artifactId": artifact, "classifier": classifier, "version": version}
    msg = f"a Maven coordinate is group:artifact[:classifier]:version, not {coordinate!r}"
    raise ValueError(msg)


def _pom(coordinates: Sequence[str], excludes: Sequence[str]) -> str:
    exclusions = "".join(
        f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
        for g, a in (e.split(":", 1) for e in excludes)
    )
    dependencies = "".join(
        "<dependency>"
        + "".join(f"<{tag}>{escape(value)}</{tag}>" for tag, value in _parse(c).items())
        + (f"<exclusions>{exclusions}</exclusions>" if exclusions else "")
        + "</dependency>"
        for c in coordinates
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>sparkbeam.local</groupId><artifactId>jars</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>"
    )


def fetch(coordinates: Sequence[str], *, excludes: Sequence[str] = (), transitive: bool = True) -> list[Path]:
    """The jars of ``coordinates`` (and, if ``transitive``, of what they depend on, less the
    ``group:artifact`` pairs in ``excludes``), from the cache or fetched now by Maven."""
    wanted = {"coordinates": sorted(coordinates), "excludes": sorted(excludes), "transitive": transitive}
    digest = hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:20]
    root = _private(cache_root())
    folder = root / digest
    if (folder / _COMPLETE).exists():
        return sorted(folder.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = f"fetching {', '.join(coordinates)} needs Maven (mvn) on PATH: apt-get install maven"
        raise MavenFetchError(msg)
    work = Path(tempfile.mkdtemp(prefix="fetch-", dir=root))
    try:
        (work / "pom.xml").write_text(_pom(coordinates, excludes))
        jars = work / "jars"
        command = [
            mvn, "-q", "-B", "dependency:copy-dependencies",
            f"-DoutputDirectory={jars}", f"-DexcludeTransitive={'false' if transitive else 'true'}",
        ]
        completed = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-15:])
            msg = f"Maven could not fetch {', '.join(coordinates)}:\n{tail}"
            raise MavenFetchError(msg)
        (jars / "coordinates.json").write_text(json.dumps(wanted, indent=1))
        (jars / _COMPLETE).write_text("")
        try:
            jars.rename(folder)
        except OSError:
            if not (folder / _COMPLETE).exists():  # not a racing fetch that finished first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return sorted(folder.glob("*.jar"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fetch jars from Maven Central into sparkbeam's per-user cache.")
    parser.add_argument("coordinates", nargs="+", help="group:artifact[:classifier]:version")
    parser.add_argument("--exclude", action="append", default=[], help="group:artifact to leave out")
    parser.add_argument("--no-transitive", action="store_true", help="the named jars alone")
    args = parser.parse_args(argv)
    try:
        jars = fetch(args.coordinates, excludes=args.exclude, transitive=not args.no_transitive)
    except (MavenFetchError, ValueError) as error:
        print(error, file=sys.stderr)
        return 1
    print(os.pathsep.join(str(jar) for jar in jars))
    return 0


if __name__ == "__main__":
    sys.exit(main())
