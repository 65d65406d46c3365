"""tools/prism.py without building Go: what it asks `go` for, and its cache's rules.

A stand-in `go` on PATH records its arguments and writes a script where GOBIN says;
the real build is exercised by the ``prism`` fixture (tests/beam_frontend/test_prism_oracle.py).
"""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from tools import prism

FAKE_GO = """#!/bin/sh
echo "$@" >> "{calls}"
{body}
"""


def fake_go(folder, calls, body='printf "#!/bin/sh\\necho prism\\n" > "$GOBIN/prism" && /bin/chmod +x "$GOBIN/prism"'):
    folder.mkdir()
    go = folder / "go"
    go.write_text(FAKE_GO.format(calls=calls, body=body))
    go.chmod(0o755)
    return folder


def test_a_build_installs_beams_prism_at_the_version_and_is_reused(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", str(fake_go(tmp_path / "bin", calls)))
    monkeypatch.setenv("SPARKBEAM_PRISM_CACHE", str(tmp_path / "cache"))
    binary = prism.prism_binary("2.77.0")
    assert binary == tmp_path / "cache" / "2.77.0" / "prism"
    assert subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout == "prism\n"
    assert calls.read_text().splitlines() == ["install github.com/apache/beam/sdks/v2/go/cmd/prism@v2.77.0"]
    assert stat.S_IMODE((tmp_path / "cache" / "2.77.0").stat().st_mode) == 0o700
    assert os.listdir(tmp_path / "cache" / "2.77.0") == ["prism"]  # the build's GOBIN is gone
    # Cached: `go` is not asked again.
    assert prism.prism_binary("2.77.0") == binary
    assert len(calls.read_text().splitlines()) == 1


def test_without_go_the_error_says_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("SPARKBEAM_PRISM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(prism.PrismBuildError, match=r"needs Go \(the `go` command\) on PATH"):
        prism.prism_binary("2.77.0")


def test_a_failed_build_shows_gos_own_words_and_leaves_no_binary(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    failing = "echo 'go: module lookup disabled' >&2; exit 1"
    monkeypatch.setenv("PATH", str(fake_go(tmp_path / "bin", calls, failing)))
    monkeypatch.setenv("SPARKBEAM_PRISM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(prism.PrismBuildError, match=r"(?s)failed \(exit 1\):\ngo: module lookup disabled"):
        prism.prism_binary("2.77.0")
    assert os.listdir(tmp_path / "cache" / "2.77.0") == []


def test_a_cache_open_to_others_is_refused(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    monkeypatch.setenv("SPARKBEAM_PRISM_CACHE", str(cache))
    with pytest.raises(prism.PrismBuildError, match="not a directory of this user's closed to others"):
        prism.prism_binary("2.77.0")
