"""What the windowed-scores benchmarks share: the events, the oracle, the peers' plumbing.

batch_windowed_scores.py and streaming_windowed_scores.py run the same workload (count and
sum per key per 1-minute window) and check every peer against the same plain-Python
oracle; sparkbeam_task_breakdown.py replays the batch one. This module holds what they
have in common, so that a size and a seed give the same events in every benchmark:

- the workload: ``generate_events``, ``share_behind``, ``write_events``, ``expected_totals``;
- the combine logic every SDK's CombineFn mixes in (``CountAndSumLogic``);
- the peers' plumbing: ``Bench`` (the shared SparkSession), ``start_bench``,
  ``prepare_peers``, ``PeerUnavailable``, ``compare`` (a peer's rows against the oracle);
- the command's common options (``add_common_arguments``) and table helpers (``cell``,
  ``runs_note``, ``busy_warning``, ``failure``).

Executors cannot import this module (only the driver has benchmarks/ on its path), so its
functions and classes are pickled by value, as a script's own (``__main__``) are
(``pickle_by_value``, which the peer modules call too).
"""

from __future__ import annotations

import argparse
import atexit
import glob
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs

# A sibling module: run as a file, a benchmark has its own directory on sys.path.
from measuring import load_average, start_spark

__all__ = [
    "BUSY_ELSEWHERE_WARNING",
    "EPOCH_MS",
    "KEY_COUNT",
    "WINDOW_MS",
    "WINDOW_SECONDS",
    "Bench",
    "CountAndSumLogic",
    "Event",
    "PeerUnavailable",
    "Row",
    "Totals",
    "add_common_arguments",
    "busy_warning",
    "cell",
    "compare",
    "connect_remote",
    "expected_totals",
    "failure",
    "generate_events",
    "make_workdir",
    "parse_common",
    "pickle_by_value",
    "prepare_peers",
    "prism_flags",
    "read_back",
    "require_apache_beam",
    "runs_note",
    "share_behind",
    "start_bench",
    "stop_bench",
    "write_events",
]

KEY_COUNT = 1000
WINDOW_SECONDS = 60
WINDOW_MS = WINDOW_SECONDS * 1000
HOUR_MS = 3_600_000
# 2026-01-01T00:00:00Z: minute-aligned, so the hour of event time is exactly 60 windows.
EPOCH_MS = 1_767_225_600_000
# Arrival lags event time by an exponential delay, so arrival order is not event-time order.
MEAN_DELAY_MS = 30_000

Event = tuple[str, int, int]  # (key, score, event time in epoch milliseconds)
Row = tuple[str, int, int, int]  # (key, window start in epoch milliseconds, count, sum)
Totals = dict[tuple[str, int], tuple[int, int]]

# Other processes using more than this many cores make a timing suspect on a small machine.
BUSY_ELSEWHERE_WARNING = 0.25

_Peer = TypeVar("_Peer")


# -- the workload ----------------------------------------------------------------------


def generate_events(count: int, seed: int) -> list[Event]:
    """``count`` events in arrival order, the same for the same seed."""
    rng = random.Random(seed)
    keys = [f"user{index:04d}" for index in range(KEY_COUNT)]
    arrivals = []
    for _ in range(count):
        event_ms = EPOCH_MS + rng.randrange(HOUR_MS)
        arrival_ms = event_ms + int(rng.expovariate(1 / MEAN_DELAY_MS))
        arrivals.append((arrival_ms, rng.choice(keys), rng.randint(1, 100), event_ms))
    arrivals.sort()
    return [(key, score, event_ms) for _, key, score, event_ms in arrivals]


def share_behind(events: list[Event]) -> float:
    """The share of events whose event time is earlier than one that arrived before them."""
    latest = EPOCH_MS - 1
    behind = 0
    for _, _, event_ms in events:
        if event_ms < latest:
            behind += 1
        else:
            latest = event_ms
    return behind / max(1, len(events))


def write_events(events: Iterable[Event], path: str) -> None:
    """The events as CSV lines ``key,score,event_ms``."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{key},{score},{event_ms}\n" for key, score, event_ms in events)


def expected_totals(events: list[Event]) -> Totals:
    """The oracle: the answer computed by a plain Python loop, with no engine involved."""
    counts: dict[tuple[str, int], int] = {}
    sums: dict[tuple[str, int], int] = {}
    for key, score, event_ms in events:
        slot = (key, event_ms - event_ms % WINDOW_MS)
        counts[slot] = counts.get(slot, 0) + 1
        sums[slot] = sums.get(slot, 0) + score
    return {slot: (counts[slot], sums[slot]) for slot in counts}


class CountAndSumLogic:
    """(count, sum) of integer scores; mixed into each SDK's CombineFn so both run this code."""

    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add_input(self, accumulator: tuple[int, int], score: int) -> tuple[int, int]:
        count, total = accumulator
        return count + 1, total + score

    def merge_accumulators(self, accumulators: Any) -> tuple[int, int]:
        count = total = 0
        for partial_count, partial_total in accumulators:
            count += partial_count
            total += partial_total
        return count, total

    def extract_output(self, accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator


def compare(expected: Totals, rows: list[Row]) -> str | None:
    """None when ``rows`` is exactly ``expected``, else what differs, with a few examples."""
    got: Totals = {}
    duplicates = []
    for key, window_ms, count, total in rows:
        slot = (key, window_ms)
        if slot in got:
            duplicates.append(slot)
        got[slot] = (count, total)
    missing = [slot for slot in expected if slot not in got]
    extra = [slot for slot in got if slot not in expected]
    wrong = [slot for slot in expected if slot in got and got[slot] != expected[slot]]
    if not (duplicates or missing or extra or wrong):
        return None
    problems = []
    for name, slots in (("duplicated", duplicates), ("missing", missing), ("unexpected", extra)):
        if slots:
            problems.append(f"{len(slots)} {name} (key, window), e.g. {slots[:2]}")
    if wrong:
        examples = [f"{slot}: {got[slot]} != {expected[slot]}" for slot in wrong[:2]]
        problems.append(f"{len(wrong)} wrong (count, sum), e.g. {'; '.join(examples)}")
    return "; ".join(problems)


# -- the peers' plumbing -----------------------------------------------------------------


@attrs.frozen
class Bench:
    """What every peer shares: the one SparkSession, its master, the shuffle width, a scratch dir."""

    spark: Any
    master: str
    partitions: int
    workdir: str


class PeerUnavailable(Exception):
    """A peer cannot run here (a missing package); the others still run."""


def read_back(output_dir: str, prefix: str) -> list[list[str]]:
    """The comma-separated fields of every line that a Beam peer's ``WriteToText`` wrote to
    ``output_dir/prefix*`` (Beam pickles its DoFns with their globals, so results travel by
    file); the directory is removed after."""
    fields: list[list[str]] = []
    for shard in glob.glob(os.path.join(output_dir, f"{prefix}*")):
        with open(shard, encoding="utf-8") as handle:
            fields.extend(line.rstrip("\n").split(",") for line in handle)
    shutil.rmtree(output_dir, ignore_errors=True)
    return fields


def require_apache_beam() -> None:
    """For a peer that runs Beam: ``PeerUnavailable``, saying how to install it, when
    ``apache_beam`` is not installed."""
    try:
        import apache_beam  # noqa: F401
    except ImportError as error:
        msg = f"Apache Beam is not installed ({error}); pip install apache-beam"
        raise PeerUnavailable(msg) from None


_CONNECT: list[Any] = []  # the one Spark Connect server of this command, once started


def connect_remote(bench: Bench) -> str:
    """The ``--spark_remote`` URL of this command's one Spark Connect server
    (tools/connect_server.py: pip's PySpark, loopback, the bench's master and shuffle width,
    so that a Connect peer has the cores and partitions of the classic ones), started on
    first use before anything is timed (its CPU counts in the peer's, as a child of this
    process) and stopped when the command exits. ``PeerUnavailable`` without the
    ``connect`` extra's client packages or when the server does not start."""
    if not _CONNECT:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if root not in sys.path:
            sys.path.append(root)
        try:
            import grpc  # noqa: F401  (the Connect client's transport: pip install 'sparkbeam[connect]')
        except ImportError as error:
            msg = f"the Spark Connect client is not installed ({error}); pip install 'sparkbeam[connect]'"
            raise PeerUnavailable(msg) from None
        from tools.connect_server import ConnectServer, ConnectServerError

        conf = {"spark.sql.shuffle.partitions": str(bench.partitions), "spark.default.parallelism": str(bench.partitions)}
        server = ConnectServer(os.path.join(bench.workdir, "connect-server"), master=bench.master, conf=conf)
        try:
            server.start()
        except ConnectServerError as error:
            raise PeerUnavailable(str(error)) from None
        atexit.register(server.stop)
        _CONNECT.append(server)
    return str(_CONNECT[0].url)


_PRISM: list[Any] = []  # the one Prism job server of this command, once started


def prism_flags() -> list[str]:
    """Beam pipeline flags for Beam's Prism runner (``--runner=PrismRunner``, its job
    endpoint, LOOPBACK): one job server for the whole command, built by tools/prism.py at the
    installed apache-beam's version on first use and started here, before anything is timed
    (its CPU counts in the peer's, as a child of this process); stopped when the command
    exits. ``PeerUnavailable`` when it cannot be built here (no Go)."""
    require_apache_beam()
    if not _PRISM:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if root not in sys.path:
            sys.path.append(root)
        from tools.prism import PrismBuildError, PrismServer, prism_binary

        try:
            binary = prism_binary(log=lambda line: print(f"   {line}", flush=True))
            server = PrismServer(binary, log_path=os.path.join(tempfile.gettempdir(), f"sparkbeam-bench-prism-{os.getpid()}.log"))
            server.start()
        except PrismBuildError as error:
            raise PeerUnavailable(str(error)) from None
        atexit.register(server.stop)
        _PRISM.append(server)
    return _PRISM[0].pipeline_flags()


def start_bench(args: argparse.Namespace, workdir: str, app_name: str, partitions_are: str, settings: dict[str, str] | None = None) -> Bench:
    """Print the machine, start the shared SparkSession (not in any peer's time) with the
    shuffle width every Spark peer uses, and print what it is."""
    print(
        f"python {sys.version.split()[0]} on {os.cpu_count()} cores, load average "
        f"{load_average()}; peers: {', '.join(args.peers)}"
    )
    started = time.perf_counter()
    spark = start_spark(args.master, args.spark_conf, app_name, settings)
    session_seconds = time.perf_counter() - started
    sc = spark.sparkContext
    partitions = args.partitions or max(2, sc.defaultParallelism)
    # DataFrame shuffles and Structured Streaming's state get the same width as sparkbeam's;
    # set before any query starts (a streaming query's checkpoint fixes it).
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    import pyspark

    print(
        f"SparkSession started in {session_seconds:.2f} s (not in any peer's time): pyspark "
        f"{pyspark.__version__}, master {sc.master}, default parallelism {sc.defaultParallelism}, "
        f"{partitions} {partitions_are}"
    )
    return Bench(spark, sc.master, partitions, workdir)


def make_workdir(args: argparse.Namespace, prefix: str) -> str:
    """The scratch directory (``--workdir``, else a new temporary one), and ``--profile-dir``."""
    workdir = args.workdir or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(workdir, exist_ok=True)
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
    return workdir


def stop_bench(bench: Bench, args: argparse.Namespace) -> None:
    """Stop the shared session; remove the scratch directory unless the user named it."""
    bench.spark.stop()
    if args.workdir is None:
        shutil.rmtree(bench.workdir, ignore_errors=True)


def prepare_peers(
    names: list[str], prepare: Callable[[str], _Peer], describe: Callable[[str, _Peer], str]
) -> tuple[dict[str, _Peer], dict[str, str]]:
    """Each peer prepared (its imports, untimed) and described; those that cannot run here,
    with why."""
    peers: dict[str, _Peer] = {}
    unavailable: dict[str, str] = {}
    for name in names:
        try:
            before = time.perf_counter()
            peers[name] = prepare(name)
            print(f"  {name}: {describe(name, peers[name])} (imports {time.perf_counter() - before:.2f} s, untimed)")
        except Exception as error:
            unavailable[name] = f"unavailable: {error}"
            print(f"  {name}: {unavailable[name]}")
    return peers, unavailable


def failure(error: Exception) -> str:
    """How a peer failed, in one line for the table; the whole traceback goes to stderr."""
    traceback.print_exc(file=sys.stderr)
    text = str(error).strip()
    return f"failed: {type(error).__name__}: {text.splitlines()[0] if text else ''}"


def cell(value: float | None, spec: str) -> str:
    """A table cell: the figure in ``spec`` (e.g. ``".2f"``), or ``-`` when there is none."""
    return "-" if value is None else format(value, spec)


def runs_note(runs: list[float]) -> str:
    """Every timed run's seconds, after the result, when there was more than one."""
    return "" if len(runs) < 2 else f" (runs: {', '.join(f'{s:.2f}' for s in runs)})"


def busy_warning(others_cores: dict[str, float | None]) -> list[str]:
    """A warning line when other processes kept the machine busy during a peer's runs."""
    busy = [peer for peer, cores in others_cores.items() if (cores or 0) > BUSY_ELSEWHERE_WARNING]
    if not busy:
        return []
    return [
        f"warning: other processes kept more than {BUSY_ELSEWHERE_WARNING} cores busy during "
        f"{', '.join(busy)}; those timings are inflated (see 'others')"
    ]


def add_common_arguments(
    parser: argparse.ArgumentParser, peers: tuple[str, ...], *, warmup_events: int, warmup_help: str, partitions_help: str, workdir_help: str
) -> None:
    """The options every windowed-scores benchmark takes."""
    parser.add_argument(
        "--events",
        type=int,
        action="append",
        help="events per run; repeat for several sizes (default 100000)",
    )
    parser.add_argument(
        "--peers",
        default=",".join(peers),
        help=f"comma-separated, from {','.join(peers)} (default: all)",
    )
    parser.add_argument(
        "--master", default="local[*]", help="Spark master of the shared session (default local[*])"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed runs per peer; the best is reported (default 1)",
    )
    parser.add_argument("--warmup-events", type=int, default=warmup_events, help=warmup_help)
    parser.add_argument("--partitions", type=int, default=None, help=partitions_help)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--workdir", default=None, help=workdir_help)
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting for the shared session (repeatable)",
    )
    parser.add_argument(
        "--profile-dir",
        default=None,
        help="profile each peer's timed runs into DIR (driver cProfile; executor profiles too with --spark-conf spark.python.profile=true); slows every peer down",
    )


def parse_common(parser: argparse.ArgumentParser, argv: list[str] | None, peers: tuple[str, ...]) -> argparse.Namespace:
    """Parse, with the checks every benchmark makes: known peers, positive sizes."""
    args = parser.parse_args(argv)
    args.events = args.events or [100_000]
    args.peers = [name.strip() for name in args.peers.split(",") if name.strip()]
    unknown = [name for name in args.peers if name not in peers]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(peers)}")
    if args.repeat < 1 or any(count < 1 for count in args.events):
        parser.error("--repeat and --events must be positive")
    return args


def pickle_by_value(module_name: str) -> None:
    """Have PySpark pickle the functions and classes of a benchmark module by value, as a
    script's own (``__main__``) are: executors cannot import it (only the driver has
    benchmarks/ on its path). Each module that builds what runs on executors calls it."""
    try:
        from pyspark import cloudpickle
    except ImportError:  # a peer that needs no Spark (the task breakdown) still imports this
        return
    cloudpickle.register_pickle_by_value(sys.modules[module_name])


pickle_by_value(__name__)
