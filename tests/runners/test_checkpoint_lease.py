"""One run at a time per checkpoint directory: its lease.

Two drivers (processes) on one directory: the second is refused before Spark starts,
naming the first, and changes nothing of it; once the first stops, the second takes the
released lease and resumes. The lease's own rules run in this process: a live holder
refuses, a released or stale lease (old heartbeat, or a holder process of this host that
is gone) is taken over, racing takers have one winner, and a holder whose lease was taken
stops. The same through Hadoop's file system API.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from sparkbeam.runners.spark.lease import CheckpointLease, LeaseError

JOB = os.path.join(os.path.dirname(__file__), "lease_job.py")


def lines_file(directory, name: str, lines: list[str]) -> None:
    temp = directory / f".{name}"
    temp.write_text("\n".join(lines) + "\n")
    os.replace(temp, directory / name)


def committed(prefix: str) -> list[str]:
    found = []
    for path in glob.glob(f"{prefix}-step-*/*"):
        with open(path) as handle:
            found += handle.read().splitlines()
    return sorted(found)


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds:.0f} s for {what}")
        time.sleep(0.1)


def start(input_dir, output: str, checkpoint: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, JOB, str(input_dir), output, checkpoint, *flags],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_a_second_driver_is_refused_while_the_first_runs_then_resumes_after_it(tmp_path):
    input_dir = tmp_path / "in"
    input_dir.mkdir()
    output, checkpoint = str(tmp_path / "out" / "lines"), str(tmp_path / "ck")
    lines_file(input_dir, "a.txt", ["a1", "a2"])
    first = start(input_dir, output, checkpoint)
    try:
        wait_for(lambda: committed(output) == ["a1", "a2"], 180, "the first driver's first step")
        began = time.monotonic()
        second = subprocess.run(
            [sys.executable, JOB, str(input_dir), output, checkpoint],
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert second.returncode != 0
        assert (
            f"LeaseError: --checkpoint_dir={checkpoint} is in use by another run: pid {first.pid} of user " in second.stderr
        ), second.stderr[-3000:]
        assert f"on host {socket.gethostname()}, started " in second.stderr
        assert time.monotonic() - began < 60, "refused before Spark started"
        # the second driver took nothing: the first's lease is the only one
        assert {name.split(".")[0] for name in os.listdir(os.path.join(checkpoint, "lease"))} == {"0"}
        lines_file(input_dir, "b.txt", ["b1"])
        wait_for(lambda: "b1" in committed(output), 120, "the first driver to go on")
        os.killpg(first.pid, signal.SIGTERM)
        assert first.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    lines_file(input_dir, "c.txt", ["c1", "c2"])
    again = subprocess.run(
        [sys.executable, JOB, str(input_dir), output, checkpoint, "--available_now"],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert committed(output) == ["a1", "a2", "b1", "c1", "c2"]


# -- the lease's rules ---------------------------------------------------------------------


def test_a_live_holder_is_named_and_a_released_lease_is_taken(tmp_path):
    first = CheckpointLease(str(tmp_path), heartbeat=0.05)
    first.acquire()
    second = CheckpointLease(str(tmp_path))
    with pytest.raises(LeaseError, match=rf"is in use by another run: pid {os.getpid()} of user .* on host {socket.gethostname()}"):
        second.acquire()
    with pytest.raises(LeaseError, match="in use by another run"):
        second.check_free()
    time.sleep(0.2)
    first.check()  # still its holder, heartbeats and all
    first.release()
    second.acquire()
    assert second.generation == 1
    assert sorted(os.listdir(tmp_path / "lease")) == ["1.beat-1", "1.json"]  # the released generation is gone
    second.release()


def test_a_lease_whose_heartbeat_stopped_is_taken_over_and_its_holder_stops(tmp_path, caplog):
    holder = CheckpointLease(str(tmp_path), heartbeat=0.05, stale_after=60)
    holder.acquire()
    # A run whose clock is two minutes on: the holder's heartbeats look two minutes old.
    later = CheckpointLease(str(tmp_path), stale_after=60, clock=lambda: time.time() + 120)
    later.acquire()
    assert "took over the lease" in caplog.text and "last heartbeat was 120 s ago" in caplog.text
    wait_for(lambda: holder.lost is not None, 5, "the holder to see its lease taken")
    with pytest.raises(LeaseError, match="this run stopped: another run took its lease over"):
        holder.check()
    holder.release()
    later.check()  # the holder's release left the new lease alone
    later.release()


def test_a_lease_of_a_process_of_this_host_that_is_gone_is_taken_at_once(tmp_path):
    script = (
        "import sys, time; from sparkbeam.runners.spark.lease import CheckpointLease; "
        "CheckpointLease(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)"
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    with pytest.raises(LeaseError, match=rf"pid {process.pid} "):
        CheckpointLease(str(tmp_path)).acquire()
    process.kill()
    process.wait()
    taker = CheckpointLease(str(tmp_path))  # heartbeat 5 s, stale after 60 s: no waiting here
    taker.acquire()
    assert taker.generation == 1
    taker.release()


def test_a_lease_of_another_host_counts_by_its_heartbeat(tmp_path):
    (tmp_path / "lease").mkdir()
    holder = {"host": "elsewhere", "pid": 1, "user": "ann", "started": time.time() - 3600, "token": "t"}
    (tmp_path / "lease" / "4.json").write_text(json.dumps(holder))
    (tmp_path / "lease" / "4.beat-9").write_text(json.dumps({"time": time.time() - 5}))
    with pytest.raises(LeaseError, match=r"pid 1 of user ann on host elsewhere, .* last heartbeat 5 s ago"):
        CheckpointLease(str(tmp_path)).acquire()
    (tmp_path / "lease" / "4.beat-10").write_text(json.dumps({"time": time.time() - 61}))
    (tmp_path / "lease" / "4.beat-9").unlink()
    taker = CheckpointLease(str(tmp_path))
    taker.acquire()
    assert taker.generation == 5
    taker.release()


def test_racing_takers_have_one_winner(tmp_path):
    for trial in range(10):
        root = tmp_path / str(trial)
        outcomes: list[str] = []
        leases = [CheckpointLease(str(root)) for _ in range(4)]

        def take(lease, outcomes=outcomes):
            try:
                lease.acquire()
                outcomes.append("won")
            except LeaseError:
                outcomes.append("refused")

        threads = [threading.Thread(target=take, args=(lease,)) for lease in leases]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["refused", "refused", "refused", "won"]
        for lease in leases:
            lease.release()


def test_a_holder_file_that_is_not_a_lease_counts_by_its_age(tmp_path):
    (tmp_path / "lease").mkdir()
    planted = tmp_path / "lease" / "0.json"
    planted.write_text('{"host": ')
    with pytest.raises(LeaseError, match="a run that is taking the lease right now"):
        CheckpointLease(str(tmp_path)).acquire()
    os.utime(planted, (time.time() - 120, time.time() - 120))
    taker = CheckpointLease(str(tmp_path))
    taker.acquire()
    assert taker.generation == 1
    taker.release()


@pytest.mark.spark
def test_the_lease_through_hadoops_file_system(spark, tmp_path):
    from sparkbeam.runners.spark import hadoop_filesystem

    hadoop_filesystem.serve_file_urls(True)
    try:
        url = f"file://{tmp_path}"
        first = CheckpointLease(url)
        first.acquire()
        assert glob.glob(str(tmp_path / "lease" / ".0.json.crc")), "not written through Hadoop"
        with pytest.raises(LeaseError, match=rf"--checkpoint_dir={url} is in use by another run: pid {os.getpid()}"):
            CheckpointLease(url).acquire()
        first.release()
        second = CheckpointLease(url)
        second.acquire()
        assert second.generation == 1
        second.release()
    finally:
        hadoop_filesystem.serve_file_urls(False)

