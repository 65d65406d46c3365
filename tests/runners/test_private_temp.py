"""Nothing sparkbeam keeps under the system temporary directory can be blocked, read or
redirected by another local user: Spark's log files and the dependency archives live in a
private folder per user (``<tmp>/sparkbeam-<uid>/``), checked on every use.

The attacks of issue #23 are played with two unprivileged users (``tests/other_user.py``
forks a child that switches uid), in both roles: a folder created first by the other
user, a symlink planted where a folder goes, a dependency zip swapped for one of the other
user's code. The rest (modes, symlinks to files, age-based removal of old logs) needs one
user only.
"""

from __future__ import annotations

# zipfile imports this codec when it first reads a zip: import it before a child switches to
# a uid that may not be able to read the interpreter's library.
import encodings.cp437  # noqa: F401
import os
import stat
import tempfile
import time
import zipfile

import pytest

from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.lowering.settings import RunSettings
from sparkbeam.runners.spark import dependencies, private_temp, spark_log
from tests.other_user import FIRST_UID, SECOND_UID, needs_root, run_as, shared_temp_dir

BOTH_ROLES = pytest.mark.parametrize(
    ("attacker", "victim"), [(FIRST_UID, SECOND_UID), (SECOND_UID, FIRST_UID)], ids=["first-attacks", "second-attacks"]
)
RECORD = "a record with a customer's card number 4111111111111111"


@pytest.fixture
def shared(monkeypatch):
    with shared_temp_dir(monkeypatch) as folder:
        yield folder


def settings(**chosen):
    return RunSettings.from_options(PipelineOptions(**chosen))


def log_a_record() -> dict:
    """What a run does with its log: choose it, have it written (as Spark's JVM would be
    told to), and write a record's text into it."""
    log = spark_log.choose_log(settings())
    conf = spark_log.java_options(log, "WARN", {})
    with private_temp.open_private_file(log.path, "ab") as handle:
        handle.write(RECORD.encode())
    config = conf["spark.driver.extraJavaOptions"].split("file:", 1)[1]
    return {"log": log.path, "config": config, "mode": stat.S_IMODE(os.stat(log.path).st_mode)}


def make_open_folders(*parts: str) -> str:
    """What another user can do first: create the folders, open to everyone."""
    path = os.path.join(tempfile.gettempdir(), *parts)
    os.makedirs(path)
    for level in range(1, len(parts) + 1):
        os.chmod(os.path.join(tempfile.gettempdir(), *parts[:level]), 0o777)
    return path


def try_to_read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return f"read {len(handle.read())} bytes"
    except PermissionError:
        return "PermissionError"


def try_to_plant_symlink(folder: str, target: str) -> str:
    try:
        os.symlink(target, os.path.join(folder, "planted.log"))
    except PermissionError:
        return "PermissionError"
    return "planted"


def listing(folder: str) -> list[str]:
    return sorted(os.listdir(folder))


@needs_root
@BOTH_ROLES
def test_a_folder_another_user_created_first_is_not_used_and_the_run_goes_on(shared, attacker, victim):
    taken = os.path.join(shared, f"sparkbeam-{victim}")
    run_as(attacker, make_open_folders, f"sparkbeam-{victim}", "logs")
    written, warnings = run_as(victim, log_a_record)
    assert not written["log"].startswith(taken + os.sep)
    assert not written["config"].startswith(taken + os.sep)
    assert written["mode"] == 0o600
    assert any(taken in w and f"belongs to uid {attacker}" in w and "is not used" in w for w in warnings), warnings
    assert listing(os.path.join(taken, "logs")) == []  # the victim wrote nothing into it
    # The attacker can neither read the victim's log nor its log4j configuration.
    assert run_as(attacker, try_to_read, written["log"])[0] == "PermissionError"
    assert run_as(attacker, try_to_read, written["config"])[0] == "PermissionError"


@needs_root
@BOTH_ROLES
def test_each_user_s_logs_are_private_and_nothing_can_be_planted_among_them(shared, attacker, victim):
    written, warnings = run_as(victim, log_a_record)
    assert warnings == []
    folder = os.path.dirname(written["log"])
    assert folder == os.path.join(shared, f"sparkbeam-{victim}", "logs")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == victim
    assert written["mode"] == 0o600
    assert run_as(attacker, try_to_read, written["log"])[0] == "PermissionError"
    assert run_as(attacker, try_to_plant_symlink, folder, "/etc/passwd")[0] == "PermissionError"
    # The other user's own runs are not blocked by the victim's folder either.
    theirs, _ = run_as(attacker, log_a_record)
    assert os.path.dirname(theirs["log"]) == os.path.join(shared, f"sparkbeam-{attacker}", "logs")


def make_private_file(folder: str, content: str) -> str:
    os.makedirs(folder, mode=0o700)
    path = os.path.join(folder, "secret")
    with open(path, "w") as handle:
        handle.write(content)
    os.chmod(path, 0o600)
    return path


def plant_symlink(link: str, target: str) -> None:
    os.symlink(target, link)


@needs_root
@BOTH_ROLES
def test_a_symlink_planted_where_the_private_folder_goes_is_not_followed(shared, attacker, victim):
    # The victim's own private folder elsewhere: following a link to it would pass an owner
    # and mode check made through the link (os.stat), so the check must not follow links.
    home = os.path.join(shared, f"home-{victim}")
    secret = run_as(victim, make_private_file, os.path.join(home, "logs"), "the victim's own file")[0]
    taken = os.path.join(shared, f"sparkbeam-{victim}")
    run_as(attacker, plant_symlink, taken, home)
    written, warnings = run_as(victim, log_a_record)
    assert not written["log"].startswith(home) and not written["log"].startswith(taken + os.sep)
    assert any(taken in w and "is a symlink" in w for w in warnings), warnings
    assert listing(os.path.join(home, "logs")) == ["secret"]
    with open(secret) as handle:
        assert handle.read() == "the victim's own file"


def write_packages(folder: str, source: str) -> str:
    os.makedirs(folder)
    with open(os.path.join(folder, "plain.py"), "w") as handle:
        handle.write(source)
    return folder


def swap_in_a_zip(shared: str, victim: int, packages: str) -> str:
    """The attack: compute the victim's archive name from packages the attacker also knows,
    and put a zip of the attacker's own code under that name, where the victim's run looks."""
    with open(os.path.join(packages, "plain.py"), "rb") as handle:
        digest = dependencies._digest([("plain.py", handle.read())])
    folder = make_open_folders(f"sparkbeam-{victim}", "dependencies")
    path = os.path.join(folder, f"deps-{digest}.zip")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("plain.py", "import os\nos.system('echo owned')\n")
    os.chmod(path, 0o666)
    return path


def zip_and_read(packages: str) -> dict:
    path = dependencies.zip_for_executors("--requirements_file=r.txt", packages)
    with zipfile.ZipFile(path) as archive:
        return {"path": path, "members": {name: archive.read(name).decode() for name in archive.namelist()}}


def try_to_overwrite(path: str) -> str:
    try:
        with open(path, "wb") as handle:
            handle.write(b"theirs")
    except PermissionError:
        return "PermissionError"
    return "overwritten"


@needs_root
@BOTH_ROLES
def test_a_dependency_zip_swapped_in_by_another_user_is_never_shipped(shared, attacker, victim):
    packages = os.path.join(shared, "packages")
    write_packages(packages, "x = 1\n")  # as root: readable by both users
    swapped = run_as(attacker, swap_in_a_zip, shared, victim, packages)[0]
    shipped, warnings = run_as(victim, zip_and_read, packages)
    assert shipped["path"] != swapped
    assert shipped["members"] == {"plain.py": "x = 1\n"}
    assert any(os.path.dirname(os.path.dirname(swapped)) in w and f"belongs to uid {attacker}" in w for w in warnings)
    # The zip the victim ships cannot be replaced by the other user.
    assert run_as(attacker, try_to_overwrite, shipped["path"])[0] == "PermissionError"


def test_a_damaged_cached_zip_is_built_again_before_it_is_shipped(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    packages = write_packages(str(tmp_path / "packages"), "x = 1\n")
    first = zip_and_read(packages)
    with zipfile.ZipFile(first["path"], "w") as archive:  # changed behind sparkbeam's back
        archive.writestr("plain.py", "x = 2\n")
    again = zip_and_read(packages)
    assert again == first  # same path, the right content again
    assert any(first["path"] in r.getMessage() and "built again" in r.getMessage() for r in caplog.records)


def test_a_private_folder_open_to_others_is_refused_naming_it(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = private_temp.private_folder("logs")
    root = os.path.dirname(folder)
    os.chmod(root, 0o755)
    with pytest.raises(private_temp.UnsafeFolderError, match=rf"{root} has mode 0755, open to other users .*chmod 700"):
        private_temp.private_folder("logs")
    used, is_user_folder = private_temp.folder_for("logs")
    assert not is_user_folder and not used.startswith(root) and stat.S_IMODE(os.stat(used).st_mode) == 0o700
    assert any(root in r.getMessage() and f"This run uses {used} instead" in r.getMessage() for r in caplog.records)


def test_a_temporary_directory_others_can_rename_in_is_refused(monkeypatch, tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # world-writable without the sticky bit
    monkeypatch.setattr(tempfile, "tempdir", str(open_dir))
    with pytest.raises(private_temp.UnsafeFolderError, match=r"writable by other users without the sticky bit .*TMPDIR"):
        private_temp.private_folder("logs")


def test_files_are_created_new_and_never_through_a_symlink(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = tmp_path / "spark-1.log"
    link.symlink_to(target)
    with pytest.raises(FileExistsError):
        private_temp.create_private_file(str(link))
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        private_temp.open_private_file(str(link), "ab")
    assert target.read_text() == "keep me"
    created = tmp_path / "new.log"
    with private_temp.create_private_file(str(created)) as handle:
        handle.write(b"x")
    assert stat.S_IMODE(created.stat().st_mode) == 0o600


def test_old_logs_are_removed_by_age(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = private_temp.private_folder("logs")
    now = time.time()
    ages_in_days = {
        "spark-20240101-000000-7.log": 8, "spark-20240101-000000-7.log-1a2b3c4d.log4j2.properties": 8,
        "spark-20240301-000000-9.log": 2, "notes.txt": 30,
    }
    for name, days in ages_in_days.items():
        path = os.path.join(folder, name)
        with open(path, "w") as handle:
            handle.write("x")
        os.utime(path, (now - days * 86400, now - days * 86400))
    log = spark_log.choose_log(settings(), now=now)  # the default: 7 days
    assert listing(folder) == ["notes.txt", "spark-20240301-000000-9.log"]  # not ours: kept
    spark_log.choose_log(settings(spark_log_max_age_days=1), now=now)
    assert listing(folder) == ["notes.txt"]
    assert os.path.dirname(log.path) == folder and log.private


def test_the_max_age_must_be_positive():
    with pytest.raises(ValueError, match=r"spark_log_max_age_days.*expected a positive number"):
        settings(spark_log_max_age_days=0)


def test_a_run_s_own_log_is_created_once_and_kept_on_reconfiguration(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    log = spark_log.choose_log(settings())
    first = spark_log._write_config(log, "WARN")
    with open(log.path, "a") as handle:
        handle.write("line\n")
    second = spark_log._write_config(log, "WARN")  # spark-submit's JVM reconfigured again
    assert first != second
    with open(log.path) as handle:
        assert handle.read() == "line\n"
    # A --spark_log path is the user's: the configuration still goes to the private folder.
    theirs = spark_log.choose_log(settings(spark_log=str(tmp_path / "mine" / "spark.log")))
    config = spark_log._write_config(theirs, "WARN")
    assert os.path.dirname(config) == os.path.dirname(log.path)
