"""What a benchmark run did to the machine besides taking time: memory, CPU, profiles.

Driver-side helpers for the benchmark scripts (nothing here is shipped to executors).
Memory and CPU come from /proc (or psutil, where ``rss_mb`` finds it installed), so they
are Linux-only and report None elsewhere.
"""

from __future__ import annotations

import contextlib
import cProfile
import glob
import os
import pstats
import resource
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "MachineWatch",
    "PeerProfile",
    "driver_peak_rss_mb",
    "load_average",
    "median_slope",
    "percentile",
    "process_tree",
    "pss_mb",
    "rss_mb",
    "spark_jvm_memory",
    "start_spark",
]


class MachineWatch:
    """What the machine did during a peer's runs besides the timing.

    ``peak_mb``: peak memory of this process and its descendants (Spark's JVM, PySpark's
    Python workers), as PSS (shared pages split between the processes sharing them, so
    forked Python workers are not counted twice), sampled every ``interval`` seconds from
    /proc; a spike shorter than the interval can be missed.

    ``others_cores``: CPU that processes outside that tree used meanwhile, in cores (busy
    time of the machine from /proc/stat minus the tree's own). On a shared machine this is
    what makes a timing untrustworthy, so the table shows it.

    ``cpu_seconds``: CPU time of that tree meanwhile (driver, JVM with its JIT and GC
    threads, Python workers). It measures work rather than waiting, so it moves much less
    than wall-clock time when other processes compete for the cores.

    All stay None where /proc is not available (not Linux).
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_mb: float | None = None
        self.others_cores: float | None = None
        self.cpu_seconds: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self._start: tuple[float, int, int] | None = None

    def __enter__(self) -> MachineWatch:
        if os.path.isdir("/proc/self"):
            self._start = (
                time.perf_counter(),
                _machine_busy_ticks(),
                _tree_cpu_ticks(_descendants(os.getpid())),
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._start is None:
            return
        self._stop.set()
        self._thread.join()
        started, busy_before, tree_before = self._start
        elapsed = time.perf_counter() - started
        busy = _machine_busy_ticks() - busy_before
        tree = _tree_cpu_ticks(_descendants(os.getpid())) - tree_before
        ticks_per_second = os.sysconf("SC_CLK_TCK")
        self.cpu_seconds = tree / ticks_per_second
        self.others_cores = max(0.0, (busy - tree) / ticks_per_second / max(elapsed, 1e-9))

    def _sample_until_stopped(self) -> None:
        while True:
            total_kb = sum(_memory_kb(pid) for pid in _descendants(os.getpid()))
            self.peak_mb = max(self.peak_mb or 0.0, total_kb / 1024)
            if self._stop.wait(self.interval):
                return


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        # The command name may hold spaces and parentheses; the fields after its last ')' do not.
        # What is left starts at field 3 (state): ppid is [1], utime..cstime are [11:15].
        return handle.read().rsplit(")", 1)[1].split()


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(_stat_fields(int(entry))[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, ()))
    return found


def _tree_cpu_ticks(pids: list[int]) -> int:
    # cutime/cstime count children that exited and were reaped (PySpark's finished workers).
    total = 0
    for pid in pids:
        try:
            total += sum(int(field) for field in _stat_fields(pid)[11:15])
        except (OSError, IndexError, ValueError):
            continue
    return total


def _machine_busy_ticks() -> int:
    with open("/proc/stat", encoding="utf-8") as handle:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (
            int(v) for v in handle.readline().split()[1:9]
        )
    return user + nice + system + irq + softirq + steal


def _memory_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm", encoding="utf-8") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return 0


class TreeCpu:
    """CPU seconds of a process and its descendants from now on, from /proc: each process's
    user + system time as last sampled, so that a process tree killed between samples still
    counts what it used up to the last sample (one alive for less than a sample is missed)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.baseline = self._ticks()
        self.last: dict[int, int] = {}

    def _ticks(self) -> dict[int, int]:
        ticks = {}
        for pid in _descendants(self.root):
            try:
                fields = _stat_fields(pid)
                ticks[pid] = int(fields[11]) + int(fields[12])
            except (OSError, IndexError, ValueError):
                continue
        return ticks

    def sample(self) -> None:
        self.last.update(self._ticks())

    @property
    def seconds(self) -> float:
        return sum(ticks - self.baseline.get(pid, 0) for pid, ticks in self.last.items()) / os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> list[int]:
    """``root`` and every process descended from it (from /proc)."""
    return _descendants(root)


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def rss_mb(pid: int) -> float | None:
    """Resident memory of one process in MB (psutil if installed, else /proc); None once it is gone."""
    try:
        import psutil
    except ImportError:
        try:
            with open(f"/proc/{pid}/statm", encoding="utf-8") as handle:
                return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:
            return None
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return None


def pss_mb(pids: list[int]) -> float:
    """Proportional memory of these processes in MB: pages they share (forked Python
    workers) are split between them rather than counted in each."""
    return sum(_memory_kb(pid) for pid in pids) / 1024


def spark_jvm_memory(spark_context: Any) -> dict[str, float]:
    """The JVM's memory as the SparkContext sees it, in MB: ``jvm_heap_mb``, the heap in use
    right after a full collection (what is live, not what awaits collection), and
    ``storage_mb``, the storage memory the executors' block managers hold (persisted RDD
    blocks such as keyed state, and broadcasts), from ``getExecutorMemoryStatus``. The
    collection is forced, so sample sparingly.

    Not the status tracker's ``usedOnHeapStorageMemory``: in PySpark 4.x it keeps counting
    broadcast blocks (every job's task binary) after Spark removed them, so it grows by
    about 10 KB per job while the block manager holds a few hundred KB."""
    management = spark_context._jvm.java.lang.management.ManagementFactory
    management.getMemoryMXBean().gc()
    # What each heap pool held when its last collection ended (the one just forced), so
    # that objects allocated since by running jobs do not count.
    heap = sum(
        pool.getCollectionUsage().getUsed()
        for pool in management.getMemoryPoolMXBeans()
        if pool.getType().toString() == "Heap memory" and pool.getCollectionUsage() is not None
    )
    storage = 0
    statuses = spark_context._jsc.sc().getExecutorMemoryStatus().iterator()  # executor -> (max, remaining)
    while statuses.hasNext():
        limits = statuses.next()._2()
        storage += limits._1() - limits._2()
    return {"jvm_heap_mb": heap / 2**20, "storage_mb": storage / 2**20}


def median_slope(xs: list[float], ys: list[float]) -> float:
    """The Theil-Sen slope: the median of the slopes between every two points, so that one
    odd sample (a collection that ran during a burst) cannot tilt it; nan for fewer than two."""
    slopes = sorted(
        (ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]
    )
    if not slopes:
        return float("nan")
    middle = len(slopes) // 2
    return slopes[middle] if len(slopes) % 2 else (slopes[middle - 1] + slopes[middle]) / 2


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie (nearest rank); nan for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def load_average() -> str:
    """The machine's load averages over 1, 5 and 15 minutes, for a run's printed context."""
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def driver_peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


class PeerProfile:
    """Profiles of one peer's timed runs, gathered run by run (the peers' runs interleave).

    With a directory, each run is profiled on the driver with cProfile, into
    DIRECTORY/NAME-driver.prof (Beam's FnApiRunner works in this process, so that is all of
    Beam). When the session runs with ``spark.python.profile=true``, PySpark also profiles
    every RDD's Python function on the executors; the run's go to
    DIRECTORY/NAME-executors/rdd_<id>.pstats. Profiling slows everything down: the timings
    of a profiled run are not benchmark figures. Without a directory it does nothing.
    """

    def __init__(self, directory: str | None, name: str, spark: Any) -> None:
        self.directory = directory
        self.name = name
        self.runs = 0
        self._driver = cProfile.Profile() if directory is not None else None
        context = spark.sparkContext
        on = context.getConf().get("spark.python.profile", "false").lower() == "true"
        self._collector = context.profiler_collector if directory is not None and on else None

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        if self._driver is None:
            yield
            return
        if self._collector is not None:
            # PySpark keeps the profile of every RDD since the session started: keep this run's.
            self._collector.profilers.clear()
        self._driver.enable()
        try:
            yield
        finally:
            self._driver.disable()
            self.runs += 1
            if self._collector is not None:
                self._collector.dump_profiles(self._executors_dir())
                self._collector.profilers.clear()

    def summary(self, events_per_run: int) -> str | None:
        """Write the driver's profile; say where both are and how many Python calls per event."""
        if self._driver is None or self.directory is None or not self.runs:
            return None
        events = events_per_run * self.runs
        driver_path = os.path.join(self.directory, f"{self.name}-driver.prof")
        self._driver.dump_stats(driver_path)
        calls = pstats.Stats(driver_path).total_calls  # type: ignore[attr-defined]
        notes = [f"driver {driver_path} ({calls / events:,.1f} Python calls per event)"]
        executor_files = sorted(glob.glob(os.path.join(self._executors_dir(), "*.pstats")))
        if executor_files:
            calls = pstats.Stats(*executor_files).total_calls  # type: ignore[attr-defined]
            notes.append(f"executors {self._executors_dir()} ({calls / events:,.1f} per event)")
        return f"profiles of {self.name}: " + "; ".join(notes)

    def _executors_dir(self) -> str:
        return os.path.join(self.directory or "", f"{self.name}-executors")


def start_spark(
    master: str, extra_conf: list[str], app_name: str, settings: dict[str, str] | None = None
) -> Any:
    """The SparkSession every Spark peer of a benchmark shares (UI off, quiet logs).

    ``settings`` are the benchmark's own defaults; ``extra_conf`` (``KEY=VALUE`` from
    ``--spark-conf``) overrides them.
    """
    # Executors must run this interpreter, where sparkbeam is installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    merged = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", **(settings or {})}
    for item in extra_conf:
        key, sep, value = item.partition("=")
        if not sep:
            msg = f"--spark-conf takes KEY=VALUE, got {item!r}"
            raise SystemExit(msg)
        merged[key.strip()] = value.strip()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
