"""Crash and recovery of a real stream: SIGKILL at random steps, restart, compare.

A stream job (``stream_job.py``) reads a directory of JSON-lines files through Structured
Streaming, sums scores per team in 60-second windows and writes totals and dead letters with
exactly-once file sinks, checkpointing every 3 steps. Each seed kills it with SIGKILL at a
random step (whatever it is doing then: writing the log, a checkpoint, a sink) and
restarts it until it finishes. The output must equal an uninterrupted run's and the totals
computed here in plain Python: nothing lost, nothing duplicated; and every stage's
watermarks, logged step by step across all the runs, must never go backwards. The job's
stateful DoFns check that state and timers are recovered exactly: each window's timer fires
once with the full count, and each team's running sequence has no gap and no repeat.

The uninterrupted run, the last restart after a kill and the finished stream started again
run in this process, on the tests' SparkSession (they need no process to kill, and each
saves starting a driver and its Spark).

SIGINT (a terminal's Ctrl-C, sent to the whole process group) and SIGTERM stop the job
cleanly instead: within seconds, exit status 130 or 143, a checkpoint at the step where it
stopped, one line saying how to resume and no traceback; the restart resumes exactly.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import io
import itertools
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from sparkbeam.runners.spark.checkpoints import CheckpointStore
from tests.runners import stream_job

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

JOB = os.path.join(os.path.dirname(__file__), "stream_job.py")
FILES = 6
RECORDS_PER_FILE = 20


def write_input(directory: str) -> collections.Counter:
    """The input files, and the totals per (team, window start) they must produce."""
    return write_input_and_counts(directory)[0]


def write_input_and_counts(directory: str, files: int = FILES) -> tuple[collections.Counter, collections.Counter]:
    """The input files (the first ``files`` of them); the totals and the record counts per
    (team, window start) they must produce."""
    os.makedirs(directory)
    rng = random.Random(7)
    expected: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for index in range(files):
        lines = []
        for record in range(RECORDS_PER_FILE):
            # Each file covers 30 s of event time, out of order by up to 15 s: always within
            # the 20 s the watermark allows, so nothing is late whatever the micro-batches.
            ts = index * 30 + rng.uniform(0, 15) + (record % 2) * 14
            team = f"team{rng.randrange(3)}"
            score = rng.randrange(1, 10)
            expected[(team, int(ts // 60 * 60))] += score
            counts[(team, int(ts // 60 * 60))] += 1
            lines.append(json.dumps({"user": f"u{record}", "team": team, "score": score, "ts": ts}))
        if index % 4 == 1:
            lines.append('{"user": "broken", ')  # a dead letter
        path = os.path.join(directory, f"scores-{index:03d}.json")
        with open(path, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))  # the files' order
    return expected, counts


def dead_letters_written(files: int = FILES) -> int:
    """How many broken lines write_input puts in the files (the first ``files`` of them)."""
    return len([index for index in range(files) if index % 4 == 1])


def stateful_outputs_are_exact(output_dir: str, counts: collections.Counter) -> None:
    """Each window's timer fired once with the window's full count; each team's sequence
    is 1..n once each (a state lost at a restart would repeat numbers, a replayed one skip)."""
    fired = committed(output_dir, "counts")
    assert all(times == 1 for times in fired.values()), f"a timer fired twice: {fired}"
    assert collections.Counter({(t, int(s)): int(c) for t, s, c in (line.split(",") for line in fired)}) == counts
    sequence = committed(output_dir, "sequence")
    assert all(times == 1 for times in sequence.values()), "a sequence number was output twice"
    per_team: dict[str, list[int]] = collections.defaultdict(list)
    for line in sequence:
        team, number = line.split(",")
        per_team[team].append(int(number))
    records = collections.Counter()
    for (team, _), count in counts.items():
        records[team] += count
    assert {team: sorted(numbers) for team, numbers in per_team.items()} == {
        team: list(range(1, n + 1)) for team, n in records.items()
    }


def steps_with_data(log: str) -> int:
    """How many steps (over all the runs so far) read records from the source."""
    try:
        return sum(1 for record in timeline(log) if record["stage_id"] == 0 and record["elements_in"] > 0)
    except FileNotFoundError:
        return 0


def run_killable(command: list[str], log: str, kill_at: int | None, seconds: float, what: str) -> bool:
    """Runs ``command`` (a driver) in a session of its own; kills it with SIGKILL once
    ``kill_at`` steps have read data (its JVM with it). True if it finished by itself."""
    process = subprocess.Popen(
        command,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the kill takes Spark's JVM down with the Python driver
    )
    deadline = time.monotonic() + seconds
    while process.poll() is None:
        if kill_at is not None and steps_with_data(log) >= kill_at:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return False
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"{what} did not finish in {seconds:.0f} s")
        time.sleep(0.05)
    stderr = process.stderr.read().decode() if process.stderr else ""
    assert process.returncode == 0, stderr[-3000:]
    return True


def run_job(input_dir: str, output_dir: str, checkpoint_dir: str, log: str, kill_at: int | None, *flags: str) -> bool:
    """Runs the job; kills it with SIGKILL once ``kill_at`` steps have read data. True if it finished."""
    return run_killable([sys.executable, JOB, input_dir, output_dir, checkpoint_dir, log, *flags], log, kill_at, 300, "the stream job")


def run_job_here(input_dir: str, output_dir: str, checkpoint_dir: str, log: str) -> str:
    """Runs the job to its end in this process, on the tests' SparkSession (the same local[2]
    master and settings as the job's own); what it wrote on stderr."""
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        stream_job.main(input_dir, output_dir, checkpoint_dir, log)
    return said.getvalue()


def stop_with_signal(input_dir: str, output_dir: str, checkpoint_dir: str, log: str, signum: int, stop_at: int) -> tuple[int, str, float]:
    """Runs the job and sends ``signum`` to its process group once ``stop_at`` steps have
    read data; its exit status, what it printed, and the seconds it took to exit."""
    process = subprocess.Popen(
        [sys.executable, JOB, input_dir, output_dir, checkpoint_dir, log],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while steps_with_data(log) < stop_at:
        if process.poll() is not None or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"the job ended or stalled before {stop_at} steps read data")
        time.sleep(0.05)
    os.killpg(process.pid, signum)
    sent = time.monotonic()
    try:
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, output.decode(), time.monotonic() - sent


def committed(output_dir: str, name: str) -> collections.Counter:
    lines: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(output_dir, f"{name}-step-*", "*")):
        with open(path) as handle:
            lines.update(line.rstrip("\n") for line in handle)
    return lines


def totals(lines: collections.Counter) -> collections.Counter:
    found: collections.Counter = collections.Counter()
    for line, times in lines.items():
        team, start, total = line.split(",")
        found[(team, int(start))] += int(total) * times
    return found


def timeline(log: str) -> list[dict]:
    records = []
    with open(log) as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # the line a kill cut short
    return records


def check_watermarks(records: list[dict]) -> None:
    """Per stage: a replayed step has the watermarks it had before; they never go backwards."""
    by_stage: dict[str, dict[int, tuple]] = collections.defaultdict(dict)
    for record in records:
        marks = (record["input_watermark"], record["output_watermark"])
        seen = by_stage[record["stage"]].setdefault(record["step"], marks)
        assert seen == marks, f"{record['stage']} step {record['step']}: {marks} after a restart, {seen} before"
    for stage, steps in by_stage.items():
        ordered = [steps[s] for s in sorted(steps)]
        for before, after in itertools.pairwise(ordered):
            assert after[0] >= before[0] and after[1] >= before[1], f"{stage}: watermark went back {before} -> {after}"


def at_most_one_file_per_step(records: list[dict]) -> None:
    """max_files_per_trigger=1 holds per step, the first step after each restart included
    (the batches the query logged meanwhile wait for later steps)."""
    read = [record["elements_in"] for record in records if record["stage_id"] == 0]
    assert read and max(read) <= RECORDS_PER_FILE + 1, read


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, spark):
    base = tmp_path_factory.mktemp("uninterrupted")
    expected, counts = write_input_and_counts(str(base / "in"))
    run_job_here(str(base / "in"), str(base / "out"), str(base / "ck"), str(base / "log.jsonl"))
    return expected, committed(str(base / "out"), "totals"), committed(str(base / "out"), "bad"), counts, str(base / "out")


def output_is_the_uninterrupted_runs(out: str, log: str, uninterrupted) -> None:
    """What the runs of a stream killed and resumed committed into ``out`` is exactly what
    the uninterrupted run committed, and the watermarks they logged never went back."""
    expected, lines, bad, counts, _ = uninterrupted
    assert committed(out, "totals") == lines
    assert committed(out, "bad") == bad
    assert totals(committed(out, "totals")) == expected
    stateful_outputs_are_exact(out, counts)
    check_watermarks(timeline(log))


def test_uninterrupted_run_matches_plain_python(uninterrupted):
    expected, lines, bad, counts, out = uninterrupted
    assert totals(lines) == expected
    assert all(times == 1 for times in lines.values())  # each window's total written once
    assert sum(bad.values()) == dead_letters_written()
    stateful_outputs_are_exact(out, counts)


# One stream, three runs: stopped by a signal, then killed with SIGKILL at a random step, then
# finished; each behaviour is checked on the run that shows it, and the restarts together
# must give the uninterrupted run's output. One seed, one kill (and one more in the Hadoop
# checkpoint test below): the suite's short version; benchmarks/stream_soak.py kills the same
# job 50 times at random steps. SIGTERM here; SIGINT takes the same path
# (runners/spark/interrupts.py), checked by tests/runners/test_interrupts.py and by the
# standalone cluster's Ctrl-C.
@pytest.mark.parametrize(("signum", "seed", "kills"), [(signal.SIGTERM, 3, 1)])
def test_a_signal_stops_the_stream_at_a_checkpoint_and_after_a_kill_the_restarts_resume_exactly(
    tmp_path, uninterrupted, signum, seed, kills
):
    rng = random.Random(seed)
    input_dir = str(tmp_path / "in")
    write_input(input_dir)
    out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "log.jsonl")

    # The signal: a clean stop within seconds, at a checkpoint, with one line on how to resume.
    stop_at = 3
    returncode, output, seconds = stop_with_signal(input_dir, out, ck, log, signum, stop_at=stop_at)
    assert returncode == 128 + signum, output
    assert seconds < 30, f"{seconds:.1f}s to stop"
    name = signal.Signals(signum).name
    said = [line for line in output.splitlines() if line.startswith("sparkbeam:")]
    newest = CheckpointStore(ck, []).newest()
    assert newest is not None
    assert said == [
        f"sparkbeam: stopped on {name} after step {newest['step'] - 1}, checkpoint written; "
        f"run again with --checkpoint_dir={ck} to resume at step {newest['step']}"
    ]
    for noise in ("Traceback", "py4j", "Py4J", "Exception"):
        assert noise not in output
    # The checkpoint is at the step where the stream stopped: nothing ran after it.
    assert max(record["step"] for record in timeline(log)) == newest["step"] - 1

    # The kill: once so many steps (counted over all runs, replays included) have read data,
    # wherever the resumed process is then (a checkpoint, a sink commit, the log write).
    # The signal may have let one more step finish: the kill counts from what was read.
    already = steps_with_data(log)
    kill_points = sorted(already + k for k in rng.sample(range(1, FILES - already + 1), kills))
    for kill_at in kill_points:
        finished = run_job(input_dir, out, ck, log, kill_at)
        assert not finished, f"no kill: the job finished before {kill_at} steps read data"
    # The last restart has nothing to kill: it runs to the end in this process, on the tests'
    # SparkSession (as the uninterrupted run does), which has never run this stream: it
    # resumes from what the killed process left in the checkpoint directory alone.
    run_job_here(input_dir, out, ck, log)
    output_is_the_uninterrupted_runs(out, log, uninterrupted)
    at_most_one_file_per_step(timeline(log))


def test_a_file_url_checkpoint_through_hadoop_resumes_after_sigkill(tmp_path, uninterrupted):
    """--checkpoint_dir=file:///... served by Hadoop's FileSystem API: the write-ahead log's
    metadata, the journal and the checkpoints go through it (its .crc files prove it) and a
    run killed with SIGKILL resumes exactly."""
    input_dir = str(tmp_path / "in")
    write_input(input_dir)
    out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "log.jsonl")
    url = f"file://{ck}"
    assert not run_job(input_dir, out, url, log, 4, "--file_urls_through_hadoop")
    assert run_job(input_dir, out, url, log, None, "--file_urls_through_hadoop")
    assert os.path.exists(os.path.join(ck, ".sparkbeam-checkpoint.json.crc"))
    assert glob.glob(os.path.join(ck, "checkpoints", ".*.json.crc"))
    # the kill's temporary step folders were removed at recovery; empty steps made none
    assert [name for name in os.listdir(out) if name.startswith(".sparkbeam-")] == []
    output_is_the_uninterrupted_runs(out, log, uninterrupted)


def test_a_finished_stream_started_again_does_nothing_and_says_so(uninterrupted):
    """The run that ended with its sources exhausted left a checkpoint marked finished: started
    again on it, the stream runs no step, rewrites no output and says where and when it ended."""
    *_, out = uninterrupted
    base = os.path.dirname(out)
    ck, log = os.path.join(base, "ck"), os.path.join(base, "log.jsonl")
    steps_before = len(timeline(log))
    outputs = {path: os.stat(path).st_mtime_ns for path in glob.glob(os.path.join(out, "*", "*"))}
    newest = CheckpointStore(ck, []).newest()
    assert newest is not None and newest["finished"]
    stderr = run_job_here(os.path.join(base, "in"), out, ck, log)
    said = [line for line in stderr.splitlines() if line.startswith("sparkbeam:")]
    assert said == [
        f"sparkbeam: the stream in --checkpoint_dir={ck} finished at step {newest['step'] - 1}; "
        "nothing to do (give a new checkpoint directory to run it again)"
    ]
    assert len(timeline(log)) == steps_before  # no step ran
    assert {path: os.stat(path).st_mtime_ns for path in glob.glob(os.path.join(out, "*", "*"))} == outputs


# The same job through Spark Connect: the client (the job's process) is what SIGKILL takes
# down; the server, the tests' (tools/connect_server.py), keeps running with the killed
# client's query, which the restart fences off (runners/spark/connect/stream_intake.py). The
# keyed state's checkpoints are the classic format, written by the server's tasks
# (runners/spark/connect/state_files.py). The cases are in the full matrix (tests/full_matrix.sh):
# a kill resumed on Connect, the Connect checkpoint resumed on a classic session (its keys
# placed again), and a kill resumed on Connect with both runs reaching the stream's folders
# through the server, as from another machine (runners/spark/connect/server_files.py; every
# direct access refused and recorded: tests/runners/server_files_guard.py).
@pytest.mark.parametrize(("resume_on", "seed"), [("connect", 5), ("classic", 11), ("through_server", 7)])
def test_a_killed_spark_connect_client_resumes_exactly(tmp_path, uninterrupted, connect_server, resume_on, seed):
    rng = random.Random(seed)
    input_dir = str(tmp_path / "in")
    write_input(input_dir)
    out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "log.jsonl")
    remote = f"--spark_remote={connect_server.url}"
    direct = str(tmp_path / "direct-accesses")
    guard = [f"--files_through_server={direct}"] if resume_on == "through_server" else []
    kill_at = rng.randrange(4, FILES)  # after the first checkpoint (every 3 steps): its state is restored
    assert not run_job(input_dir, out, ck, log, kill_at, remote, *guard), "the job finished before the kill"
    newest = CheckpointStore(ck, []).newest()
    assert newest is not None
    chains = newest["chains"]
    assert chains and all(chain["placement"] == "spark-murmur3(portable_hash)" for chain in chains.values())
    flags = [] if resume_on == "classic" else [remote, *guard]
    assert run_job(input_dir, out, ck, log, None, *flags)
    assert not os.path.exists(direct), pathlib.Path(direct).read_text()  # no direct access to the stream's folders
    output_is_the_uninterrupted_runs(out, log, uninterrupted)
    at_most_one_file_per_step(timeline(log))


# The suite's short Connect checkpoint case (the SIGKILL ones above are in the full matrix):
# the same job through Spark Connect on the first two files, a checkpoint after every step,
# stopped by --max_steps after the first step, then started again on its checkpoint
# directory to the end, in this process. Both files fall in each team's first window, so
# the resumed run completes windows, counts and sequences that the first run began: their
# state must come back from the checkpoint. Its output is compared with what the
# uninterrupted run writes for those files, as plain Python computes it (the uninterrupted
# run is checked against the same computation above). The server's Python workers cannot
# import the tests' modules: the job's functions travel by value, as a script's do.
@pytest.fixture
def stream_job_by_value():
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(stream_job)
    yield
    cloudpickle.unregister_pickle_by_value(stream_job)


# Its "through_server" case (full matrix) runs as if the server were on another machine:
# every file operation of the client under the stream's folders goes through the server
# (runners/spark/connect/server_files.py), and a direct one would fail the run
# (tests/runners/server_files_guard.py).
@pytest.mark.usefixtures("stream_job_by_value")
@pytest.mark.parametrize("files", ["shared", "through_server"])
def test_a_spark_connect_stream_stopped_at_max_steps_resumes_from_its_checkpoint(tmp_path, connect_server, files):
    from tests.runners.server_files_guard import FOUND, through_server

    count = 2
    input_dir = str(tmp_path / "in")
    expected, counts = write_input_and_counts(input_dir, count)
    out, ck, log = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "log.jsonl")
    flags = (f"--spark_remote={connect_server.url}", "--checkpoint_interval=1")
    def guarded():
        return through_server(input_dir, out, ck) if files == "through_server" else contextlib.nullcontext([0])

    with guarded() as jobs:
        stream_job.main(input_dir, out, ck, log, *flags, "--max_steps=1")
    if files == "through_server":
        assert not FOUND and jobs[0] > 0
    newest = CheckpointStore(ck, []).newest()
    assert newest is not None and newest["step"] == 1 and not newest["finished"]
    assert newest["chains"] and all(chain["placement"] == "spark-murmur3(portable_hash)" for chain in newest["chains"].values())
    assert max(record["step"] for record in timeline(log)) == 0  # step 0, then stopped
    assert committed(out, "totals") == collections.Counter()  # no window complete yet
    with guarded() as jobs:
        stream_job.main(input_dir, out, ck, log, *flags)
    if files == "through_server":
        assert not FOUND and jobs[0] > 0
    assert CheckpointStore(ck, []).newest()["finished"]
    lines = committed(out, "totals")
    windows = collections.Counter((team, start) for team, start, _ in (line.split(",") for line in lines.elements()))
    assert all(times == 1 for times in windows.values()), f"a window's total was written twice: {lines}"
    assert totals(lines) == expected
    assert sum(committed(out, "bad").values()) == dead_letters_written(count)
    stateful_outputs_are_exact(out, counts)
    check_watermarks(timeline(log))
    at_most_one_file_per_step(timeline(log))
