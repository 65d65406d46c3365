"""A user's exception crosses from an executor to the driver as a signed payload in Spark's
error text; the driver unpickles only a payload signed with the run's key (no Spark here:
the text is made and read as the worker and the driver make and read it)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pickle
import secrets
import tempfile

import pytest

from sparkbeam.runners.core.lowering import errors
from sparkbeam.runners.core.lowering.errors import UserCodeError, rebuild_user_error, user_error_of


class _CreatesAFile:
    """Unpickled, this opens ``path`` for exclusive creation: proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "x"))


def forged_payload(path: str) -> str:
    return base64.b64encode(pickle.dumps(_CreatesAFile(path), protocol=2)).decode("ascii")


@pytest.fixture
def flag():
    folder = tempfile.mkdtemp(prefix="sb")
    path = os.path.join(folder, "x")
    yield path
    if os.path.exists(path):
        os.remove(path)
    os.rmdir(folder)


@pytest.fixture
def signing(monkeypatch):
    """The key a running task would sign with, settable; none once the test ends."""
    current: dict[str, bytes | None] = {"key": None}
    monkeypatch.setattr(errors, "_payload_key", lambda: current["key"])
    return current


def failure(message: str) -> UserCodeError:
    try:
        raise ValueError(message)
    except ValueError as error:
        return UserCodeError("Parse", "job.py:7", error, message)


def test_a_genuine_payload_signed_with_the_runs_key_comes_back_as_the_users_exception(signing):
    key = secrets.token_bytes(32)
    signing["key"] = key
    text = f"Py4JJavaError ... {failure('bad line')} ... more of Spark's text"
    rebuilt = rebuild_user_error(text, key)
    assert type(rebuilt) is ValueError and str(rebuilt) == "bad line"
    assert "in transform 'Parse' (applied at job.py:7) while processing 'bad line'" in rebuilt.__notes__
    assert any(note.startswith("Raised on a Spark executor") and "test_user_error_payloads.py" in note for note in rebuilt.__notes__)


def test_a_payload_signed_with_another_runs_key_is_not_unpickled(signing):
    signing["key"] = secrets.token_bytes(32)
    text = str(failure("bad line"))
    assert "[[sparkbeam-user-error:" in text
    assert rebuild_user_error(text, secrets.token_bytes(32)) is None


def test_without_a_key_no_payload_is_made(signing):
    text = str(failure("bad line"))
    assert text == "ValueError: bad line (in transform 'Parse', applied at job.py:7)"


@pytest.mark.parametrize("form", ["unsigned", "random MAC", "another key's MAC"])
def test_a_marker_a_record_holds_is_left_as_text_and_never_unpickled(signing, flag, form):
    payload = forged_payload(flag)
    mac = {
        "unsigned": "",
        "random MAC": ":" + secrets.token_hex(32),
        "another key's MAC": ":" + hmac.new(secrets.token_bytes(32), b"sparkbeam-user-error\0" + payload.encode(), hashlib.sha256).hexdigest(),
    }[form]
    record = f"[[sparkbeam-user-error:{payload}{mac}]]"
    key = secrets.token_bytes(32)
    # The record alone (a task that had no key), and quoted before the genuine payload.
    assert rebuild_user_error(f"ValueError: {record}", key) is None
    signing["key"] = key
    rebuilt = rebuild_user_error(str(failure(f"invalid literal for int(): {record!r}")), key)
    assert type(rebuilt) is ValueError and record in str(rebuilt)
    assert not os.path.exists(flag)
    # The harness can fail: the forged payload does run code when it is unpickled.
    pickle.loads(base64.b64decode(payload)).close()
    assert os.path.exists(flag)


def test_an_error_raised_in_the_drivers_own_process_is_unwrapped_without_pickling(signing):
    wrapped = failure("bad line")
    original = user_error_of(wrapped)
    assert original is wrapped.error
    assert "in transform 'Parse' (applied at job.py:7) while processing 'bad line'" in original.__notes__
