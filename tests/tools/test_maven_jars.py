"""tools/maven_jars.py without the network: the POM it hands Maven, and its cache's rules."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import pytest

from tools import maven_jars

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def test_the_pom_lists_each_coordinate_with_its_exclusions():
    pom = ET.fromstring(
        maven_jars._pom(["org.apache.kafka:kafka_2.13:4.1.0", "org.apache.kafka:kafka-clients:test:4.1.0"], ["org.slf4j:slf4j-api"])
    )
    found = [
        {child.tag.split("}")[1]: child.text for child in dependency if child.tag.split("}")[1] != "exclusions"}
        for dependency in pom.findall("m:dependencies/m:dependency", NS)
    ]
    assert found == [
        {"groupId": "org.apache.kafka", "artifactId": "kafka_2.13", "version": "4.1.0"},
        {"groupId": "org.apache.kafka", "artifactId": "kafka-clients", "classifier": "test", "version": "4.1.0"},
    ]
    excluded = {(e.findtext("m:groupId", namespaces=NS), e.findtext("m:artifactId", namespaces=NS)) for e in pom.iter(f"{{{NS['m']}}}exclusion")}
    assert excluded == {("org.slf4j", "slf4j-api")}


def test_a_malformed_coordinate_is_named():
    with pytest.raises(ValueError, match="group:artifact\\[:classifier\\]:version, not 'kafka'"):
        maven_jars._pom(["kafka"], [])


def test_a_complete_cached_set_is_reused_without_maven(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKBEAM_MAVEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "")  # no mvn: a fetch would fail
    with pytest.raises(maven_jars.MavenFetchError, match="needs Maven"):
        maven_jars.fetch(["a.b:c:1"])
    # The same set, once complete in the cache, is served from it.
    wanted = {"coordinates": ["a.b:c:1"], "excludes": [], "transitive": True}
    import hashlib
    import json

    folder = tmp_path / "cache" / hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:20]
    folder.mkdir()
    (folder / "c-1.jar").write_bytes(b"")
    (folder / ".complete").write_text("")
    assert maven_jars.fetch(["a.b:c:1"]) == [folder / "c-1.jar"]


def test_a_cache_open_to_others_is_refused(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    monkeypatch.setenv("SPARKBEAM_MAVEN_CACHE", str(cache))
    with pytest.raises(maven_jars.MavenFetchError, match="not a directory of this user's closed to others"):
        maven_jars.fetch(["a.b:c:1"])
