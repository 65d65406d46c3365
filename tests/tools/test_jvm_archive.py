"""The class archive the tests' JVMs map (tools/jvm_archive.py): used, not silently turned
off (a class-path mismatch, such as a non-empty configuration folder on it, would only
cost the speed-up), and kept only in a folder of this user's closed to others."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tools import jvm_archive
from tools.private_cache import CacheFolderError


def test_a_spark_jvm_started_as_the_tests_start_them_maps_its_classes_from_the_archive(tmp_path):
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "-XX:SharedArchiveFile=" not in options:
        pytest.skip("this run sets its own JVM options (SPARK_SUBMIT_OPTS, SPARK_CONF_DIR or PYSPARK_SUBMIT_ARGS), or SPARKBEAM_TESTS_JVM_ARCHIVE=0")
    import pyspark

    log = tmp_path / "classes.log"
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{options} -Xlog:class+load=info:file={log}"}
    completed = subprocess.run([str(submit), "--version"], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    loaded = log.read_text().splitlines()
    shared = [line for line in loaded if "source: shared objects file" in line]
    # Spark's own classes come from the archive, not from its jars
    assert any("org.apache.spark." in line for line in shared), f"{len(shared)} of {len(loaded)} classes shared"
    assert len(shared) > len(loaded) / 2


def test_a_cache_folder_others_can_write_is_refused_naming_the_setting(tmp_path, monkeypatch):
    folder = tmp_path / "cds"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    monkeypatch.setenv("SPARKBEAM_CDS_CACHE", str(folder))
    with pytest.raises(CacheFolderError, match=r"not a directory of this user's closed to others.*SPARKBEAM_CDS_CACHE"):
        jvm_archive.cached_archive()
