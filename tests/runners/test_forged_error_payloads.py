"""A record cannot run code on the driver: a line holding a marker of sparkbeam's user
errors, quoted by the user's exception as ``Map(int)``'s is, reaches the driver as text,
through sparkbeam's own pipelines and Beam's run on sparkbeam alike."""

from __future__ import annotations

import base64
import functools
import os
import pickle
import secrets
import tempfile

import pytest

import sparkbeam as beam
from sparkbeam.runners.core.lowering.errors import UserCodeError
from sparkbeam.runners.spark.errors import SparkTaskError, user_errors
from sparkbeam.runners.spark.metrics import MetricsChannel, with_channel

pytestmark = pytest.mark.spark


class _CreatesAFile:
    """Unpickled, this opens ``path`` for exclusive creation: proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "x"))


@pytest.fixture(params=["unsigned", "with a made-up MAC"])
def forged(request, tmp_path):
    """(a text file whose second line is a forged marker, the line, the file its payload
    would create): as markers were before they were signed, and as they are now."""
    # short: int() quotes 200 characters of a line (the system's temporary directory, not
    # the test process's own, whose name is longer: tests/conftest.py)
    folder = tempfile.mkdtemp(prefix="sb", dir=os.environ.get("SPARKBEAM_TESTS_SYSTEM_TEMP"))
    flag = os.path.join(folder, "x")
    payload = base64.b64encode(pickle.dumps(_CreatesAFile(flag), protocol=2)).decode("ascii")
    mac = "" if request.param == "unsigned" else f":{secrets.token_hex(32)}"
    line = f"[[sparkbeam-user-error:{payload}{mac}]]"
    assert len(repr(line)) < 200
    path = tmp_path / "numbers.txt"
    path.write_text(f"1\n{line}\n")
    yield str(path), line, flag
    if os.path.exists(flag):
        os.remove(flag)
    os.rmdir(folder)


def check_no_code_ran(error: BaseException, line: str, flag: str) -> None:
    assert f"invalid literal for int() with base 10: {line!r}" in str(error)  # the record, as text
    assert any("in transform 'ToInt'" in note for note in error.__notes__)
    assert not os.path.exists(flag)
    pickle.loads(base64.b64decode(line.split(":")[1].rstrip("]"))).close()  # the harness can fail:
    assert os.path.exists(flag)  # unpickled, the forged payload does run code


def test_a_forged_marker_in_a_record_is_text_in_a_sparkbeam_pipeline(spark, forged):
    path, line, flag = forged
    p = beam.Pipeline()
    p | beam.io.ReadFromText(path) | "ToInt" >> beam.Map(int)
    with pytest.raises(ValueError) as raised:
        p.run()
    check_no_code_ran(raised.value, line, flag)


def test_a_forged_marker_in_a_record_is_text_in_a_beam_pipeline(spark, forged):
    import apache_beam
    from apache_beam.options.pipeline_options import PipelineOptions

    path, line, flag = forged
    p = apache_beam.Pipeline(runner=beam.SparkRunner(), options=PipelineOptions([]))
    p | apache_beam.io.ReadFromText(path) | "ToInt" >> apache_beam.Map(int)
    with pytest.raises(ValueError, match=r"\[while running 'ToInt'\]") as raised:
        p.run().wait_until_finish()
    check_no_code_ran(raised.value, line, flag)


def _fails_unkeyed(elements):
    for element in elements:
        try:
            int(element)
        except ValueError as error:
            raise UserCodeError("ToInt", "job.py:3", error, element) from error
        yield element


def test_a_task_given_no_key_sends_no_payload_and_the_driver_shows_its_text(spark):
    sc = spark.sparkContext
    # A keyed run first, so that the Python worker reused below has held a run's key.
    p = beam.Pipeline()
    p | beam.Create(["1", "2"]) | beam.Map(int)
    p.run()
    unkeyed = sc.parallelize(["x"], 1).mapPartitions(_fails_unkeyed)
    with pytest.raises(Exception, match="in transform 'ToInt'") as spark_failure:
        unkeyed.collect()
    assert "[[sparkbeam-user-error:" not in str(spark_failure.value)
    with pytest.raises(SparkTaskError) as raised, user_errors(secrets.token_bytes(32)):
        unkeyed.collect()
    assert "ValueError: invalid literal for int() with base 10: 'x' (in transform 'ToInt', applied at job.py:3)" in str(raised.value)


def test_a_task_given_the_runs_channel_signs_and_the_driver_rebuilds_the_users_exception(spark):
    key = secrets.token_bytes(32)
    channel = MetricsChannel(None, None, key)
    keyed = spark.sparkContext.parallelize(["x"], 1).mapPartitions(functools.partial(with_channel, channel, _fails_unkeyed))
    with pytest.raises(ValueError, match="invalid literal for int") as raised, user_errors(key):
        keyed.collect()
    assert "in transform 'ToInt' (applied at job.py:3) while processing 'x'" in raised.value.__notes__
